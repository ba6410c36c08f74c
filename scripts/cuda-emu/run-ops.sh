#!/usr/bin/env bash
# scripts/cuda-emu/run-ops.sh: runs the CUDA plugin on the CPU (the emulator of
# docs/cuda.md, built by `make cuda-emu`): the fake NVML reports the emulated
# GPUs, DPL_CUDA_PLUGIN loads build/cuda-emu/dpl_cuda_emu.so (DPL_LIBNCCL: its
# NCCL, one rank per process; DPL_LIBCUSOLVER: its cuSOLVER; --nproc N with DPL_CUDA_EMU_GPUS=N), then
#   run-ops.sh                 the op-consistency check (scripts/gpu_check.lua ops)
#   run-ops.sh ARGS...         ./dplhost ARGS... under the emulator (e.g. --devices, or a script)
# DPL_GPU_CHECK_ONLY=<Lua pattern> limits the op check's cases; DPL_CUDA_EMU_GPUS=N emulates N GPUs.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
emu="$root/build/cuda-emu"
[ -x ./dplhost ] || { echo "run-ops.sh: build dplhost first (make)" >&2; exit 2; }
[ -f "$emu/dpl_cuda_emu.so" ] && [ -f "$emu/libnvidia-ml.so.1" ] || { echo "run-ops.sh: build the emulator first (make cuda-emu)" >&2; exit 2; }
export LD_LIBRARY_PATH="$emu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export DPL_CUDA_PLUGIN="$emu/dpl_cuda_emu.so"
export DPL_LIBNCCL="${DPL_LIBNCCL:-$emu/dpl_cuda_emu.so}" # its NCCL
export DPL_LIBCUSOLVER="${DPL_LIBCUSOLVER:-$emu/dpl_cuda_emu.so}" # its cuSOLVER
unset DPL_VIRTUAL_GPUS CUDA_VISIBLE_DEVICES
if [ $# -eq 0 ]; then set -- scripts/gpu_check.lua ops; fi
exec ./dplhost "$@"
