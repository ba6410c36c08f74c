#!/usr/bin/env bash
# train_step.sh: one training step (zero_grad, forward, cross_entropy, backward, SGD momentum
# step) of (a) a 2-layer TransformerEncoder (d_model 128, 4 heads, ff 256, dropout 0.1,
# batch_first, batch 32 x seq 64, mean-pool + Linear head) and (b) a CNN block stack
# ((Conv2d 3x3 + BatchNorm2d + ReLU + MaxPool2d) x 2, 32 / 64 channels, 28x28, batch 64, Linear
# head), dplhost against Debian's python3-torch with the same shapes, one thread (THREADS=n).
# The two sides alternate for ROUNDS rounds (default 3); each figure is the median over rounds
# of each round's median of REPS (5) timed loops.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=$threads THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
models=${MODELS:-"transformer cnn"}
for r in $(seq "${ROUNDS:-3}"); do
  ./dplhost bench/train_step_dpl.lua $models >> "$out/dpl.txt"
  /usr/bin/python3 bench/train_step_torch.py $models >> "$out/torch.txt"
done
med() { awk -v k="$2" '$1 == k { print $2 }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "training step, $threads thread(s), median of ${ROUNDS:-3} alternating rounds"
printf "  %-22s %12s %12s %s\n" "model" "dplhost" "PyTorch" "ratio"
for m in $models; do
  d=$(med "$out/dpl.txt" ${m}_step_ms); t=$(med "$out/torch.txt" ${m}_step_ms)
  awk -v n="$m" -v d="$d" -v t="$t" 'BEGIN { printf "  %-22s %10.3fms %10.3fms  %.2fx PyTorch speed\n", n, d, t, t / d }'
done
