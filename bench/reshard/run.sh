#!/usr/bin/env bash
# Reshard 8 -> 4 of a synthetic checkpoint set, three ways in one run: mspipe
# ckpt reshard, the naive MindSpore-style Python/numpy script (naive.py), and
# the disk's own write bandwidth (dd with fsync). Prints a markdown table.
#
#   bench/reshard/run.sh            # a 2 GiB set (about 4.3 GB on disk in all)
#   QUICK=1 bench/reshard/run.sh    # a 64 MiB set, a quick look
#   REPEAT=5 bench/reshard/run.sh   # mspipe and dd 5 times in turn (default 3)
#
# WORK (default /tmp/mspipe-bench-reshard) holds the set and the outputs; the
# set is kept between runs (delete WORK to regenerate it). MAX_MEMORY is
# mspipe's cap (default 512MiB).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/mspipe-bench-reshard}
size=2GiB
[[ "${QUICK:-}" == 1 ]] && size=64MiB
max_memory=${MAX_MEMORY:-512MiB}
set_dir=$work/set-$size
py=/usr/bin/python3 # Debian's, for python3-numpy

if ! $py -c 'import numpy' 2>/dev/null; then
  echo "installing python3-numpy for the naive script" >&2
  apt-get install -y python3-numpy >/dev/null || { apt-get update >/dev/null && apt-get install -y python3-numpy >/dev/null; }
fi
[[ -x /usr/bin/time ]] || apt-get install -y time >/dev/null

mkdir -p "$work"
(cd "$root" && go build -o "$work/mspipe" ./cmd/mspipe)
if [[ ! -f "$set_dir/device7/ckpt_7/CKP-1_100.ckpt" ]]; then
  rm -rf "$set_dir"
  (cd "$root" && go run ./bench/reshard/gen -out "$set_dir" -ranks 8 -size "$size")
fi
set_bytes=$(du -sb "$set_dir" | cut -f1)

# measure NAME CMD...: runs CMD under /usr/bin/time -v after a sync, records
# wall seconds and peak RSS (KiB) in $work/NAME.time.
measure() {
  local name=$1
  shift
  sync
  /usr/bin/time -v -o "$work/$name.time" "$@" >"$work/$name.out" 2>&1 || {
    echo "$name failed:" >&2
    cat "$work/$name.out" "$work/$name.time" >&2
    exit 1
  }
}
wall() { # elapsed "h:mm:ss" or "m:ss.ss" to seconds
  awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$work/$1.time"
}
rss() { awk -F': ' '/Maximum resident set size/ {print $2}' "$work/$1.time"; }
cpu() { awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$work/$1.time"; }

rm -rf "$work/out-mspipe" "$work/out-naive" "$work/dd.bin"
load=$(cut -d' ' -f1-3 /proc/loadavg)
# mspipe and dd run REPEAT times in turn, so that both see the same
# machine; the table shows each one's median run by wall time. dd writes as
# many bytes as the reshard wrote, in 16 MiB blocks, and fsyncs.
repeat=${REPEAT:-3}
for i in $(seq "$repeat"); do
  rm -rf "$work/out-mspipe" "$work/dd.bin"
  measure "mspipe.$i" "$work/mspipe" ckpt reshard "$set_dir" --devices 4 -o "$work/out-mspipe" --max-memory "$max_memory"
  out_bytes=$(du -sb "$work/out-mspipe" | cut -f1)
  measure "dd.$i" dd if=/dev/zero of="$work/dd.bin" bs=16M count=$(((out_bytes + (16 << 20) - 1) / (16 << 20))) conv=fsync
  dd_bytes=$(stat -c %s "$work/dd.bin")
done
median() { # NAME: the run of NAME.1..REPEAT with the median wall time
  for i in $(seq "$repeat"); do echo "$(wall "$1.$i") $i"; done | sort -n | awk -v m=$(((repeat + 1) / 2)) 'NR == m {print $2}'
}
cp "$work/mspipe.$(median mspipe).time" "$work/mspipe.time"
cp "$work/dd.$(median dd).time" "$work/dd.time"
mspipe_walls=$(for i in $(seq "$repeat"); do wall "mspipe.$i"; done | xargs)
dd_walls=$(for i in $(seq "$repeat"); do wall "dd.$i"; done | xargs)
measure naive $py "$root/bench/reshard/naive.py" "$set_dir" "$work/out-naive" 4

same=yes
for r in 0 1 2 3; do
  f=device$r/ckpt_$r/CKP-1_100.ckpt
  cmp -s "$work/out-mspipe/$f" "$work/out-naive/$f" || same=no
done
rm -f "$work/dd.bin"

cpu_model=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
disk=$(df -h "$work" | awk 'NR == 2 {print $1 " (" $2 ", " $5 " used)"}')
echo "CPU: $cpu_model, $(nproc) cores; disk: $disk; load average before the runs: $load"
echo "set: $set_dir, 8 ranks, $set_bytes bytes; output: 4 ranks, $out_bytes bytes; --max-memory $max_memory"
echo "outputs of mspipe and the naive script byte-identical: $same"
echo "wall s of the $repeat runs (median in the table): mspipe $mspipe_walls; dd $dd_walls"
echo
echo "| method | wall s | CPU s (user+sys) | MB/s written | peak RSS MiB | vs naive |"
echo "|---|---:|---:|---:|---:|---:|"
nw=$(wall naive)
row() { # name seconds bytes
  awk -v n="$1" -v s="$2" -v b="$3" -v r="$(rss "$1")" -v c="$(cpu "$1")" -v nw="$nw" \
    'BEGIN {printf "| %s | %.2f | %.2f | %.0f | %.0f | %.1fx |\n", n, s, c, b / s / 1e6, r / 1024, nw / s}'
}
row mspipe "$(wall mspipe)" "$out_bytes"
row naive "$nw" "$out_bytes"
row dd "$(wall dd)" "$dd_bytes"
grep -E '^read ' "$work/mspipe.1.out" | sed 's/^/mspipe: /'
