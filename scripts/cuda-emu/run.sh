#!/usr/bin/env bash
# scripts/cuda-emu/run.sh: runs the source of some CUDA kernels on the host (no GPU): emu.h emulates
# one block at a time with a pthread per thread, __syncthreads as a barrier and the atomics as GCC
# builtins; the kernels (the anonymous namespace of each .cu) are compared with the CPU's loops.
# It checks indexing and arithmetic, not the GPU's memory model or performance. Needs g++.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
body() { sed -n '/^namespace {/,/^} \/\/ namespace/p' "$root/src/cuda/$1"; }
body dpl_cuda_igemm.cu >"$tmp/igemm_body.inc"
body dpl_cuda_index.cu >"$tmp/index_body.inc"
for t in t_igemm t_index; do
  g++ -std=c++17 -O1 -fwrapv -Wall -Wextra -Wno-unknown-pragmas -pthread -I"$here" -I"$tmp" -o "$tmp/$t" "$here/$t.cpp"
  echo "$t: $("$tmp/$t" | tail -1)"
done
