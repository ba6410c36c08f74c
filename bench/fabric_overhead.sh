#!/usr/bin/env bash
# fabric_overhead.sh: dpl.Fabric's per-step cost over the same hand-written Lua loop, next to
# lightning_fabric 1.9.5's over a hand-written torch loop (bench/fabric_ref.py, in the
# build/plref venv that `scripts/install-deps.sh --bench` makes; left out without it).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "Fabric step overhead (nn.Linear(4, 3), batch 8, MSE, SGD, 1 thread; medians of 7 alternating runs)"
./dplhost bench/fabric_overhead_dpl.lua "${STEPS:-20000}" 2>/dev/null | grep -v '^INFO'
if [ -x build/plref/bin/python ] && build/plref/bin/python -c 'import lightning_fabric' 2>/dev/null; then
  out=$(OMP_NUM_THREADS=1 build/plref/bin/python bench/fabric_ref.py "${PL_STEPS:-5000}" 2>/dev/null | tail -1)
  v() { grep -o "$1 [0-9.-]*" <<< "$out" | awk '{ print $2 }'; }
  printf "  %-36s %9.2f us/step\n" "hand-written torch loop" "$(v hand_us)"
  printf "  %-36s %9.2f us/step\n" "the same loop through lightning_fabric" "$(v fabric_us)"
  printf "  %-36s %9.2f us/step\n" "lightning_fabric's overhead" "$(v overhead_us)"
else
  echo "  (lightning_fabric reference not installed: scripts/install-deps.sh --bench)"
fi
