/* cuda_runtime.h (dplhost CUDA emulator): the runtime API, plus the device
 * built-ins for C++ translation units (emu_device.h). */
#ifndef DPL_EMU_CUDA_RUNTIME_H
#define DPL_EMU_CUDA_RUNTIME_H
#include "cuda_runtime_api.h"
#ifdef __cplusplus
#include "emu_device.h"
#endif
#endif
