#!/bin/sh
# bench/data_workers.sh: DataLoader num_workers 0/1/2, dplhost against torch 1.13, the
# same ~200 us-an-item dataset; runs the two in turn ROUNDS times (default 3), each with
# the machine's load (`uptime`) beside it: on a shared machine, a figure is only as good as
# the load it was taken under. usage: [ROUNDS=n] bench/data_workers.sh [items] [batch]
cd "$(dirname "$0")/.." || exit 1
date
for round in $(seq 1 "${ROUNDS:-3}"); do
  echo "== round $round: dplhost ($(uptime | sed 's/.*load/load/'))"
  ./dplhost bench/data_workers_dpl.lua "$@"
  echo "== round $round: torch ($(uptime | sed 's/.*load/load/'))"
  /usr/bin/python3 bench/data_workers_torch.py "$@"
done
