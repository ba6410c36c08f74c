#!/usr/bin/env bash
# dropout.sh: F.dropout (p = 0.1) forward + backward on N (1M) float32, one thread: dplhost's
# fused kernel, the composed form it replaced (same binary) and PyTorch, ROUNDS (3) alternating
# rounds; each figure the median over rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=${THREADS:-1} THREADS=${THREADS:-1} OMP_NUM_THREADS=${THREADS:-1}
for r in $(seq "${ROUNDS:-3}"); do
  ./dplhost bench/dropout_dpl.lua >> "$out/r.txt"
  /usr/bin/python3 bench/dropout_torch.py >> "$out/r.txt"
done
med() { awk -v k="$1" '$1 == k { print $2 }' "$out/r.txt" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
f=$(med dropout_fused_ms); c=$(med dropout_composed_ms); t=$(med dropout_torch_ms)
awk -v f="$f" -v c="$c" -v t="$t" 'BEGIN { printf "dropout fwd+bwd, %d float32: fused %.3f ms, composed %.3f ms, PyTorch %.3f ms (fused %.2fx PyTorch speed, composed %.2fx)\n", '"${N:-1000000}"', f, c, t, t / f, t / c }'
