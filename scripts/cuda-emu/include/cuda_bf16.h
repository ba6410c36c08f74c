/* cuda_bf16.h (dplhost CUDA emulator): the bfloat16 storage types (src/cuda
 * converts bfloat16 by hand, through __float_as_uint / __uint_as_float). */
#ifndef DPL_EMU_CUDA_BF16_H
#define DPL_EMU_CUDA_BF16_H
#ifdef __cplusplus
#include "cuda_fp16.h"
struct __nv_bfloat16_raw {
  unsigned short x;
};
struct __nv_bfloat16 {
  unsigned short __x;
};
#endif
#endif
