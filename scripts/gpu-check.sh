#!/usr/bin/env bash
# gpu-check.sh: the one script for a GPU machine (an H200 lent by the device
# tool: no internet, perhaps no LuaJIT headers or busted there). In under 8
# minutes it builds the CUDA plugin, lists the devices, runs the op-consistency
# check (every op the plugin runs, CUDA against CPU, poisoned allocations),
# random CUDA-vs-CPU cases (scripts/cuda-emu/fuzz.lua), the CUDA specs when
# busted is reachable, a benchmark side by side with PyTorch, and an MLP
# training run, and writes one markdown report.
#
#   scripts/gpu-check.sh --prepare      here, without a GPU: builds ./dplhost and
#       ./dpl_cuda.so and packs them, busted's Lua modules and Fashion-MNIST into
#       .gpu/ (in .gitignore). Name .gpu in the device tool's `carry`.
#   scripts/gpu-check.sh [--sanitize]   on the GPU machine; the report goes to
#       $OUT/gpu-check.md (OUT defaults to ./gpu-check-out). --sanitize adds a
#       compute-sanitizer memcheck run of the op check.
#   scripts/gpu-check.sh --emulated     here, without a GPU: the same steps on the CPU
#       emulator of the plugin (make cuda-emu; docs/cuda.md), with small benchmark and
#       training sizes: a dry run of this script (and of the plugin) before spending
#       device time. Its numbers say nothing about a GPU.
# Keep the report as bench/results/<YYYY-MM-DD>-<gpu>.md (bench/README.md).
# Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if [ "${1:-}" = "--prepare" ]; then
  set -e
  make -j2 dplhost dpl_cuda.so >/dev/null
  rm -rf .gpu
  mkdir -p .gpu/lua/share .gpu/lua/lib .gpu/fashion-mnist
  cp dplhost dpl_cuda.so .gpu/
  # -L: Debian's Lua C modules are symlinks into /usr/lib, which the GPU machine lacks (links travel as links)
  [ -d /usr/share/lua/5.1 ] && cp -RL /usr/share/lua/5.1/. .gpu/lua/share/
  [ -d /usr/lib/x86_64-linux-gnu/lua/5.1 ] && cp -RL /usr/lib/x86_64-linux-gnu/lua/5.1/. .gpu/lua/lib/
  cp /usr/share/datasets/fashion-mnist/*.gz .gpu/fashion-mnist/ 2>/dev/null || echo "prepare: no Fashion-MNIST here (training falls back to random data)"
  echo "prepare: .gpu/ holds $(du -sh .gpu | cut -f1); run on the GPU machine with carry [\".gpu\"]:"
  echo "  bash scripts/gpu-check.sh"
  exit 0
fi

SANITIZE=0
[ "${1:-}" = "--sanitize" ] && SANITIZE=1
EMULATED=0
if [ "${1:-}" = "--emulated" ]; then
  EMULATED=1
  # (./dplhost as built: make test SAN=1 runs this with its sanitizer build)
  [ -x ./dplhost ] && make --no-print-directory cuda-emu >/dev/null || {
    echo "gpu-check: --emulated needs ./dplhost (make) and the emulator (make cuda-emu: g++, perl)" >&2; exit 2; }
  export LD_LIBRARY_PATH="$ROOT/build/cuda-emu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export DPL_CUDA_PLUGIN="$ROOT/build/cuda-emu/dpl_cuda_emu.so" DPL_LIBNCCL="$ROOT/build/cuda-emu/dpl_cuda_emu.so" DPL_LIBCUSOLVER="$ROOT/build/cuda-emu/dpl_cuda_emu.so"
  export DPL_GPU_CHECK_SIMULATED=1 # small benchmark and training sizes
  unset DPL_VIRTUAL_GPUS CUDA_VISIBLE_DEVICES
fi
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
REPORT="$OUT/gpu-check.md"
LOG="$OUT/gpu-check.log"
: > "$REPORT"
: > "$LOG"
START=$(date +%s)
declare -a STEPS=()
FAILED=0

note() { echo "$*" | tee -a "$REPORT"; }
step() { # step NAME TIMEOUT CMD...: runs CMD, records pass/fail and seconds
  local name="$1" limit="$2"
  shift 2
  local t0=$(date +%s) rc out
  echo "== $name" >> "$LOG"
  out=$(mktemp)
  timeout -k 10 "$limit" "$@" > "$out" 2>&1
  rc=$?
  cat "$out" >> "$LOG"
  local secs=$(( $(date +%s) - t0 ))
  if [ $rc -eq 0 ]; then STEPS+=("| $name | pass | ${secs} s |")
  else
    STEPS+=("| $name | **FAIL** (exit $rc$([ $rc -eq 124 ] && echo ', timed out')) | ${secs} s |"); FAILED=1
    # the end of what it printed, in the report itself (the log may not come back)
    note ""
    note "Last lines of \`$name\` (exit $rc):"
    note '```'
    tail -n 30 "$out" | while IFS= read -r l; do note "$l"; done
    note '```'
  fi
  rm -f "$out"
  echo "   $name: exit $rc (${secs} s)"
  return $rc
}

GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
note "# gpu-check: $(date -u +%Y-%m-%d) on ${GPU_NAME:-no GPU (nvidia-smi found none)}"
note ""
[ $EMULATED = 1 ] && note "- **emulated** (--emulated): the plugin ran on the CPU emulator (build/cuda-emu), small sizes; a dry run, no GPU figures"
note "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -1)"
note "- nvcc: $( (command -v nvcc >/dev/null && nvcc --version || /usr/local/cuda/bin/nvcc --version) 2>/dev/null | tail -1)"
note "- PyTorch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null || echo none)"
note "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
note ""

# ---- binaries: dplhost (carried or built), the plugin (built here if nvcc can, else carried)
# the carried build wins over a ./dplhost left by an earlier call on a warm machine (it may be stale)
if [ $EMULATED = 0 ] && [ -x .gpu/dplhost ] && ! cmp -s .gpu/dplhost ./dplhost; then cp .gpu/dplhost ./dplhost; fi
if ! ./dplhost -e 'return' >/dev/null 2>&1; then
  step "build dplhost" 240 make -j16 dplhost || true
fi
if ! ./dplhost -e 'return' >/dev/null 2>&1; then
  note "**dplhost does not run here** (and could not be built: see $LOG). Run \`scripts/gpu-check.sh --prepare\` on the"
  note "build machine and carry .gpu."
  exit 2
fi
if [ $EMULATED = 1 ]; then
  note "- plugin: the emulator's, $DPL_CUDA_PLUGIN"
elif step "build dpl_cuda.so (nvcc, sm_90 + PTX)" 240 make -j16 dpl_cuda.so; then
  note "- plugin: built here ($(ls -l dpl_cuda.so | awk '{print $5}') bytes)"
elif [ -f .gpu/dpl_cuda.so ]; then
  cp .gpu/dpl_cuda.so ./dpl_cuda.so
  note "- plugin: the carried .gpu/dpl_cuda.so (the build here failed; see $LOG)"
fi
note ""
# cuBLAS where the plugin's rpath does not reach
if [ -f dpl_cuda.so ] && ldd dpl_cuda.so | grep -q 'not found'; then
  for d in /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib") for p in nvidia.__path__ for s in ("cublas", "cu13")))' 2>/dev/null); do
    [ -f "$d/libcublas.so.13" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" && break
  done
  ldd dpl_cuda.so | grep 'not found' | sed 's/^/- missing: /' | tee -a "$REPORT"
fi
# NCCL (dlopened by the plugin as libnccl.so.2) where the loader does not find it:
# the CUDA image may hold it only in CUDA's lib folder or in PyTorch's nvidia-nccl wheel
if [ -z "${DPL_LIBNCCL:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  for f in /usr/local/cuda/lib/libnccl.so.2 /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda-13*/lib*/libnccl.so.2 \
      $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, s, "lib", "libnccl.so.2") for p in nvidia.__path__ for s in ("nccl", "cu13")))' 2>/dev/null); do
    [ -f "$f" ] && export DPL_LIBNCCL="$f" && break
  done
fi
note "- NCCL: ${DPL_LIBNCCL:-libnccl.so.2 (left to the dynamic loader)}"
# busted and its modules, when carried
if [ -d .gpu/lua/share ]; then
  export LUA_PATH="$ROOT/.gpu/lua/share/?.lua;$ROOT/.gpu/lua/share/?/init.lua;;"
  export LUA_CPATH="$ROOT/.gpu/lua/lib/?.so;;"
fi

note '```'
./dplhost --devices 2>&1 | tee -a "$REPORT"
note '```'
note ""

# a first smoke test: one upload, a kernel, cuBLAS and a download, with the error if any
SMOKE=$(./dplhost -e 'local dpl = require "dpl"; local ok, e = pcall(function() local x = dpl.randn(64, 64)
  local g = x:cuda(); local d = (g:matmul(g) + 1):sum():item() - (x:matmul(x) + 1):sum():item()
  dpl.cuda.synchronize(); return ("cuda:0 matmul+add+sum vs cpu differ by %.3g; plugin %s"):format(d, dpl.cuda.plugin_path()) end)
  print((ok and "smoke: " or "smoke FAILED: ") .. tostring(e))' 2>&1 | tail -3)
note "- $SMOKE"
note ""

note "## Op consistency (CUDA vs CPU, DPL_CUDA_POISON=1)"
note ""
step "op consistency (scripts/gpu_check.lua ops)" 240 env DPL_CUDA_POISON=1 ./dplhost scripts/gpu_check.lua ops "$REPORT"
# random shapes, views, dtypes, special values and parameters (a few seconds; DPL_FUZZ_VERBOSE=1 shows a failure's inputs)
step "fuzz: random cases, CUDA vs CPU (scripts/cuda-emu/fuzz.lua)" 120 ./dplhost scripts/cuda-emu/fuzz.lua 150 7
note ""
if ./dplhost -e 'require "busted.runner"' >/dev/null 2>&1; then
  # (cuda_plugin_spec checks the no-GPU behaviour of the real plugin: not for the emulator)
  specs="spec/cuda_ops_spec.lua"; [ $EMULATED = 1 ] || specs="$specs spec/cuda_plugin_spec.lua"
  step "busted: spec/cuda_*_spec.lua" 180 ./dplhost --busted -o spec/support/summary_handler.lua $specs
  note "- busted: $(grep -E '^[0-9]+ passed' "$LOG" | tail -1)"
else
  note "- busted not reachable here (carry .gpu from --prepare): spec files not run"
fi
if [ $SANITIZE = 1 ] && command -v compute-sanitizer >/dev/null; then
  step "compute-sanitizer memcheck (op check)" 300 compute-sanitizer --tool memcheck --error-exitcode 3 ./dplhost scripts/gpu_check.lua ops
fi
note ""

note "## Benchmark"
note ""
step "benchmark: dplhost" 200 ./dplhost scripts/gpu_check.lua bench "$REPORT"
note ""
if python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  step "benchmark: PyTorch" 200 python3 bench/gpu_torch_bench.py "$REPORT"
else
  note "- PyTorch with CUDA not available: no side-by-side numbers"
fi
note ""

note "## Training"
note ""
DATA=.gpu/fashion-mnist
[ -d "$DATA" ] || DATA=/usr/share/datasets/fashion-mnist
step "training on cuda:0 (MLP, Trainer)" 200 ./dplhost scripts/gpu_check.lua train "$REPORT" "$DATA"
note ""

note "## Distributed"
note ""
note "| check | ranks | result |"
note "|---|---|---|"
step "dist: nccl backend, 1 rank" 120 ./dplhost scripts/gpu_check.lua nccl "$REPORT"
step "dist: shm backend, 2 ranks, GPU tensors" 120 ./dplhost --nproc 2 scripts/gpu_check.lua dist "$REPORT"
note ""

note "## Steps"
note ""
note "| step | result | time |"
note "|---|---|---|"
for s in "${STEPS[@]}"; do note "$s"; done
note ""
note "total: $(( $(date +%s) - START )) s; full log: gpu-check.log"
echo "report: $REPORT (keep it as bench/results/$(date -u +%Y-%m-%d)-$(echo "${GPU_NAME:-gpu}" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-').md)"
exit $FAILED
