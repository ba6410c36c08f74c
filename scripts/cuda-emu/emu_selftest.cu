// emu_selftest.cu: checks the CUDA emulator itself (built by `make cuda-emu` as
// build/cuda-emu/emu_selftest, run by spec/cuda_emu_spec.lua): barriers and
// __shared__ memory over several blocks in both thread orders, atomics, the
// faults a GPU would raise (divergent barrier, host pointer, bad launch
// configuration, a copy outside an allocation), the stream-ordering checker
// (a race without an event, none with one), cuBLAS against a plain loop
// (transposes, leading dimensions, beta 0 ignoring NaN in C, float16 and
// bfloat16 operands) and float16 conversions (every value, rounding ties).
// Prints "emu_selftest: N checks, M failures"; exit status 1 on a failure.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

extern "C" int emu_order_reports(void);

static int checks, failures;
static void check(bool ok, const char *what)
{
  checks++;
  if (!ok) {
    failures++;
    printf("FAIL: %s\n", what);
  }
}

// block sums through shared memory, then one atomicAdd per block
__global__ void k_block_sum(const float *x, int n, float *out, int *blocks)
{
  __shared__ float sh[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  sh[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(out, sh[0]);
    atomicAdd(blocks, 1);
  }
}

// thread 0 leaves before the barrier the others wait at
__global__ void k_diverge(int *p)
{
  if (threadIdx.x == 0) return;
  __syncthreads();
  p[threadIdx.x] = 1;
}

__global__ void k_iota(int *p, int n)
{
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = i;
}

// a 2-D block: threadIdx.y and blockDim.y
__global__ void k_grid2d(int *p, int w)
{
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  p[y * w + x] = y * 1000 + x;
}

static void test_kernels()
{
  const int n = 1000;
  std::vector<float> hx(n);
  double want = 0;
  for (int i = 0; i < n; i++) {
    hx[i] = (float)(i % 7) - 3.0f;
    want += hx[i];
  }
  float *x, *out;
  int *blocks, *p;
  check(cudaMalloc((void **)&x, n * sizeof(float)) == cudaSuccess, "cudaMalloc");
  cudaMalloc((void **)&out, sizeof(float));
  cudaMalloc((void **)&blocks, sizeof(int));
  cudaMalloc((void **)&p, 64 * 64 * sizeof(int));
  cudaMemcpy(x, hx.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemset(out, 0, sizeof(float));
  cudaMemset(blocks, 0, sizeof(int));
  k_block_sum<<<(n + 127) / 128, 128>>>(x, n, out, blocks);
  check(cudaGetLastError() == cudaSuccess, "k_block_sum launch");
  float got;
  int nb;
  cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost);
  cudaMemcpy(&nb, blocks, sizeof nb, cudaMemcpyDeviceToHost);
  check(got == (float)want, "block sums with barriers and shared memory (both thread orders)");
  check(nb == (n + 127) / 128, "one atomicAdd per block");

  k_grid2d<<<dim3(4, 8), dim3(16, 8)>>>(p, 64);
  std::vector<int> hp(64 * 64);
  cudaMemcpy(hp.data(), p, hp.size() * sizeof(int), cudaMemcpyDeviceToHost);
  bool ok2 = true;
  for (int y = 0; y < 64; y++)
    for (int x2 = 0; x2 < 64; x2++) ok2 = ok2 && hp[y * 64 + x2] == y * 1000 + x2;
  check(ok2, "2-D grid and block indices");

  k_diverge<<<1, 32>>>(p);
  check(cudaGetLastError() == cudaErrorLaunchFailure, "a barrier thread 0 skips is a launch failure");
  check(cudaGetLastError() == cudaSuccess, "cudaGetLastError resets the error");

  std::vector<int> host(16);
  k_iota<<<1, 16>>>(host.data(), 16);
  check(cudaGetLastError() == cudaErrorIllegalAddress, "a host pointer as a kernel argument is an illegal address");
  k_iota<<<1, 2048>>>(p, 16);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads per block is an invalid configuration");
  k_iota<<<dim3(1, 70000), 32>>>(p, 16);
  check(cudaGetLastError() == cudaErrorInvalidConfiguration, "grid.y 70000 is an invalid configuration");
  check(cudaMemcpy(host.data(), p + 64 * 64 - 2, 16 * sizeof(int), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
        "a copy past the end of an allocation is refused");
  check(cudaMemcpy(p, host.data(), 16, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
        "cudaMemcpyDeviceToHost into device memory is refused");
  cudaGetLastError();

  // ordering: a write on s1 read on s2 without an event is a race; with one it is not
  cudaStream_t s1, s2;
  cudaEvent_t ev;
  cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  int *q;
  cudaMalloc((void **)&q, 16 * sizeof(int));
  int before = emu_order_reports();
  k_iota<<<1, 16, 0, s1>>>(q, 16);
  cudaEventRecord(ev, s1);
  cudaStreamWaitEvent(s2, ev, 0);
  cudaMemcpyAsync(p, q, 16 * sizeof(int), cudaMemcpyDeviceToDevice, s2);
  check(emu_order_reports() == before, "a read ordered by an event is no race");
  k_iota<<<1, 16, 0, s1>>>(q, 16); // writes q while s2's copy may still read it
  check(emu_order_reports() == before + 1, "a write on s1 after an unordered read on s2 is a race");
  cudaStreamSynchronize(s2);
  cudaStreamSynchronize(s1);
  cudaMemcpyAsync(p, q, 16 * sizeof(int), cudaMemcpyDeviceToDevice, s2);
  check(emu_order_reports() == before + 1, "host synchronization orders later work");
  cudaFree(q);
  cudaEventDestroy(ev);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  cudaFree(x);
  cudaFree(out);
  cudaFree(blocks);
  cudaFree(p);
}

static float bf16_to_float(uint16_t b)
{
  uint32_t f = (uint32_t)b << 16;
  float x;
  memcpy(&x, &f, 4);
  return x;
}

static void test_cublas()
{
  cublasHandle_t h;
  check(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
  const int m = 5, n = 4, k = 3, lda = 7, ldb = 6, ldc = 9;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
      std::vector<float> A(lda * ac), B(ldb * bc), C(ldc * n, NAN), R(ldc * n, NAN);
      for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 7) % 11) - 5;
      for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 5) % 13) - 6;
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
          float acc = 0;
          for (int p = 0; p < k; p++)
            acc += (ta ? A[i * lda + p] : A[p * lda + i]) * (tb ? B[p * ldb + j] : B[j * ldb + p]);
          R[j * ldc + i] = 2 * acc;
        }
      float *dA, *dB, *dC;
      cudaMalloc((void **)&dA, A.size() * 4);
      cudaMalloc((void **)&dB, B.size() * 4);
      cudaMalloc((void **)&dC, C.size() * 4);
      cudaMemcpy(dA, A.data(), A.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dB, B.data(), B.size() * 4, cudaMemcpyHostToDevice);
      cudaMemcpy(dC, C.data(), C.size() * 4, cudaMemcpyHostToDevice);
      float al = 2, be = 0;
      cublasStatus_t st = cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &al,
                                      dA, lda, dB, ldb, &be, dC, ldc);
      cudaMemcpy(C.data(), dC, C.size() * 4, cudaMemcpyDeviceToHost);
      bool ok = st == CUBLAS_STATUS_SUCCESS;
      for (int j = 0; j < n; j++)
        for (int i = 0; i < ldc; i++)
          ok = ok && (i < m ? C[j * ldc + i] == R[j * ldc + i] : isnan(C[j * ldc + i])); // padding untouched
      check(ok, ta ? (tb ? "Sgemm T,T" : "Sgemm T,N") : (tb ? "Sgemm N,T" : "Sgemm N,N"));
      (void)ar, (void)br;
      // float16 / bfloat16 operands, float accumulation
      std::vector<uint16_t> Ah(A.size()), Bh(B.size()), Ch(C.size());
      for (size_t i = 0; i < A.size(); i++) Ah[i] = __half_raw(__float2half_rn(A[i])).x;
      for (size_t i = 0; i < B.size(); i++) Bh[i] = __half_raw(__float2half_rn(B[i])).x;
      cudaMemcpy(dA, Ah.data(), Ah.size() * 2, cudaMemcpyHostToDevice);
      cudaMemcpy(dB, Bh.data(), Bh.size() * 2, cudaMemcpyHostToDevice);
      st = cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &al, dA, CUDA_R_16F,
                        lda, dB, CUDA_R_16F, ldb, &be, dC, CUDA_R_16F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      cudaMemcpy(Ch.data(), dC, Ch.size() * 2, cudaMemcpyDeviceToHost);
      ok = st == CUBLAS_STATUS_SUCCESS;
      for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
          __half_raw r;
          r.x = Ch[j * ldc + i];
          ok = ok && __half2float(__half(r)) == R[j * ldc + i];
        }
      check(ok, "GemmEx float16 (small integers: exact)");
      cudaFree(dA);
      cudaFree(dB);
      cudaFree(dC);
    }
  float al = 1, be = 0;
  float *d;
  cudaMalloc((void **)&d, 64 * 4);
  check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &al, d, 3, d, 4, &be, d, 4) == CUBLAS_STATUS_INVALID_VALUE,
        "lda < m is an invalid value");
  check(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 9, 9, 9, &al, d, 9, d, 9, &be, d, 9) == CUBLAS_STATUS_EXECUTION_FAILED,
        "a matrix past its allocation fails");
  cudaFree(d);
  check(bf16_to_float(0x3f80) == 1.0f, "bfloat16 layout");
  cublasDestroy(h);
}

static void test_half()
{
  bool ok = true;
  for (uint32_t v = 0; v < 65536; v++) { // every half survives half -> float -> half
    __half_raw r;
    r.x = (unsigned short)v;
    float f = __half2float(__half(r));
    unsigned short back = __half_raw(__float2half_rn(f)).x;
    if (isnan(f)) ok = ok && (back & 0x7c00) == 0x7c00 && (back & 0x3ff);
    else ok = ok && back == v;
  }
  check(ok, "float16 round trip of all 65536 values");
  struct { float f; unsigned short h; } ties[] = {
    {1.0f + 1.0f / 2048, 0x3c00},      // halfway between 1 and the next half: to even (1)
    {1.0f + 3.0f / 2048, 0x3c02},      // halfway, odd below: up
    {65520.0f, 0x7c00},                // rounds to infinity
    {65519.0f, 0x7bff},
    {5.9604644775390625e-8f, 0x0001},  // smallest subnormal
    {2.98023223876953125e-8f, 0x0000}, // half of it: to even (0)
    {4.4703483581542969e-8f, 0x0001},  // 0.75 of it: up
    {-0.0f, 0x8000},
  };
  for (auto &t : ties) {
    char what[64];
    snprintf(what, sizeof what, "float16 rounding of %.9g", t.f);
    check(__half_raw(__float2half_rn(t.f)).x == t.h, what);
  }
}

int main()
{
  test_kernels();
  test_cublas();
  test_half();
  printf("emu_selftest: %d checks, %d failures\n", checks, failures);
  return failures != 0;
}
