/* vmath_ulp.c: measures the float32 kernels of src/tensor/dpl_tensor_vmath.c against
 * double-precision libm over every float32 (or every STRIDE-th bit pattern), and checks
 * that the scalar, AVX2 and AVX-512 paths give the same bits (any NaN counting as NaN).
 *   cc -std=c11 -O2 -fno-math-errno -ffp-contract=off -Iinclude -o /tmp/vmath_ulp scripts/vmath_ulp.c -lm
 *   /tmp/vmath_ulp [function[,function...]|all] [stride] [part/parts]
 * Prints, per function: the largest error in ulps of the correctly rounded result (with
 * the input where it occurs), and the number of inputs where the paths disagree. */
#define _GNU_SOURCE
#include "../src/tensor/dpl_tensor_vmath.c"
#include <float.h>
#include <inttypes.h>
#include <stdio.h>

static double ref_i0(double x) { return dpl_sp_bessel_i(0, x, 0); }
static double ref_softplus(double x) { return x > 20 ? x : log1p(exp(x)); }
static double ref_elu(double x) { return x <= 0 ? expm1(x) : x; }
static double ref_mish(double x) { return x * tanh(log1p(exp(x))); }
static double ref_sigmoid(double x) { return 1 / (1 + exp(-x)); }
static double ref_silu(double x) { return x / (1 + exp(-x)); }
static double ref_gelu(double x) { return 0.5 * x * erfc(-x * M_SQRT1_2); }
static double ref_d_gelu(double x) { return 0.5 * erfc(-x * M_SQRT1_2) + x * exp(-0.5 * x * x) / sqrt(2 * M_PI); }
static double ref_d_silu(double x) { double s = 1 / (1 + exp(-x)); return s * (1 + x * (1 - s)); }
static double ref_d_softplus(double x) { double z = exp(x); return x > 20 ? 1 : z / (z + 1); }
static double ref_d_elu(double x) { return x <= 0 ? exp(x) : 1; }
static double ref_d_mish(double x)
{
  double sg = 1 / (1 + exp(-x)), ts = tanh(log1p(exp(x)));
  return ts + x * sg * (1 - ts * ts);
}

/* grad: a gradient (g = 1), its error measured in ulps of max(|f'|, 1): these formulas
 * cross zero, where no relative bound holds (PyTorch's neither) */
typedef struct { const char *name; int fn, grad; double (*ref)(double); } fdesc;
static const fdesc F[] = {
  {"exp", DPL_VM_EXP, 0, exp}, {"expm1", DPL_VM_EXPM1, 0, expm1}, {"exp2", DPL_VM_EXP2, 0, exp2},
  {"log", DPL_VM_LOG, 0, log}, {"log1p", DPL_VM_LOG1P, 0, log1p}, {"log2", DPL_VM_LOG2, 0, log2},
  {"log10", DPL_VM_LOG10, 0, log10}, {"sin", DPL_VM_SIN, 0, sin}, {"cos", DPL_VM_COS, 0, cos},
  {"tan", DPL_VM_TAN, 0, tan}, {"asin", DPL_VM_ASIN, 0, asin}, {"acos", DPL_VM_ACOS, 0, acos},
  {"atan", DPL_VM_ATAN, 0, atan}, {"sinh", DPL_VM_SINH, 0, sinh}, {"cosh", DPL_VM_COSH, 0, cosh},
  {"tanh", DPL_VM_TANH, 0, tanh}, {"asinh", DPL_VM_ASINH, 0, asinh}, {"acosh", DPL_VM_ACOSH, 0, acosh},
  {"atanh", DPL_VM_ATANH, 0, atanh}, {"erf", DPL_VM_ERF, 0, erf}, {"sigmoid", DPL_VM_SIGMOID, 0, ref_sigmoid},
  {"silu", DPL_VM_SILU, 0, ref_silu}, {"gelu", DPL_VM_GELU, 0, ref_gelu}, {"softplus", DPL_VM_SOFTPLUS, 0, ref_softplus},
  {"elu", DPL_VM_ELU, 0, ref_elu}, {"mish", DPL_VM_MISH, 0, ref_mish},
  {"d_gelu", DPL_VM_D_GELU, 1, ref_d_gelu}, {"d_silu", DPL_VM_D_SILU, 1, ref_d_silu},
  {"d_softplus", DPL_VM_D_SOFTPLUS, 1, ref_d_softplus}, {"d_elu", DPL_VM_D_ELU, 1, ref_d_elu},
  {"d_mish", DPL_VM_D_MISH, 1, ref_d_mish},
  /* the special functions: against the double reference of dpl_special_math.h (libm's erfc) */
  {"lgamma", DPL_VM_LGAMMA, 0, dpl_sp_lgamma}, {"digamma", DPL_VM_DIGAMMA, 0, dpl_sp_digamma},
  {"erfc", DPL_VM_ERFC, 0, erfc}, {"i0", DPL_VM_I0, 0, ref_i0},
};

/* error of y in ulps of the float nearest to r (0 when both are the same special value) */
static double ulp_err(float y, double r)
{
  if (isnan(r)) return isnan(y) ? 0 : INFINITY;
  float rf = (float)r;
  if (isinf(rf)) return y == rf ? 0 : (isinf(y) || isnan(y) ? INFINITY : fabs(y - r) / ldexp(1, 104));
  if (isnan(y) || isinf(y)) return INFINITY;
  double a = fabs(r);
  int e;
  frexp(a, &e);                     /* a = m 2^e, m in [0.5, 1) */
  double ulp = a < 0x1p-126 ? 0x1p-149 : ldexp(1, e - 24);
  return fabs((double)y - r) / ulp;
}

enum { B = 4096 };

int main(int argc, char **argv)
{
  const char *want = argc > 1 ? argv[1] : "all";
  uint64_t stride = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
  int part = 0, parts = 1;
  if (argc > 3) sscanf(argv[3], "%d/%d", &part, &parts);
  int best = top_isa();
  for (size_t f = 0; f < sizeof F / sizeof F[0]; f++) {
    if (strcmp(want, "all") != 0) {
      size_t l = strlen(F[f].name);
      const char *p = want;
      int found = 0;
      while ((p = strstr(p, F[f].name)) != NULL) {
        if ((p == want || p[-1] == ',') && (p[l] == 0 || p[l] == ',')) { found = 1; break; }
        p += l;
      }
      if (!found) continue;
    }
    static float x[B], g[B], y[3][B];
    double worst = 0, worst_x = 0, worst_ref = 0;
    float worst_y = 0;
    uint64_t differ = 0, count = 0;
    uint64_t total = (1ull << 32) / stride, lo = total * part / parts, hi = total * (part + 1) / parts;
    for (uint64_t k0 = lo; k0 < hi; k0 += B) {
      int n = (int)(hi - k0 < B ? hi - k0 : B);
      for (int i = 0; i < n; i++) {
        uint32_t u = (uint32_t)((k0 + i) * stride);
        memcpy(&x[i], &u, 4);
        g[i] = 1.0f;
      }
      for (int isa = 0; isa <= best; isa++) {
        if (F[f].grad) grads[isa](F[f].fn, y[isa], g, x, n, 1.0f, 20.0f);
        else maps[isa](F[f].fn, y[isa], x, n, 1.0f, 20.0f);
      }
      for (int i = 0; i < n; i++) {
        for (int isa = 0; isa < best; isa++)
          if (memcmp(&y[isa][i], &y[best][i], 4) != 0 && !(isnan(y[isa][i]) && isnan(y[best][i]))) differ++;
        double r = F[f].ref((double)x[i]);
        if (F[f].fn == DPL_VM_GELU && !F[f].grad && x[i] < 0 && !isinf(x[i]) && fabsf(x[i]) * 0x1.6a09e6p-1f >= 3.95f) { /* -0 there (|gelu| < 1e-7), as documented */
          if (!(y[best][i] == 0 && signbit(y[best][i]))) { printf("gelu(%g) = %g, expected -0\n", x[i], y[best][i]); differ++; }
          continue;
        }
        double e = ulp_err(y[best][i], r);
        if (F[f].grad && fabs(r) < 1 && e > 0) e = isfinite(y[best][i]) ? fabs(y[best][i] - r) / 0x1p-23 : INFINITY;
        count++;
        if (e > worst || (e != e && worst == worst)) { worst = e; worst_x = x[i]; worst_y = y[best][i]; worst_ref = r; }
      }
    }
    printf("%-11s max %8.3f ulp at x = %-15.9g (got %.9g, want %.9g)  paths differ: %" PRIu64 " of %" PRIu64 "\n",
           F[f].name, worst, worst_x, worst_y, worst_ref, differ, count);
    fflush(stdout);
  }
  return 0;
}
