#!/usr/bin/env bash
# startup.sh: start-up time of dplhost next to bare luajit and `import torch`
# (Debian's python3-torch), medians over repeated runs taken in the same run,
# reported as differences and ratios. Targets (issue 2): `dplhost -e ''` within
# 2 ms of `luajit -e ''`; `require "dpl"` under 20 ms and >= 50x faster than
# importing torch.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${RUNS:-30}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

median_ms() { # csv file -> median of row $2 (1-based, after the header) in ms
  awk -F, -v row="$2" 'NR == row + 1 { printf "%.3f", $5 * 1000 }' "$1"
}

hyperfine -N -w 5 -r "$runs" --export-csv "$out/lua.csv" \
  "luajit -e ''" "./dplhost -e ''" "./dplhost -e 'require(\"dpl\")'" >/dev/null 2>&1
hyperfine -N -w 1 -r "${TORCH_RUNS:-10}" --export-csv "$out/torch.csv" \
  "/usr/bin/python3 -c 'import torch'" >/dev/null 2>&1

lj=$(median_ms "$out/lua.csv" 1)
host=$(median_ms "$out/lua.csv" 2)
req=$(median_ms "$out/lua.csv" 3)
torch=$(median_ms "$out/torch.csv" 1)
awk -v lj="$lj" -v host="$host" -v req="$req" -v torch="$torch" -v runs="$runs" 'BEGIN {
  printf "startup (median of %d runs; torch: %s runs)\n", runs, ENVIRON["TORCH_RUNS"] ? ENVIRON["TORCH_RUNS"] : 10
  printf "  %-36s %9.2f ms\n", "luajit -e \047\047", lj
  printf "  %-36s %9.2f ms   (+%.2f ms vs luajit; target <= 2 ms) %s\n", "dplhost -e \047\047", host, host - lj, (host - lj <= 2 ? "OK" : "MISSED")
  printf "  %-36s %9.2f ms   (target < 20 ms) %s\n", "dplhost -e \047require \"dpl\"\047", req, (req < 20 ? "OK" : "MISSED")
  printf "  %-36s %9.2f ms\n", "python3 -c \047import torch\047", torch
  printf "  import torch / require \"dpl\" = %.0fx (target >= 50x) %s\n", torch / req, (torch / req >= 50 ? "OK" : "MISSED")
}'
