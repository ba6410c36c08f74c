#!/usr/bin/env bash
# linalg.sh: dpl.linalg against Debian's python3-torch (torch.linalg) on the same shapes, one
# thread (THREADS=n): inverse, solve with 16 right-hand sides, det, Cholesky, eigh, SVD, QR,
# a batch of 1000 4x4 inverses, a float64 inverse. Both sides run LAPACK (dplhost: the
# OpenBLAS library it loads; PyTorch: the LAPACK it was built with). The two sides alternate for
# ROUNDS rounds (default 3); each figure is the median over rounds. CASES="inv_256 svd_128" picks.
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${THREADS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export DPL_NUM_THREADS=$threads THREADS=$threads OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE
cases=${CASES:-"inv_256 solve_256x16 det_256 cholesky_512 eigh_128 svd_128 qr_200x50 inv_batch_1000x4x4 inv_64_f64"}
dpl=${DPLHOST:-./dplhost}
for r in $(seq "${ROUNDS:-3}"); do
  $dpl bench/linalg_dpl.lua $cases >> "$out/dpl.txt"
  /usr/bin/python3 bench/linalg_torch.py $cases >> "$out/torch.txt"
done
med() { awk -v k="$2" '$1 == k { print $2 }' "$1" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "linear algebra, $threads thread(s), median of ${ROUNDS:-3} alternating rounds (us per call)"
printf "  %-20s %12s %12s %s\n" "case" "dplhost" "PyTorch" "ratio"
for c in $cases; do
  d=$(med "$out/dpl.txt" ${c}_us); t=$(med "$out/torch.txt" ${c}_us)
  awk -v n="$c" -v d="$d" -v t="$t" 'BEGIN { printf "  %-20s %10.1fus %10.1fus  %.2fx PyTorch speed\n", n, d, t, t / d }'
done
