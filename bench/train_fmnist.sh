#!/usr/bin/env bash
# train_fmnist.sh: Fashion-MNIST training throughput, dplhost vs Debian's python3-torch
# (/work/shared/bench/torch/{mlp,cnn}_fmnist.py), in the same run, alternating the two
# sides ROUNDS times (default 2) and keeping each side's best. Issue 4's targets:
# MLP samples/s >= 1.3x PyTorch (batch 64 and 256), CNN >= 1.0x.
#   THREADS=1 (default) EPOCHS=1 MODELS="mlp:64 mlp:256 cnn:64" ROUNDS=2 bash bench/train_fmnist.sh
# Both sides see the same environment; OPENBLAS_CORETYPE (if set) applies to both.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
epochs=${EPOCHS:-1}
rounds=${ROUNDS:-2}
models=${MODELS:-"mlp:64 mlp:256 cnn:64"}
ref=${TORCH_BENCH:-/work/shared/bench/torch}
py=${PYTHON:-/usr/bin/python3}
export DPL_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "Fashion-MNIST training, $threads thread(s), $epochs epoch(s), best of $rounds alternating rounds;" \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<unset>}"
printf "  %-10s %14s %14s %8s %10s %10s %s\n" "model" "dplhost/s" "PyTorch/s" "ratio" "dpl acc" "torch acc" "cores (dpl / torch), peak RSS MB (dpl / torch)"
for m in $models; do
  model=${m%%:*}; batch=${m##*:}
  best_d=0; best_t=0; acc_d=; acc_t=; core_d=; core_t=; rss_d=; rss_t=
  for r in $(seq "$rounds"); do
    line=$(./dplhost bench/train_fmnist_dpl.lua --model "$model" --batch "$batch" --epochs "$epochs" --threads "$threads")
    d=$(awk '{for (i = 1; i < NF; i++) if ($i == "train_samples_per_s") print $(i + 1)}' <<< "$line")
    acc_d=$(awk '{for (i = 1; i < NF; i++) if ($i == "test_acc") print $(i + 1)}' <<< "$line")
    core_d=$(awk '{for (i = 1; i < NF; i++) if ($i == "blas") print $(i + 1)}' <<< "$line")
    rss_d=$(awk '{for (i = 1; i < NF; i++) if ($i == "peak_rss_kb") print int($(i + 1) / 1024)}' <<< "$line")
    /usr/bin/time -f '%M' -o "$out/rss" "$py" "$ref/${model}_fmnist.py" --threads "$threads" --batch "$batch" \
      --epochs "$epochs" > "$out/torch.json"
    res=$(grep '"event": "result"' "$out/torch.json" | tail -1)
    t=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["train_samples_per_s"])' "$res")
    acc_t=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1])["test_acc"])' "$res")
    core_t=$("$py" -c 'import json,sys; print(json.loads(sys.argv[1]).get("openblas_core", "?"))' "$res")
    rss_t=$(( $(cat "$out/rss") / 1024 ))
    best_d=$(awk -v a="$best_d" -v b="$d" 'BEGIN { print (b > a ? b : a) }')
    best_t=$(awk -v a="$best_t" -v b="$t" 'BEGIN { print (b > a ? b : a) }')
  done
  awk -v m="$model b$batch" -v d="$best_d" -v t="$best_t" -v ad="$acc_d" -v at="$acc_t" -v cd="$core_d" -v ct="$core_t" \
    -v rd="$rss_d" -v rt="$rss_t" 'BEGIN {
    printf "  %-10s %14.0f %14.0f %7.2fx %9.2f%% %9.2f%% %s / %s, %s / %s\n", m, d, t, d / t, ad * 100, at * 100, cd, ct, rd, rt }'
done
