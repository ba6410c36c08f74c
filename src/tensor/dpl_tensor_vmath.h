/* dpl_tensor_vmath.h: the interface of dpl_tensor_vmath.c, vectorised float32 math
 * (exp, log, tanh, erf, sin, ... and the activations built on them) for the
 * elementwise and activation kernels. Results are the same bits on every path
 * (AVX-512, AVX2, scalar) and for every split of the work. */
#ifndef DPL_TENSOR_VMATH_H
#define DPL_TENSOR_VMATH_H
#include <stdint.h>

/* functions y = f(x); SOFTPLUS takes p0 = beta, p1 = threshold, ELU p0 = alpha */
enum {
  DPL_VM_EXP, DPL_VM_EXPM1, DPL_VM_EXP2, DPL_VM_LOG, DPL_VM_LOG1P, DPL_VM_LOG2, DPL_VM_LOG10,
  DPL_VM_SIN, DPL_VM_COS, DPL_VM_TAN, DPL_VM_ASIN, DPL_VM_ACOS, DPL_VM_ATAN,
  DPL_VM_SINH, DPL_VM_COSH, DPL_VM_TANH, DPL_VM_ASINH, DPL_VM_ACOSH, DPL_VM_ATANH, DPL_VM_ERF,
  DPL_VM_SIGMOID, DPL_VM_SILU, DPL_VM_GELU, DPL_VM_SOFTPLUS, DPL_VM_ELU, DPL_VM_MISH,
  /* special functions (dpl_tensor_vmath_sp.h: evaluated in double lanes, rounded once) */
  DPL_VM_LGAMMA, DPL_VM_DIGAMMA, DPL_VM_ERFC, DPL_VM_I0, DPL_VM_NFN
};
/* gradients y = g f'(x) (the parameters as above) */
enum { DPL_VM_D_GELU, DPL_VM_D_SILU, DPL_VM_D_SOFTPLUS, DPL_VM_D_ELU, DPL_VM_D_MISH, DPL_VM_D_NFN };

/* the path in effect: DPL_VM_OFF (callers keep their libm loops), or the kernels'.
 * The first call reads DPL_VMATH (off, scalar, avx2, avx512; unset or auto: the best
 * this CPU runs, "off" without FMA; a path the CPU lacks falls back to the best it has). */
enum { DPL_VM_OFF = -1, DPL_VM_SCALAR = 0, DPL_VM_AVX2 = 1, DPL_VM_AVX512 = 2 };
int dpl_vm_isa(void);
/* sets the path (DPL_VM_*, or -2: the best for this CPU); returns the one in effect */
int dpl_vm_set_isa(int isa);
/* "off", "scalar", "avx2", "avx512"; -2 for an unknown name, -3 for "auto" */
int dpl_vm_parse_isa(const char *name);
const char *dpl_vm_isa_name(int isa);

/* y[i] = f(x[i]) for n float32 elements, strides in bytes (y == x allowed) */
void dpl_vm_map(int fn, char *y, int64_t sy, const char *x, int64_t sx, int64_t n, float p0, float p1);
/* y[i] = g[i] f'(x[i]) */
void dpl_vm_grad(int fn, char *y, int64_t sy, const char *g, int64_t sg, const char *x, int64_t sx, int64_t n,
                 float p0, float p1);
/* float32 normal draws (dpl_tensor_random.c): out[i] = mean + sd z rounded, z = sqrt(-2 log u1) cos(6.283185307179586
 * u2), u1 = (u0[i] + 1) 2^-32, u2 = u1[i] 2^-32, in double lanes (within 1e-15 of the libm formula); the i where
 * the libm formula might round otherwise (a boundary within 2^-40 |sd|, and 0, inf or NaN) are written to redo
 * (room for n); returns their count. The same bits on every path. */
int dpl_vm_normal_f32(const uint32_t *u0, const uint32_t *u1, int64_t n, double mean, double sd, float *out,
                      int32_t *redo);
/* one try of Marsaglia and Tsang's method for n standard Gamma(alpha[i]) draws from the Philox words w[0..3][i]
 * (dpl_tensor_random.c: the normal of w0, w1 by the Box-Muller of dpl_vm_normal_f32, the uniform (w2 + 1/2) 2^-32,
 * alpha < 1 boosted by ((w3 + 1/2) 2^-32)^(1/alpha)); accepted draws to x[i], the i of the others to redo (room for
 * n); returns their count. The same bits on every path (DPL_VMATH=off included: the scalar kernel). */
int dpl_vm_gamma_try(const uint32_t *const *w, const double *alpha, int64_t n, double *x, int32_t *redo);
#endif
