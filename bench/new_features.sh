#!/usr/bin/env bash
# new_features.sh: the newer API surface against PyTorch 1.13 on the same shapes, one thread
# (THREADS=n): dpl.special (lgamma, digamma, erfc, i0 on 1M float32), dpl.distributions (sample
# of 100k from Normal, Gamma, Beta, Poisson, Categorical; log_prob of Normal and Gamma on 100k),
# dpl.metrics (MulticlassAccuracy + MulticlassF1Score update + compute per step, 10 classes,
# batch 256; BinaryAUROC over 100k scores) against torchmetrics when PYTHON (default
# /work/main/build/plref/bin/python, else /usr/bin/python3) imports it (the same statistics
# written in torch otherwise), Conv3d forward + backward ([4, 8, 16, 16, 16] -> 16 channels,
# kernel 3, padding 1), MaxPool3d 2 on that input, EmbeddingBag (mean, 10k x 64, 4096 bags of 8),
# scatter_reduce amax of 1M values into 1000, histogram of 1M values into 100 bins.
# The two sides alternate for ROUNDS rounds (default 3); each figure is the median over rounds of
# each round's median of REPS (5) timed loops. CASES="lgamma_1m conv3d_fwd_bwd" picks cases.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=$threads THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
cases=${CASES:-"lgamma_1m digamma_1m erfc_1m i0_1m normal_sample_100k gamma_sample_100k beta_sample_100k
  poisson_sample_100k categorical_sample_100k normal_log_prob_100k gamma_log_prob_100k acc_f1_step auroc_100k
  conv3d_fwd_bwd maxpool3d embedding_bag_mean scatter_reduce_amax_1m histogram_1m"}
dpl=${DPLHOST:-./dplhost}
py=${PYTHON:-/work/main/build/plref/bin/python}
[ -x "$py" ] || py=/usr/bin/python3
for r in $(seq "${ROUNDS:-3}"); do
  $dpl bench/new_features_dpl.lua $cases >> "$out/dpl.txt"
  "$py" bench/new_features_torch.py $cases >> "$out/torch.txt"
done
med() { awk -v k="$2" '$1 == k { print $2 }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "new features, $threads thread(s), median of ${ROUNDS:-3} alternating rounds (us per call);" \
  "torchmetrics: $(awk '$1 == "torchmetrics" { print $2; exit }' "$out/torch.txt")"
printf "  %-24s %12s %12s %s\n" "case" "dplhost" "PyTorch" "ratio"
for c in $cases; do
  d=$(med "$out/dpl.txt" ${c}_us); t=$(med "$out/torch.txt" ${c}_us)
  awk -v n="$c" -v d="$d" -v t="$t" 'BEGIN { printf "  %-24s %10.1fus %10.1fus  %.2fx PyTorch speed\n", n, d, t, t / d }'
done
