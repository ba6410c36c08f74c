#!/bin/sh
# bench/data_workers.sh: DataLoader num_workers 0/1/2, dplhost against torch 1.13, the
# same ~200 us-an-item dataset; runs each side twice in turn (the machine is shared).
cd "$(dirname "$0")/.." || exit 1
date
for round in 1 2; do
  echo "== round $round: dplhost"
  ./dplhost bench/data_workers_dpl.lua "$@"
  echo "== round $round: torch"
  /usr/bin/python3 bench/data_workers_torch.py "$@"
done
