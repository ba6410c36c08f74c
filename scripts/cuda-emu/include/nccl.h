/* nccl.h (dplhost CUDA emulator): the NCCL types and constants src/cuda uses
 * (the real values). The plugin loads libnccl.so.2 with dlopen ($DPL_LIBNCCL):
 * under the emulator, dpl_cuda_emu.so itself, whose NCCL is emu_nccl.cpp. */
#ifndef DPL_EMU_NCCL_H
#define DPL_EMU_NCCL_H
#include "cuda_runtime_api.h"

#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[NCCL_UNIQUE_ID_BYTES]; } ncclUniqueId;
typedef struct ncclConfig_emu ncclConfig_t; /* only passed as NULL */

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7
} ncclResult_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9
} ncclDataType_t;
#endif
