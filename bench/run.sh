#!/usr/bin/env bash
# run.sh: every benchmark under bench/ (`make bench`). Each prints its figures
# next to the reference measured in the same run, as ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
for b in bench/*.sh; do
  [ "$b" = bench/run.sh ] && continue
  echo "== $b"
  bash "$b"
done
