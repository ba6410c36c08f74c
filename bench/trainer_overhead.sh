#!/usr/bin/env bash
# trainer_overhead.sh: the Trainer's per-step overhead over a hand-written Lua
# loop (issue 7 target: <= 20 us median). Lightning's own figure is not measured:
# its wheel does not import against Debian's torch 1.13 on Python 3.11 (docs/trainer.md).
set -euo pipefail
cd "$(dirname "$0")/.."
./dplhost bench/trainer_overhead_dpl.lua "${STEPS:-50000}" 2>/dev/null | grep -v '^INFO'
