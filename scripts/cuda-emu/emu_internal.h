/* emu_internal.h (dplhost CUDA emulator): what the emulator's files share:
 * range and stream queries of the runtime (emu_runtime.cpp) and the
 * stream-ordering checker (emu_order.cpp) that every queued operation reports
 * its device-memory accesses to. */
#ifndef DPL_EMU_INTERNAL_H
#define DPL_EMU_INTERNAL_H
#include "include/cuda_runtime_api.h"
#include <stddef.h>
#include <stdint.h>

extern "C" {
/* 1 when [p, p + n) lies in device memory of cuda:dev */
int emu_device_range(const void *p, size_t n, int dev);
/* the device of a live stream (0: the current device), -1 when s is not one */
int emu_stream_device(cudaStream_t s);
/* an operation queued on s begins (the ordering checker's clock ticks) */
void emu_op(cudaStream_t s);
/* the operation on s reads or writes the device allocation holding p (other memory is ignored) */
void emu_access(cudaStream_t s, const void *p, int write, const char *op);
}

namespace emu {
void order_op(cudaStream_t s);
void order_access(cudaStream_t s, uintptr_t base, bool write, const char *op);
void order_record(cudaEvent_t e, cudaStream_t s);
void order_wait(cudaStream_t s, cudaEvent_t e);
void order_sync_stream(cudaStream_t s);
void order_sync_event(cudaEvent_t e);
void order_sync_all();
void order_forget_event(cudaEvent_t e);
void order_forget(uintptr_t base);
} // namespace emu
#endif
