#!/usr/bin/env bash
# Trains ResNet-20 (batch 32, 3×32×32, SGD momentum 0.9, lr 0.01) with mspipe
# and with PyTorch side by side, at the same threads and for the same number
# of steps, in one run, and prints a markdown table of images/s.
#
# PyTorch runs twice per cell: with glibc's malloc as it comes, and "tuned":
# jemalloc (LD_PRELOAD) with its decay off (MALLOC_CONF), so freed blocks are
# reused instead of returned to the kernel and faulted in again each step.
# The page-fault table shows what that changes.
#
# Settings (environment): THREADS="1 2" ROUNDS=3 WARMUP=3 STEPS=20 (about
# 3-4 minutes on 2 cores).
# Installs Debian's python3-torch and libjemalloc2 when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
threads="${THREADS:-1 2}"
rounds="${ROUNDS:-3}"
warmup="${WARMUP:-3}"
steps="${STEPS:-20}"
python=/usr/bin/python3 # Debian's interpreter, which python3-torch installs into
# awk reads the whole list: exiting at the first match could kill ldconfig
# with SIGPIPE, which pipefail and set -e turned into a silent exit 141.
find_jemalloc() { /sbin/ldconfig -p | awk '/libjemalloc\.so\.2 / && !found {print $NF; found = 1}'; }

need=()
"$python" -c 'import torch' >/dev/null 2>&1 || need+=(python3-torch)
[ -n "$(find_jemalloc)" ] || need+=(libjemalloc2)
if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	echo "installing ${need[*]}" >&2
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
jemalloc="$(find_jemalloc)"
if [ -z "$jemalloc" ]; then
	echo "bench/train/run.sh: libjemalloc.so.2 not found after installing libjemalloc2" >&2
	exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/train" ./bench/train)
results="$work/results.jsonl"
: >"$results"

load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
# mspipe's trainable parameter count; the PyTorch side refuses to run if its
# model's differs.
trainable="$("$work/train" -threads 1 -warmup 0 -steps 1 -batch 1 |
	"$python" -c 'import json,sys; print(json.load(sys.stdin)["params_trainable"])')"

run_mspipe() {
	GOMAXPROCS="$1" "$work/train" -threads "$1" -warmup "$warmup" -steps "$steps"
}

# Some machines preset OpenBLAS's core type and L2 size for other programs;
# PyTorch gets neither, so OpenBLAS detects this CPU itself.
run_torch() {
	local t="$1" allocator="$2"
	local -a env_args=(-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u LD_PRELOAD -u MALLOC_CONF
		OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS="$t")
	if [ "$allocator" = tuned ]; then
		env_args+=(LD_PRELOAD="$jemalloc" MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
	fi
	local label=glibc
	[ "$allocator" = tuned ] && label="jemalloc, decay off"
	env "${env_args[@]}" "$python" "$here/torch_resnet20.py" --threads "$t" --warmup "$warmup" --steps "$steps" \
		--allocator "$label" --expect-trainable "$trainable"
}

configs=(mspipe glibc tuned)
for ((r = 0; r < rounds; r++)); do
	for t in $threads; do
		# Rotate the order each round so no side always runs first.
		for ((i = 0; i < ${#configs[@]}; i++)); do
			c="${configs[$(((i + r) % ${#configs[@]}))]}"
			echo "round $((r + 1))/$rounds, $t thread(s): $c" >&2
			if [ "$c" = mspipe ]; then
				line="$(run_mspipe "$t")"
			else
				line="$(run_torch "$t" "$c")"
			fi
			echo "$line" >>"$results"
		done
	done
done

field() { # field SIDE KEY: the first value of KEY among SIDE's results
	"$python" -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r["side"] == sys.argv[2]:
        v = r[sys.argv[3]]
        print(", ".join(v) if isinstance(v, list) else v)
        break' "$results" "$1" "$2"
}

echo "## ResNet-20 training, batch 32 of 3×32×32, mspipe vs PyTorch"
echo
simd="$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -xE 'avx2|fma|avx512f|avx512bw|avx512vl' | paste -sd, -)"
echo "- CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores online, ${simd:-no AVX2}"
echo "- mspipe at $(cd "$root" && git log -1 --oneline 2>/dev/null || echo 'no git commit')$(cd "$root" && dirty="$(git status --porcelain -uno -- npu ':!*_test.go' 2>/dev/null | awk '{print $2}' | xargs -r -n1 dirname | sort -u | paste -sd, -)" && [ -n "$dirty" ] && echo " plus uncommitted changes in $dirty"), $(field mspipe go_version)"
echo "- PyTorch $(field pytorch torch_version) (Debian python3-torch): convolutions in oneDNN ($(field pytorch onednn_isa): $(field pytorch onednn_convolutions)); BLAS_INFO=$(field pytorch torch_blas_info), $(field pytorch openblas); ATen kernels $(field pytorch aten_cpu_capability)"
echo "- parameters: mspipe $(field mspipe params_trainable) trainable / $(field mspipe params_total) with BatchNorm moving statistics; PyTorch $(field pytorch params_trainable) / $(field pytorch params_total)"
echo "- each run: warm-up steps $warmup, then timed steps $steps; rounds $rounds, sides in rotating order; a cell is the best round's images/s over its timed steps (every round in brackets)"
echo "- load average at start: $load_start, at end: $(cut -d' ' -f1-3 /proc/loadavg) (other processes share the cores: figures are noisy)"
echo
"$python" "$here/table.py" "$results"
