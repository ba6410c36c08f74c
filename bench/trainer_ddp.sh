#!/usr/bin/env bash
# trainer_ddp.sh: DDP scaling of the Trainer: one epoch of the Fashion-MNIST MLP,
# batch 64 per rank, 1 thread per rank, 1 rank vs 2 ranks (dplhost --nproc 2,
# strategy ddp over shm). Issue 7 target: >= 85% efficiency. Also prints what the
# machine itself allows: 2 independent copies of the 1-rank run at once (no
# communication), whose efficiency bounds the DDP one; 2 ranks that meet once a step
# without averaging gradients (DDP_SYNC=lockstep: the cost of lockstep alone); the same scaling for
# PyTorch's DistributedDataParallel over gloo (/work/shared/bench/torch recipes).
# Also the cache-line round trip between CPUs 0 and 1 around each 2-rank run (bench/core_rtt.c):
# on a VM whose vCPUs move between core complexes it tells which state the run saw.
set -euo pipefail
cd "$(dirname "$0")/.."
# bench/core_rtt.c, built once (skipped where it does not build or there is one CPU)
rtt_bin=$(mktemp)
trap 'rm -f "$rtt_bin"' EXIT
rtt() { [ -x "$rtt_bin" ] && "$rtt_bin" | awk '{ print $2 }'; }
${CC:-cc} -O2 -pthread -o "$rtt_bin" bench/core_rtt.c 2>/dev/null || rm -f "$rtt_bin"
# ROUNDS (default 3) interleaved runs of 1 rank, 2 ranks and lockstep; each figure is the run
# of median throughput (the machine's speed drifts between runs)
ones=; twos=; locks=; rtts=
for r in $(seq "${ROUNDS:-3}"); do
  ones="$ones$(./dplhost bench/trainer_ddp_dpl.lua 2>/dev/null | tail -1);"
  r0=$(rtt || true)
  twos="$twos$(./dplhost --nproc 2 bench/trainer_ddp_dpl.lua 2>/dev/null | grep '^\[rank 0\] 2 ' | sed 's/^\[rank 0\] //');"
  r1=$(rtt || true)
  rtts="$rtts ${r0:-?}/${r1:-?}"
  locks="$locks$(DDP_SYNC=lockstep ./dplhost --nproc 2 bench/trainer_ddp_dpl.lua 2>/dev/null | grep '^\[rank 0\] 2 ' | sed 's/^\[rank 0\] //');"
done
median_run() { echo "$1" | tr ';' '\n' | awk 'NF == 3' | sort -k3,3g | awk '{ l[NR] = $0 } END { print l[int((NR + 1) / 2)] }'; }
one=$(median_run "$ones"); two=$(median_run "$twos"); lock=$(median_run "$locks")
a=$(mktemp); b=$(mktemp)
./dplhost bench/trainer_ddp_dpl.lua >"$a" 2>/dev/null & p1=$!
./dplhost bench/trainer_ddp_dpl.lua >"$b" 2>/dev/null & p2=$!
wait $p1 $p2
par=$(cat "$a" "$b" | awk '$1 == 1 { s += $3 } END { printf "%.0f", s }')
rm -f "$a" "$b"
# the same measure for PyTorch (DistributedDataParallel over gloo, 2 processes x 1 thread)
ref=${TORCH_BENCH:-/work/shared/bench/torch}
py=${PYTHON:-/usr/bin/python3}
t1=; t2=
if [ -f "$ref/ddp_fmnist.py" ] && "$py" -c 'import torch' 2>/dev/null; then
  get() { "$py" -c 'import json,sys
for l in sys.stdin:
    if "\"result\"" in l: r = json.loads(l)
print(r[sys.argv[1]])' "$1"; }
  t1=$(OMP_NUM_THREADS=1 "$py" "$ref/mlp_fmnist.py" --threads 1 --batch 64 --epochs 1 2>/dev/null | get train_samples_per_s || true)
  t2=$(OMP_NUM_THREADS=1 "$py" "$ref/ddp_fmnist.py" --threads 1 --batch 64 --epochs 1 2>/dev/null | get agg_samples_per_s || true)
fi
# and PyTorch Lightning 1.9.5's "ddp" strategy (build/plref, scripts/install-deps.sh --bench)
l1=; l2=
if [ -x build/plref/bin/python ]; then
  l1=$(OMP_NUM_THREADS=1 build/plref/bin/python bench/lightning_ref.py mlp 1 2>/dev/null | grep -o 'samples_per_s [0-9.]*' | awk '{ print $2 }' || true)
  l2=$(OMP_NUM_THREADS=1 build/plref/bin/python bench/lightning_ref.py mlp 2 2>/dev/null | grep -o 'samples_per_s [0-9.]*' | awk '{ print $2 }' || true)
fi
echo "$one|$two|$par|$t1|$t2|$l1|$l2|$lock|$rtts|${ROUNDS:-3}" | awk -F'|' '{
  split($1, o, " "); split($2, t, " "); par = $3
  eff = t[3] / (2 * o[3]); bound = par / (2 * o[3])
  printf "trainer DDP scaling (Fashion-MNIST MLP, batch 64/rank, 1 thread/rank, one epoch)\n"
  printf "  %-40s %9.0f samples/s (%.2f s)\n", "1 rank", o[3], o[2]
  printf "  %-40s %9.0f samples/s (%.2f s)   efficiency %.0f%% (target >= 85%%) %s\n", "2 ranks, ddp over shm", t[3], t[2], 100 * eff, (eff >= 0.85 ? "OK" : "MISSED")
  printf "  %-40s %9.0f samples/s               efficiency %.0f%% (what this machine allows)\n", "2 independent 1-rank runs at once", par, 100 * bound
  split($8, k, " ")
  if (k[3] != "") printf "  %-40s %9.0f samples/s               efficiency %.0f%% (lockstep alone)\n", "2 ranks meeting each step, no gradients", k[3], 100 * k[3] / (2 * o[3])
  if ($4 != "" && $5 != "") {
    printf "  %-40s %9.0f samples/s\n", "PyTorch 1 process", $4
    printf "  %-40s %9.0f samples/s               efficiency %.0f%%; dplhost ddp %.1fx its throughput\n", "PyTorch DDP (gloo), 2 processes", $5, 100 * $5 / (2 * $4), t[3] / $5
  }
  printf "  (1 and 2 ranks, lockstep: the run of median throughput of %d; 2 rank runs:%s%s)\n", $10, ($9 ~ /[0-9]/ ? " cache-line round trip between CPUs 0 and 1 before/after each, ns:" : ""), ($9 ~ /[0-9]/ ? $9 : "")
  if ($6 != "" && $7 != "") {
    printf "  %-40s %9.0f samples/s\n", "Lightning 1.9.5, 1 process", $6
    printf "  %-40s %9.0f samples/s               efficiency %.0f%%; dplhost ddp %.1fx its throughput\n", "Lightning 1.9.5 ddp (gloo), 2 processes", $7, 100 * $7 / (2 * $6), t[3] / $7
  }
}'
