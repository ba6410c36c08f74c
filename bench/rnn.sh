#!/usr/bin/env bash
# rnn.sh: sequence-model paths, dplhost against Debian's python3-torch with the same shapes, one
# thread (THREADS=n): packed_lstm (pack_padded_sequence, enforce_sorted=false, of 32 sequences of
# 28 distinct lengths up to 50 into a 2-layer bidirectional LSTM 64 -> 128, forward + backward),
# packed_gru / packed_rnn (the same packed batch into a GRU / tanh RNN of those shapes; not in the
# default CASES), DPL_RNN_PACKED=0 runs packed batches by length (the old path),
# padded_lstm (the same batch padded, no packing), lm_lstm / lm_gru (Embedding(2000, 128) ->
# LSTM/GRU(128, 256, 2 layers, batch_first) -> Linear(256, 2000) -> cross_entropy over [32*35,
# 2000], backward, SGD step), gen_lstm (Embedding -> 2-layer LSTM hidden 256 -> Linear -> argmax,
# one token at a time under no_grad, B = 1; us per token), gen_transformer (2-layer
# TransformerDecoder d_model 128, greedy over 32 tokens without a cache; us per token).
# The two sides alternate for ROUNDS rounds (default 3); each figure is the median over rounds of
# each round's median of REPS (5) timed loops. CASES="packed_lstm gen_lstm" picks cases.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=$threads THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
cases=${CASES:-"packed_lstm padded_lstm lm_lstm lm_gru gen_lstm gen_transformer"}
dpl=${DPLHOST:-./dplhost}
for r in $(seq "${ROUNDS:-3}"); do
  $dpl bench/rnn_dpl.lua $cases >> "$out/dpl.txt"
  /usr/bin/python3 bench/rnn_torch.py $cases >> "$out/torch.txt"
done
med() { awk -v k="$2" '$1 == k { print $2 }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "sequence models, $threads thread(s), median of ${ROUNDS:-3} alternating rounds (us per step; gen_*: per token)"
printf "  %-18s %12s %12s %s\n" "case" "dplhost" "PyTorch" "ratio"
for c in $cases; do
  d=$(med "$out/dpl.txt" ${c}_us); t=$(med "$out/torch.txt" ${c}_us)
  awk -v n="$c" -v d="$d" -v t="$t" 'BEGIN { printf "  %-18s %10.1fus %10.1fus  %.2fx PyTorch speed\n", n, d, t, t / d }'
done
