#!/usr/bin/env bash
# Measures mspipe's GEMM against gonum and OpenBLAS in one run and prints a
# markdown table. Installs OpenBLAS (Debian libopenblas-dev) and a C compiler
# when missing. Flags go to the program: ./run.sh -rounds 10 -sizes 512
set -euo pipefail
cd "$(dirname "$0")"

need=()
[ -e /usr/include/x86_64-linux-gnu/openblas-pthread/cblas.h ] || need+=(libopenblas-dev)
command -v gcc >/dev/null || need+=(gcc)
if [ ${#need[@]} -gt 0 ]; then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

# Some machines preset OpenBLAS's core type and L2 size; let it detect this
# CPU itself (the table's header names the kernel it picked).
exec env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE -u OPENBLAS_NUM_THREADS CGO_ENABLED=1 go run . "$@"
