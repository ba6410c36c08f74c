#!/usr/bin/env bash
# allreduce.sh: dpl.dist all_reduce (float32 sum, shm backend) against Open MPI's
# MPI_Allreduce and a single-thread memcpy, measured in the same run: latency at
# 8 B, bus bandwidth at 4 KiB .. 64 MiB, with 2 ranks and 4 (oversubscribed on
# this 2-core machine). Each figure: median of 3 timed runs of the slowest
# rank; each side runs ROUNDS times in turn (default 2) and its best is kept,
# since this machine's speed drifts. Prints the table and writes it to
# bench/README.md (section "all_reduce"). busbw = bytes/time * 2(P-1)/P.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
[ -x ./dplhost ] || make --no-print-directory all >/dev/null
command -v mpicc >/dev/null || { echo "allreduce.sh: skipped: mpicc not found (apt-get install libopenmpi-dev openmpi-bin)"; exit 0; }
tmp=$(mktemp -d /tmp/dpl-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mpicc -O2 -o "$tmp/mpi" bench/allreduce_mpi.c
${CC:-cc} -O2 -o "$tmp/memcpy" bench/memcpy_bw.c
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

for P in 2 4; do
  scale=1; [ "$P" -gt "$(nproc)" ] && scale=0.1
  for r in $(seq "$ROUNDS"); do
    BENCH_ITERS_SCALE=$scale ./dplhost --nproc "$P" bench/allreduce_dpl.lua | sed 's/^\[rank 0\] //' | sed "s/^/$P /" >>"$tmp/res"
    BENCH_ITERS_SCALE=$scale mpirun --oversubscribe -np "$P" "$tmp/mpi" | sed "s/^/$P /" >>"$tmp/res"
  done
done
for r in $(seq "$ROUNDS"); do "$tmp/memcpy" | sed 's/^/1 /' >>"$tmp/res"; done
# PyTorch's gloo (the reference the project's targets came from), 2 ranks, when installed
gloo=/work/shared/bench/torch/allreduce_gloo.py
[ -f "$gloo" ] || gloo=../shared/bench/torch/allreduce_gloo.py
if [ -f "$gloo" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$gloo" --time-budget 0.3 --port $((20000 + $$ % 20000)) 2>/dev/null |
    sed -n 's/.*"bytes": \([0-9]*\),.*"b2b_mean_us": \([0-9.]*\),.*/2 gloo \1 \2e-6/p' >>"$tmp/res" || true
fi
# DPL_COMM_CHECK=1 against the default at 1 MiB, 2 ranks, interleaved inside one job
# (the driver's BENCH_CHECK mode): on shm the comparison is part of every call, so
# the flag adds nothing; on mpi it adds an MPI_Allgather of the descriptors
for b in shm mpi; do
  if [ $b = shm ]; then
    BENCH_CHECK=1 BENCH_ITERS_SCALE=0.05 ./dplhost --nproc 2 bench/allreduce_dpl.lua shm
  else
    BENCH_CHECK=1 BENCH_ITERS_SCALE=0.05 ASAN_OPTIONS=detect_leaks=0 mpirun --oversubscribe -np 2 ./dplhost bench/allreduce_dpl.lua mpi
  fi | sed -n "s/^\(\[rank 0\] \)\{0,1\}\(plain\|check\|checkratio\) /$b \2 /p" >>"$tmp/res"
done

table=$(awk '
  { key = $1 " " $2 " " $3; if (!(key in best) || $4 < best[key]) best[key] = $4 }
  function bw(P, b, t) { return P == 1 ? b / t / 1e9 : b / t * 2 * (P - 1) / P / 1e9 }
  END {
    split("8 4096 1048576 16777216 67108864", sz, " ")
    split("8 B|4 KiB|1 MiB|16 MiB|64 MiB", nm, "|")
    print "| ranks | size | dpl shm | Open MPI | dpl / MPI | memcpy (1 thread) | dpl / memcpy | torch gloo |"
    print "|---|---|---|---|---|---|---|---|"
    for (p = 2; p <= 4; p += 2) for (i = 1; i <= 5; i++) {
      b = sz[i]; d = best[p " dpl " b]; m = best[p " mpi " b]; c = best["1 memcpy " b]
      if (d == "" || m == "") continue
      g = best[p " gloo " b]
      if (b == 8) gs = g == "" ? "" : sprintf("%.1f us", g * 1e6)
      else gs = g == "" ? "" : sprintf("%.2f GB/s", bw(p, b, g))
      if (b == 8) printf "| %d | %s latency | %.2f us | %.2f us | %.2fx faster | %.3f us | | %s |\n", p, nm[i], d * 1e6, m * 1e6, m / d, c * 1e6, gs
      else printf "| %d | %s busbw | %.2f GB/s | %.2f GB/s | %.2fx | %.2f GB/s | %.0f%% | %s |\n", p, nm[i], bw(p, b, d), bw(p, b, m), m / d, bw(1, b, c), 100 * bw(p, b, d) / bw(1, b, c), gs
    }
    for (bi = 1; bi <= 2; bi++) {
      be = bi == 1 ? "shm" : "mpi"
      k = best[be " check 1048576"]; d = best[be " plain 1048576"]; q = best[be " checkratio 1048576"]
      if (k != "" && d != "" && q != "")
        printf "%sDPL_COMM_CHECK=1 on a 1 MiB all_reduce, 2 ranks, %s: %+.1f%% (median ratio of 60 adjacent block pairs; best blocks %.1f us against %.1f us).\n", bi == 1 ? "\n" : "", be, 100 * (q - 1), k * 1e6, d * 1e6
    }
  }' "$tmp/res")
echo "$table"

when=$(date -u +%Y-%m-%dT%H:%MZ)
section=$(printf '## all_reduce (`bench/allreduce.sh`)\n\nfloat32 sum, in place. dpl: `dist.all_reduce` on the shm backend (`dplhost --nproc P`); Open MPI 4.1 `MPI_Allreduce` (`mpirun --oversubscribe`, vader/CMA); memcpy: one thread, same bytes; torch gloo: `allreduce_gloo.py` from the shared bench (back-to-back mean, 2 ranks, when `python3-torch` is installed). Each figure is the median of 3 timed runs of the slowest rank, best of %s rounds taken in turn. busbw = bytes/time x 2(P-1)/P (memcpy: bytes/time). 4 ranks run oversubscribed on 2 cores. Targets: latency <= MPI, busbw >= 1.2x MPI from 1 MiB, >= 50%% of memcpy at 64 MiB. Last run: %s, %s cores.\n\n%s\n' "$ROUNDS" "$when" "$(nproc)" "$table")
readme=bench/README.md
if [ -f "$readme" ] && grep -q '^## all_reduce' "$readme"; then
  awk -v sec="$section" '
    /^## all_reduce/ { print sec; print ""; skip = 1; next }
    skip && /^## / { skip = 0 }
    !skip { print }' "$readme" >"$tmp/readme" && cp "$tmp/readme" "$readme"
else
  { [ -f "$readme" ] && { cat "$readme"; echo; } || printf '# Benchmarks\n\nResults of `make bench` on the 2-core CI machine; compare figures only within one run (ratios), the machine speed drifts 2-4x over time.\n\n'; echo "$section"; } >"$tmp/readme" && cp "$tmp/readme" "$readme"
fi
