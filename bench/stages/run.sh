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

once() { # once N: append "wall cpu" of one run of the N-stage chain to $work/tN
	/usr/bin/time -f '%e %U %S' -o "$work/time" "$MSPIPE" run "$work/chain$1.yaml" --no-cache --no-progress \
		--runs-dir "$work/runs" >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
	awk '{ printf "%.3f %.3f\n", $1, $2 + $3 }' "$work/time" >>"$work/t$1"
	rm -rf "$work/runs"
}
median() { # median COLUMN FILE
	cut -d' ' -f"$1" "$2" | sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

once 1
once 10
: >"$work/t1"
: >"$work/t10"
r=0
while [ "$r" -lt "$ROUNDS" ]; do
	once 10
	once 1
	r=$((r + 1))
done

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo "$("$MSPIPE" version 2>/dev/null | head -1), $cpu, $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$ROUNDS rounds, medians of whole-process figures (/usr/bin/time: wall, user+sys of mspipe and all it waited for)"
echo
w1=$(median 1 "$work/t1") c1=$(median 2 "$work/t1")
w10=$(median 1 "$work/t10") c10=$(median 2 "$work/t10")
echo "| chain | wall s | cpu s |"
echo "|---|---|---|"
echo "| 1 stage | $w1 | $c1 |"
echo "| 10 stages | $w10 | $c10 |"
awk -v w1="$w1" -v w10="$w10" -v c1="$c1" -v c10="$c10" \
	'BEGIN { printf "| each extra stage | %.1f ms | %.1f ms |\n", (w10 - w1) / 9 * 1000, (c10 - c1) / 9 * 1000 }'
