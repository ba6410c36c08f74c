/* library_types.h (dplhost CUDA emulator): the data types of the CUDA math
 * libraries (the real values) that the emulated cuBLAS accepts. */
#ifndef DPL_EMU_LIBRARY_TYPES_H
#define DPL_EMU_LIBRARY_TYPES_H
typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
#endif
