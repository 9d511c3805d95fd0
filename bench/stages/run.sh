#!/bin/sh
# bench/stages/run.sh: the overhead of one stage, as a whole mspipe process
# sees it. Runs a 1-stage and a 10-stage chain of `exec` stages (each runs
# `true`) in turn, ROUNDS times each after one warm-up, with --no-cache,
# and prints the median wall and CPU time (user+sys of mspipe and every
# process it waited for: plugins and their commands) of each chain and the
# cost of each extra stage: (10-stage - 1-stage) / 9.
#
#   bench/stages/run.sh                 # 7 rounds
#   ROUNDS=15 bench/stages/run.sh
#   MSPIPE=/path/to/mspipe bench/stages/run.sh   # measure another binary
#   BASELINE=/path/to/old/mspipe bench/stages/run.sh   # and this one beside it,
#                                       # in turn within each round
set -eu
ROUNDS=${ROUNDS:-7}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/mspipe-bench-stages.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
if [ -z "${MSPIPE:-}" ]; then
	(cd "$root" && go build -o "$work/mspipe" ./cmd/mspipe)
	MSPIPE=$work/mspipe
fi
[ -x /usr/bin/time ] || { echo "bench/stages: needs /usr/bin/time (Debian: apt-get install time)" >&2; exit 2; }

chain() { # chain N: a spec of N exec stages, each needing the previous one
	{
		echo "version: 1"
		echo "name: chain$1"
		echo "stages:"
		i=1
		while [ "$i" -le "$1" ]; do
			echo "  s$i:"
			echo "    uses: exec"
			[ "$i" -gt 1 ] && echo "    needs: [s$((i - 1))]"
			echo '    with: {command: ["true"]}'
			i=$((i + 1))
		done
	} >"$work/chain$1.yaml"
}
chain 1
chain 10

once() { # once BIN TAG N: append "wall cpu" of one run of the N-stage chain by BIN to $work/TAG.N
	/usr/bin/time -f '%e %U %S' -o "$work/time" "$1" run "$work/chain$3.yaml" --no-cache --no-progress \
		--runs-dir "$work/runs" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
	awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' "$work/time" >>"$work/$2.$3"
	rm -rf "$work/runs"
}
median() { # median COLUMN FILE
	cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Each binary measured: "TAG BIN" lines; the baseline first, if any.
: >"$work/bins"
[ -n "${BASELINE:-}" ] && echo "baseline $BASELINE" >>"$work/bins"
echo "measured $MSPIPE" >>"$work/bins"
while read -r tag bin; do
	once "$bin" "$tag" 1
	once "$bin" "$tag" 10
	: >"$work/$tag.1"
	: >"$work/$tag.10"
done <"$work/bins"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
r=0
while [ "$r" -lt "$ROUNDS" ]; do
	# Rotate which binary goes first, so neither always follows the other.
	if [ $((r % 2)) -eq 0 ]; then order=$(cat "$work/bins"); else order=$(sort -r "$work/bins"); fi
	echo "$order" | while read -r tag bin; do
		once "$bin" "$tag" 10
		once "$bin" "$tag" 1
	done
	r=$((r + 1))
done

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "$("$MSPIPE" version 2>/dev/null | head -1), $cpu, $(nproc) CPUs, load average before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$ROUNDS rounds, medians of whole-process figures (/usr/bin/time: wall, user+sys of mspipe and all it waited for)"
echo
echo "| binary | 1 stage wall s | 1 stage cpu s | 10 stages wall s | 10 stages cpu s | each extra stage wall | each extra stage cpu |"
echo "|---|---|---|---|---|---|---|"
while read -r tag bin; do
	w1=$(median 1 "$work/$tag.1") c1=$(median 2 "$work/$tag.1")
	w10=$(median 1 "$work/$tag.10") c10=$(median 2 "$work/$tag.10")
	awk -v t="$tag" -v w1="$w1" -v w10="$w10" -v c1="$c1" -v c10="$c10" \
		'BEGIN { printf "| %s | %s | %s | %s | %s | %.1f ms | %.1f ms |\n", t, w1, c1, w10, c10, (w10 - w1) / 9 * 1000, (c10 - c1) / 9 * 1000 }'
done <"$work/bins"
