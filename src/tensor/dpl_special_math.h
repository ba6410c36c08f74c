/* dpl_special_math.h: the per-element math of the special functions (torch.special): lgamma,
 * digamma, polygamma, erfc, erfcx, the modified Bessel functions i0/i0e/i1/i1e, ndtr, ndtri,
 * log_ndtr, sinc, Hurwitz's zeta and the regularized incomplete gamma functions, in double
 * precision. The one copy of these formulas: the CPU loops (dpl_tensor_special.c, C) and the
 * CUDA kernel (src/cuda/dpl_cuda_special.cu, CUDA C++; also the CPU emulator's g++) include
 * it, where each function is a `static inline __host__ __device__` one. No recursion, no
 * file-scope data (device code could not read it), only libm / CUDA math calls. */
#ifndef DPL_SPECIAL_MATH_H
#define DPL_SPECIAL_MATH_H
#include "dpl.h"
#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__) || defined(__host__)
#define DPL_SPF static inline __host__ __device__
#else
#define DPL_SPF static inline
#endif

#define DPL_SP_PI 3.14159265358979323846
#define DPL_SP_SQRT2 1.41421356237309504880
#define DPL_SP_SQRT2PI 2.50662827463100050242
#define DPL_SP_LOG_SQRT2PI 0.91893853320467274178
#define DPL_SP_SQRTPI 1.77245385090551602730

/* ---- one-argument functions ---- */
DPL_SPF double dpl_sp_lgamma(double x)
{
#if defined(__CUDA_ARCH__)
  return lgamma(x);
#else
  int sign;
  return lgamma_r(x, &sign); /* (thread-safe: no signgam) */
#endif
}

/* digamma for x > 0: psi(x) = psi(x + 1) - 1/x up to 10, then the asymptotic series */
DPL_SPF double dpl_sp_digamma_pos(double x)
{
  double r = 0;
  while (x < 10) { r -= 1 / x; x += 1; }
  double f = 1 / (x * x); /* ln x - 1/(2x) - sum B_2k / (2k x^2k) */
  return r + log(x) - 0.5 / x -
         f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132 - f * (691.0 / 32760 - f / 12))))));
}

DPL_SPF double dpl_sp_digamma(double x)
{
  if (x == 0) return copysign((double)INFINITY, -x); /* -inf at +0, +inf at -0 (PyTorch's) */
  if (x != x || x == -INFINITY) return NAN;
  if (x == INFINITY) return INFINITY;
  if (x < 0) {
    if (x == floor(x)) return NAN;
    return dpl_sp_digamma_pos(1 - x) - DPL_SP_PI / tan(DPL_SP_PI * x); /* reflection */
  }
  return dpl_sp_digamma_pos(x);
}

/* Hurwitz zeta: sum over k >= 0 of (q + k)^-s, s > 1 (Euler-Maclaurin after the first terms) */
/* zeta(s, q) for q > 0, or q < 0 of a moderate size (|q| <= 64: shifted by ceil(-q) terms) */
DPL_SPF double dpl_sp_zeta_sum(double s, double q)
{
  /* B_2j / (2j)! for j = 1..12 */
  const double bern_ratio[13] = {
    0, 1.0 / 12, -1.0 / 720, 1.0 / 30240, -1.0 / 1209600, 1.0 / 47900160, -691.0 / 1307674368000.0,
    1.0 / 74724249600.0, -3617.0 / 10670622842880000.0, 43867.0 / 5109094217170944000.0,
    -174611.0 / 802857662698291200000.0, 77683.0 / 14101100039391805440000.0,
    -236364091.0 / 1693824136731743669452800000.0};
  if (s != s || q != q) return NAN;
  if (s == 1) return INFINITY;
  if (s < 1) return NAN;
  int N = 9;
  if (q < 0) N += (int)ceil(-q);
  double sum = 0;
  for (int k = 0; k < N; k++) sum += pow(q + k, -s);
  double w = q + N, wp = pow(w, -s);
  sum += w * wp / (s - 1) + 0.5 * wp;
  double fac = s * wp / w; /* (s)_(2j-1) w^(-s-2j+1) */
  for (int j = 1; j <= 12; j++) {
    double t = bern_ratio[j] * fac;
    sum += t;
    if (fabs(t) <= 1e-17 * fabs(sum)) break;
    fac *= (s + 2 * j - 1) * (s + 2 * j) / (w * w);
  }
  return sum;
}

/* Hurwitz's zeta(s, q) = sum over k >= 0 of (q + k)^-s */
DPL_SPF double dpl_sp_zeta(double s, double q)
{
  if (s != s || q != q) return NAN;
  if (s == 1) return INFINITY;
  if (s < 1) return NAN;
  if (q <= 0) {
    if (q == floor(q)) return INFINITY; /* a pole (q = -inf too) */
    if (s != floor(s)) return NAN;      /* (q + k)^-s of a negative base */
    if (q < -64) {
      /* ceil(-q) terms before q + k turns positive would take as many steps (and overflow an int):
       * with f = q - floor(q) in (0, 1) and m = ceil(-q), those terms are (f - j)^-s for j = 1..m,
       * (-1)^s (j - f)^-s, whose sum is (-1)^s (zeta(s, 1 - f) - zeta(s, 1 - q)) */
      double f = q - floor(q);
      double sign = floor(s / 2) * 2 == s ? 1 : -1; /* (s is an integer here) */
      return dpl_sp_zeta_sum(s, f) + sign * (dpl_sp_zeta_sum(s, 1 - f) - dpl_sp_zeta_sum(s, 1 - q));
    }
  }
  return dpl_sp_zeta_sum(s, q);
}

DPL_SPF double dpl_sp_polygamma(int64_t n, double x)
{
  if (n == 0) return dpl_sp_digamma(x);
  double fact = 1;
  /* n! (inf from n = 171 on: no need to count to a huge n) */
  for (int64_t k = 2; k <= n && fact < INFINITY; k++) fact *= (double)k;
  double z = dpl_sp_zeta((double)n + 1, x);
  return (n % 2 ? fact : -fact) * z;
}

/* erfc(x) exp(x^2) for x >= 0: a continued fraction from 3 on */
DPL_SPF double dpl_sp_erfcx_pos(double x)
{
  if (x < 3) return exp(x * x) * erfc(x);
  if (x > 1e8) return 1 / (DPL_SP_SQRTPI * x);
  /* erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...))))) */
  double k = x;
  for (int j = 60; j >= 1; j--) k = x + (j * 0.5) / k;
  return 1 / (DPL_SP_SQRTPI * k);
}

/* erfc(x) exp(x^2), without overflow */
DPL_SPF double dpl_sp_erfcx(double x)
{
  if (x != x) return NAN;
  if (x < 0) {
    if (x < -26.7) return INFINITY;
    return 2 * exp(x * x) - dpl_sp_erfcx_pos(-x);
  }
  return dpl_sp_erfcx_pos(x);
}

/* modified Bessel functions of the first kind, orders 0 and 1; scaled = 1: times exp(-|x|) */
DPL_SPF double dpl_sp_bessel_i(int order, double x, int scaled)
{
  if (x != x) return NAN;
  double ax = fabs(x);
  if (ax == INFINITY) return scaled ? 0.0 * x : NAN; /* (PyTorch: i0(inf) and i1(inf) are nan, i0e/i1e 0) */
  double r;
  if (ax <= 30) { /* sum_k (x/2)^(2k+order) / (k! (k+order)!) */
    double h = ax / 2, q = h * h, t = order ? h : 1, sum = t;
    for (int k = 1; k < 500; k++) {
      t *= q / ((double)k * (double)(k + order));
      sum += t;
      if (t < 1e-17 * sum) break;
    }
    r = scaled ? sum * exp(-ax) : sum;
  } else { /* e^x / sqrt(2 pi x) * sum_k (-1)^k prod (mu - (2j-1)^2) / (k! (8x)^k), mu = 4 order^2 */
    double mu = 4.0 * order * order, t = 1, sum = 1;
    for (int k = 1; k < 60; k++) {
      double nt = -t * (mu - (2.0 * k - 1) * (2.0 * k - 1)) / (k * 8.0 * ax);
      if (fabs(nt) >= fabs(t)) break;
      t = nt;
      sum += t;
      if (fabs(t) < 1e-17 * fabs(sum)) break;
    }
    r = sum / sqrt(2 * DPL_SP_PI * ax);
    if (!scaled) r *= exp(ax);
  }
  return order && x < 0 ? -r : r;
}

DPL_SPF double dpl_sp_ndtr(double x) { return 0.5 * erfc(-x / DPL_SP_SQRT2); }

DPL_SPF double dpl_sp_log_ndtr(double x)
{
  if (x != x) return NAN;
  if (x > 0) return log1p(-0.5 * erfc(x / DPL_SP_SQRT2));
  if (x > -20) return log(0.5 * erfc(-x / DPL_SP_SQRT2));
  /* -x^2/2 - log(-x) - log sqrt(2 pi) + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + ...) */
  double x2 = x * x, t = 1, s = 1;
  for (int k = 1; k < 20; k++) {
    t *= -(2.0 * k - 1) / x2;
    s += t;
  }
  return -0.5 * x2 - log(-x) - DPL_SP_LOG_SQRT2PI + log(s);
}

/* the inverse of ndtr: rational first guesses (Acklam's coefficients) refined by Halley steps */
DPL_SPF double dpl_sp_ndtri(double p)
{
  if (p != p || p < 0 || p > 1) return NAN;
  if (p == 0) return -INFINITY;
  if (p == 1) return INFINITY;
  const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                       1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                       6.680131188771972e+01, -1.328068155288572e+01};
  const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                       -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                       3.754408661907416e+00};
  double x;
  if (p < 0.02425 || p > 1 - 0.02425) {
    double q = sqrt(-2 * log(p < 0.5 ? p : 1 - p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    if (p > 0.5) x = -x;
  } else {
    double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  for (int it = 0; it < 2; it++) { /* Halley on ndtr(x) - p, the tail measured from its own side */
    /* ndtr(x) - p without cancellation: through erf in the middle (p - 0.5 is exact there) */
    double e = (p > 0.25 && p < 0.75) ? 0.5 * erf(x / DPL_SP_SQRT2) - (p - 0.5)
             : p < 0.5 ? dpl_sp_ndtr(x) - p : (1 - p) - 0.5 * erfc(x / DPL_SP_SQRT2);
    double u = e * DPL_SP_SQRT2PI * exp(0.5 * x * x);
    if (!(u == u) || fabs(u) == INFINITY) break;
    x -= u / (1 + 0.5 * x * u);
  }
  return x;
}

DPL_SPF double dpl_sp_sinc(double x)
{
  if (x == 0) return 1;
  double px = DPL_SP_PI * x;
  return sin(px) / px;
}

/* regularized lower (upper = 0) or upper incomplete gamma function P(a, x) / Q(a, x) */
DPL_SPF double dpl_sp_gammainc(double a, double x, int upper)
{
  if (a != a || x != x || a < 0 || x < 0) return NAN;
  if (a == 0) {
    if (x > 0) return upper ? 0 : 1;
    return NAN;
  }
  if (x == 0) return upper ? 1 : 0;
  if (x == INFINITY) return upper ? 0 : 1;
  if (a == INFINITY) return upper ? 1 : 0;
  double lg = a * log(x) - x - dpl_sp_lgamma(a);
  if (x < a + 1) { /* P = x^a e^-x / Gamma(a + 1) * sum_k x^k / ((a+1)...(a+k)) */
    double t = 1 / a, sum = t;
    for (int k = 1; k < 10000; k++) {
      t *= x / (a + k);
      sum += t;
      if (t < 1e-17 * sum) break;
    }
    double P = sum * exp(lg);
    return upper ? 1 - P : P;
  }
  /* Q = x^a e^-x / Gamma(a) * 1 / (x + 1 - a - 1(1 - a) / (x + 3 - a - 2(2 - a) / (x + 5 - a - ...))) (Lentz) */
  double tiny = 1e-300, bb = x + 1 - a, cc = 1 / tiny, dd = 1 / bb, h = dd;
  for (int i = 1; i < 10000; i++) {
    double an = -i * (i - a);
    bb += 2;
    dd = an * dd + bb;
    if (fabs(dd) < tiny) dd = tiny;
    cc = bb + an / cc;
    if (fabs(cc) < tiny) cc = tiny;
    dd = 1 / dd;
    double del = dd * cc;
    h *= del;
    if (fabs(del - 1) < 1e-16) break;
  }
  double Q = exp(lg) * h;
  return upper ? Q : 1 - Q;
}

/* ---- dispatch by op id (dpl_specop, include/dpl.h) ---- */
/* a one-argument function of x (n: polygamma's order); NaN for an unknown op */
DPL_SPF double dpl_sp_eval1(int32_t op, int64_t n, double x)
{
  switch (op) {
  case DPL_SP_LGAMMA: return dpl_sp_lgamma(x);
  case DPL_SP_DIGAMMA: return dpl_sp_digamma(x);
  case DPL_SP_POLYGAMMA: return dpl_sp_polygamma(n, x);
  case DPL_SP_ERFC: return erfc(x);
  case DPL_SP_ERFCX: return dpl_sp_erfcx(x);
  case DPL_SP_I0: return dpl_sp_bessel_i(0, x, 0);
  case DPL_SP_I0E: return dpl_sp_bessel_i(0, x, 1);
  case DPL_SP_I1: return dpl_sp_bessel_i(1, x, 0);
  case DPL_SP_I1E: return dpl_sp_bessel_i(1, x, 1);
  case DPL_SP_NDTR: return dpl_sp_ndtr(x);
  case DPL_SP_NDTRI: return dpl_sp_ndtri(x);
  case DPL_SP_LOG_NDTR: return dpl_sp_log_ndtr(x);
  case DPL_SP_SINC: return dpl_sp_sinc(x);
  default: return NAN;
  }
}

/* a two-argument function: zeta(a, b), gammainc(a, b), gammaincc(a, b) */
DPL_SPF double dpl_sp_eval2(int32_t op, double a, double b)
{
  if (op == DPL_SP_ZETA) return dpl_sp_zeta(a, b);
  return dpl_sp_gammainc(a, b, op == DPL_SP_GAMMAINCC);
}

#endif
