#!/usr/bin/env bash
# tensor.sh: tensor kernels side by side with Debian's python3-torch and with
# OpenBLAS called directly, in the same run, one thread (THREADS=n to change).
# Issue 3's targets: sgemm within 5% of OpenBLAS direct; add/mul/relu on 1M
# floats >= 1.0x PyTorch's throughput; 4x4 add per-op overhead >= 3x faster.
# (conv2d_bwd for PyTorch includes the forward it needs for autograd.)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE

cc -O2 -o "$out/sgemm" bench/sgemm_openblas.c -lopenblas
# the machine is noisy: alternate the three sides for ROUNDS rounds and keep each figure's best
for r in $(seq "${ROUNDS:-3}"); do
  ./dplhost bench/tensor_dpl.lua >> "$out/dpl.txt"
  /usr/bin/python3 bench/tensor_torch.py >> "$out/torch.txt"
  for s in "1024 1024 1024 0" "64 784 256 0" "64 256 128 0" "64 128 10 0" "784 64 256 1"; do
    set -- $s
    echo "sgemm_${1}x${2}x${3}_us $("$out/sgemm" $s | head -1)" >> "$out/direct.txt"
  done
done
env -u OPENBLAS_CORETYPE ./dplhost -e 'print(require("dpl").blas_info())' > "$out/auto.txt"
env -u OPENBLAS_CORETYPE "$out/sgemm" 64 64 64 | sed -n 's/# corename/openblas_auto_core/p' >> "$out/direct.txt"
"$out/sgemm" 64 64 64 | sed -n 's/# corename/openblas_core_now/p' >> "$out/direct.txt"

# best of the rounds: lowest time, highest GFLOP/s
get() { awk -v k="$2" '$1 == k { v = $2; if (best == "" || (k ~ /gflops/ ? v + 0 > best + 0 : v + 0 < best + 0)) best = v }
  END { print best }' "$1"; }
echo "tensor kernels, $threads thread(s), best of ${ROUNDS:-3} alternating rounds; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
echo "  dplhost BLAS: $(get "$out/dpl.txt" blas | tr _ ' ')"
echo "  with OPENBLAS_CORETYPE unset, dplhost picks: $(cat "$out/auto.txt")"
echo "  OpenBLAS alone picks: $(get "$out/direct.txt" openblas_auto_core) (unset), $(get "$out/direct.txt" openblas_core_now) (now)"
printf "  %-30s %12s %12s %12s %s\n" "op" "dplhost" "PyTorch" "OpenBLAS" "ratio"
for s in 1024x1024x1024 64x784x256 64x256x128 64x128x10 784x64x256; do
  k=sgemm_${s}_us
  d=$(get "$out/dpl.txt" $k); t=$(get "$out/torch.txt" $k); o=$(get "$out/direct.txt" $k)
  g=$(get "$out/dpl.txt" sgemm_${s}_gflops)
  awk -v n="$k" -v d="$d" -v t="$t" -v o="$o" -v g="$g" 'BEGIN {
    printf "  %-30s %10.1fus %10.1fus %10.1fus  %.3fx OpenBLAS time (target <= 1.05), %.2fx PyTorch speed, %.1f GFLOP/s\n", n, d, t, o, d / o, t / d, g }'
done
for k in add_1M_us mul_1M_us relu_1M_us add_inplace_1M_us add_4x4_us matmul_64x10_us conv2d_fwd_us conv2d_bwd_us conv2d_c1_fwd_us conv2d_c1_bwd_us max_pool2d_us \
         sort_1M_us topk10_1M_us cumsum_1000x1000_us scatter_add_1000x1000_us index_select_1000x1000_us embedding_64x128_30000x256_us softplus_1M_us \
         exp_1M_us tanh_1M_us gelu_1M_us log1p_1M_us elu_1M_us mish_1M_us \
         cross_entropy_256x1000_fwd_us cross_entropy_256x1000_bwd_us; do
  d=$(get "$out/dpl.txt" $k); t=$(get "$out/torch.txt" $k)
  awk -v n="$k" -v d="$d" -v t="$t" 'BEGIN { printf "  %-30s %10.3fus %10.3fus %12s  %.2fx PyTorch speed\n", n, d, t, "", t / d }'
done
