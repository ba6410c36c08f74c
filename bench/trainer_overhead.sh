#!/usr/bin/env bash
# trainer_overhead.sh: the Trainer's per-step overhead over a hand-written Lua
# loop (issue 7 target: <= 20 us median), and PyTorch Lightning 1.9.5's over a
# hand-written torch loop doing the same work (bench/lightning_ref.py, in the
# build/plref venv that `scripts/install-deps.sh --bench` makes; left out without it).
set -euo pipefail
cd "$(dirname "$0")/.."
./dplhost bench/trainer_overhead_dpl.lua "${STEPS:-50000}" 2>/dev/null | grep -v '^INFO'
if [ -x build/plref/bin/python ]; then
  out=$(build/plref/bin/python bench/lightning_ref.py overhead "${PL_STEPS:-2000}" 2>/dev/null)
  v() { grep -o "$1 [0-9.-]*" <<< "$out" | tail -1 | awk '{ print $2 }'; }  # (its progress bar shares stdout)
  printf "  %-36s %9.2f us/step\n" "hand-written torch loop, nn.Linear" "$(v hand_us)"
  printf "  %-36s %9.2f us/step\n" "Lightning 1.9.5 fit, nn.Linear" "$(v lightning_us)"
  printf "  %-36s %9.2f us/step\n" "Lightning's overhead" "$(v overhead_us)"
else
  echo "  (Lightning reference not installed: scripts/install-deps.sh --bench)"
fi
