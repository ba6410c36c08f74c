#!/usr/bin/env bash
# trainer_first_step.sh: time from the start of a Fashion-MNIST run (the set-up of
# examples/fashion_mnist.lua) to the end of its first optimizer step, split into data
# loading (the IDX files, decompressed) and the rest (model, Trainer set-up, hooks, the
# step). Issue 7 target: <= 300 ms in all. Medians of RUNS runs.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-10}
out=$(for _ in $(seq "$runs"); do ./dplhost bench/trainer_first_step_dpl.lua 2>/dev/null | tail -1; done)
echo "$out" | awk -v runs="$runs" '{ d[NR] = $1; t[NR] = $2; s[NR] = $1 + $2 }
function med(a, n,   i, j, x) { for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x } return a[int((n + 1) / 2)] }
END {
  n = NR; md = med(d, n); mt = med(t, n); ms = med(s, n)
  printf "trainer: start to first optimizer step, Fashion-MNIST MLP (median of %d runs)\n", runs
  printf "  %-36s %7.1f ms\n", "data loading (60k + IDX decode)", md
  printf "  %-36s %7.1f ms\n", "model + Trainer set-up + 1st step", mt
  printf "  %-36s %7.1f ms   (target <= 300 ms) %s\n", "total", ms, (ms <= 300 ? "OK" : "MISSED")
}'
