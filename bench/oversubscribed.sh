#!/usr/bin/env bash
# oversubscribed.sh: training on a machine that is not all ours. The Fashion-MNIST MLP
# (batch 64, one epoch, bench/train_fmnist_dpl.lua against /work/shared/bench/torch/
# mlp_fmnist.py) with 1 thread and with one thread per core, first on a quiet machine, then
# next to one busy process per core but one (a shell loop at the same priority: another
# job, a test suite, a second training run). A kernel split over the threads must not wait
# for a thread that lost its core: dplhost's pool lets the threads that run take the chunks
# of the ones that do not. PyTorch runs with OMP_WAIT_POLICY=PASSIVE, as in
# bench/train_fmnist.sh (its default policy spins harder and fares worse).
#   ROUNDS=2 BIN=./dplhost bash bench/oversubscribed.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-./dplhost}
rounds=${ROUNDS:-2}
cores=$(nproc)
ref=${TORCH_BENCH:-/work/shared/bench/torch}
py=${PYTHON:-/usr/bin/python3}
busy_pids=()
stop_busy() { for p in "${busy_pids[@]}"; do kill "$p" 2>/dev/null || true; done; busy_pids=(); }
trap 'stop_busy; rm -f "${cfile:-}"' EXIT
start_busy() { for _ in $(seq $((cores - 1))); do bash -c 'while :; do :; done' & busy_pids+=($!); done; }

dpl_run() { # threads -> samples/s (and the pool's contention events, in $cfile)
  DPL_NUM_THREADS=$1 "$bin" bench/train_fmnist_dpl.lua --model mlp --batch 64 --epochs 1 --threads "$1" |
    awk -v f="$cfile" '{for (i = 1; i < NF; i++) {
      if ($i == "train_samples_per_s") print $(i + 1)
      if ($i == "pool_contention") printf " %s", $(i + 1) >> f } }'
}
cfile=$(mktemp)
torch_run() {
  if [ -f "$ref/mlp_fmnist.py" ] && "$py" -c 'import torch' 2>/dev/null; then
    OMP_NUM_THREADS=$1 OMP_WAIT_POLICY=PASSIVE "$py" "$ref/mlp_fmnist.py" --threads "$1" --batch 64 --epochs 1 2>/dev/null |
      "$py" -c 'import json,sys
r = None
for l in sys.stdin:
    if "\"result\"" in l: r = json.loads(l)
print(r["train_samples_per_s"] if r else "")'
  fi
}
best() { tr ' ' '\n' | awk 'NF && $1 > m { m = $1 } END { printf "%.0f", m }'; }

echo "Fashion-MNIST MLP (batch 64, one epoch), $cores cores; best of $rounds; busy: $((cores - 1)) shell loop(s) at the same priority"
printf "  %-28s %12s %12s %8s  %s\n" "" "dplhost/s" "PyTorch/s" "ratio" "dplhost's pool: contention events per run"
for state in quiet busy; do
  [ "$state" = busy ] && start_busy
  for t in 1 "$cores"; do
    d=; p=; : >"$cfile"
    for _ in $(seq "$rounds"); do d="$d $(dpl_run "$t")"; p="$p $(torch_run "$t")"; done
    d=$(echo "$d" | best); p=$(echo "$p" | best)
    eval "d_${state}_$t=$d"
    printf "  %-28s %12s %12s %8s  %s\n" "$state, $t thread(s)" "$d" "${p:-n/a}" \
      "$(awk -v a="$d" -v b="$p" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')" "$(cat "$cfile")"
  done
  stop_busy
done
awk -v q="$d_quiet_1" -v b="$(eval echo "\$d_busy_$cores")" -v c="$cores" 'BEGIN {
  printf "  dplhost, %d threads next to the busy loops against 1 thread on the quiet machine: %.2fx\n", c, b / q }'
