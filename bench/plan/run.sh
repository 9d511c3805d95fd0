#!/usr/bin/env bash
# Times `mspipe plan` of auto_parallel on rank-table clusters of 8 to 4,096
# devices (1 to 512 servers of 8), for wide_net and resnet50, on both
# machine models (local and ascend910), and prints a markdown table: wall
# and CPU time (user + system) and peak memory (maximum resident set) from
# /usr/bin/time -v, with the predicted step the plan prints.
#
# The rank tables come from bench/plan/ranktable (mspipe ranktable generate
# stops at 254 simulated hosts).
# Settings (environment): HOSTS="1 8 64 256 512" MODELS="wide_net resnet50"
# MACHINES="local ascend910" (about a minute on 2 idle cores).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
hosts="${HOSTS:-1 8 64 256 512}"
models="${MODELS:-wide_net resnet50}"
machines="${MACHINES:-local ascend910}"
[ -x /usr/bin/time ] || { echo "bench/plan needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/mspipe" ./cmd/mspipe && go build -o "$work/ranktable" ./bench/plan/ranktable)

echo "CPU: $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), $(nproc) cores; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| model | machine | servers × 8 | devices | wall s | CPU s | max RSS MiB | predicted step |"
echo "|---|---|---:|---:|---:|---:|---:|---|"
for model in $models; do
	for machine in $machines; do
		for h in $hosts; do
			table="$work/rt-$h.json"
			[ -f "$table" ] || "$work/ranktable" -hosts "$h" -o "$table"
			spec="$work/plan-$h-$model.yaml"
			cat >"$spec" <<SPEC
version: 1
name: plan-bench
cluster: {rank_table: rt-$h.json}
stages:
  train:
    uses: npu/train
    with: {data: /nonexistent, model: $model, mode: auto_parallel}
SPEC
			/usr/bin/time -v -o "$work/time" "$work/mspipe" plan "$spec" --machine "$machine" >"$work/out" 2>"$work/err" || {
				echo "mspipe plan failed for $model on $h servers ($machine):" >&2
				cat "$work/err" >&2
				exit 1
			}
			wall=$(awk -F': ' '/Elapsed \(wall clock\)/{n=split($2,p,":"); s=0; for(i=1;i<=n;i++) s=s*60+p[i]; printf "%.2f", s}' "$work/time")
			cpu=$(awk -F': ' '/User time/{u=$2} /System time/{s=$2} END{printf "%.2f", u+s}' "$work/time")
			rss=$(awk -F': ' '/Maximum resident set size/{printf "%.0f", $2/1024}' "$work/time")
			step=$(grep -o 'predicted step [^ ]* [^ ]*' "$work/out" | head -1 | cut -d' ' -f3-)
			echo "| $model | $machine | $h | $((h * 8)) | $wall | $cpu | $rss | ${step:-?} |"
		done
	done
done
