/* dpl_tensor_vmath_sp.h: the float32 kernels of four special functions (lgamma, digamma, erfc,
 * i0) for dpl_tensor_special.c, included by dpl_tensor_vmath_body.h once per instruction set
 * (its macros: VM(), vf/vi, VM_INL, VM_ANY, VM_W; and VM_SQRTD, VM_ANYH from dpl_tensor_vmath.c).
 * Each float32 element is widened to double and evaluated in double-precision vector lanes (each
 * float vector as two halves of native width: wider double vectors would be split lane by lane)
 * (double exp and log below, series and Chebyshev expansions whose coefficients
 * scripts/vmath_special_coeffs.py derives), then rounded once to float32: the results are the
 * double reference (dpl_special_math.h) rounded to float32 for all but a few inputs, which are
 * one float32 ulp off (docs/tensors.md gives the measured figures). Only IEEE add, sub, mul, div,
 * sqrt, compares and bit operations are used, no FMA (the file is compiled with
 * -ffp-contract=off), so that every path gives the same bits. Inputs outside a kernel's range
 * (lgamma and digamma at x <= 0 or +inf, NaN) go lane by lane to the double reference, on every
 * path alike. Also the Box-Muller transform of dpl_tensor_random.c's normal draws, in the same
 * double lanes. */

#ifndef DPL_TENSOR_VMATH_SP_TABLES
#define DPL_TENSOR_VMATH_SP_TABLES
/* lgamma(2 + t) = t sum_k SP_LGAMMA2[k] t^k, |t| <= 1/2 (Taylor: 1 - gamma, (-1)^k (zeta(k) - 1)/k) */
static const double SP_LGAMMA2[25] = {
  0x1.b0ee6072093cep-2, 0x1.4a34cc4a60fa6p-2, -0x1.13e001a557607p-4, 0x1.51322ac7d8483p-6,
  -0x1.e404fc218f5f2p-8, 0x1.7add6eadb6c30p-9, -0x1.38ac5c2bf8e08p-10, 0x1.0b36af86396e9p-11,
  -0x1.d3fd4c76d2fc8p-13, 0x1.a127b0f17d65ap-14, -0x1.78de5bd7c81efp-15, 0x1.580dcee66eb02p-16,
  -0x1.3cbc963ce2243p-17, 0x1.2597a39f34aacp-18, -0x1.11b2eb7679541p-19, 0x1.0064cdeb22f0fp-20,
  -0x1.e2600d93cfd2fp-22, 0x1.c76bbb3f07a4dp-23, -0x1.af5a6cbbf8a97p-24, 0x1.99b93c2070b0fp-25,
  -0x1.862c734df3eacp-26, 0x1.7469daccfadcdp-27, -0x1.6434a8447aeadp-28, 0x1.555a877ffd2c3p-29,
/* erfc(x) = exp(-x^2) F(u) / (1 + 2x) for x in [0, 10.1]: F = sum_j SP_ERFC[j] T_j(u),
 * t = (x - 3.75) / (x + 3.75), u = (2 t + 1 - T1) / (T1 + 1), T1 = t at 10.1 */
#define SP_ERFC_T1 0x1.d57cc3ed8428bp-2
  -0x1.47b1679258d0ep-30};
static const double SP_ERFC[20] = {
  0x1.325b1b9d11b6bp+0, 0x1.3fa5139f5478dp-5, -0x1.763b4d9c355acp-4, 0x1.7bfe9700b646ap-5,
  -0x1.f80dd9bfc8c52p-7, 0x1.ed6f53f60cc89p-9, -0x1.6974299aa7266p-11, 0x1.7776d1916b503p-14,
  -0x1.b75133f16b4e5p-18, -0x1.40c14eaab594fp-23, 0x1.8bf91870f5dc4p-24, -0x1.a5aa982b8031dp-28,
  -0x1.aeeb9e6bac6f1p-31, 0x1.1c2f1f6fc00bbp-33, 0x1.9c21afb8cbc58p-38, -0x1.2d3ea1046df54p-39,
/* i0(x) = exp(x) G(u) / sqrt(x) for x in [8, 100]: G = sum_j SP_I0_BIG[j] T_j(u), u = (2 w - 1.08) / 0.92, w = 8 / x */
  -0x1.c4643b5da32e7p-45, 0x1.3edd168fff328p-45, 0x1.ef8b6fd123d74p-51, -0x1.5df60a1df0189p-51};
static const double SP_I0_BIG[20] = {
  0x1.9c2a663f17efap-2, 0x1.98cd539fc680ap-9, 0x1.f26aa045f7231p-15, 0x1.3ac89eec2ec94p-19,
  0x1.547c2d1b8a10bp-23, 0x1.228f8ee531ecep-26, 0x1.485900a910609p-29, 0x1.41ab59a88b977p-32,
  -0x1.f46ef186d4520p-37, -0x1.b1cca1295e807p-36, -0x1.fdef0b04758b6p-38, -0x1.97b2b8e32d9efp-43,
  0x1.41230a1d83071p-41, 0x1.3d1ff6dfb2e2ep-43, -0x1.05c82c17e0dbbp-45, -0x1.50611d7b56cc9p-46,
/* i0(x) = sum_k SP_I0_SMALL[k] (x^2/4)^k, 1/(k!)^2, for x <= 8 */
  0x1.e794d3594270fp-51, 0x1.35ee2de521947p-49, 0x1.650e4c953d2dcp-55, -0x1.276f6b8411904p-52};
static const double SP_I0_SMALL[23] = {
  0x1.0000000000000p+0, 0x1.0000000000000p+0, 0x1.0000000000000p-2, 0x1.c71c71c71c71cp-6,
  0x1.c71c71c71c71cp-10, 0x1.23456789abcdfp-14, 0x1.02e85c0898b71p-19, 0x1.522a43f65486ap-25,
  0x1.522a43f65486ap-31, 0x1.0b313289be0b9p-37, 0x1.5601885e63e5dp-44, 0x1.69ca9cf3b7f54p-51,
  0x1.4197a7f5154bcp-58, 0x1.e725594ee52e9p-66, 0x1.3e22d70ef3b5fp-73, 0x1.69f7da8510bcdp-81,
  0x1.69f7da8510bcdp-89, 0x1.40a2dc2460523p-97, 0x1.faaf2fa1c79e5p-106, 0x1.674f8e46c208cp-114,
  0x1.cbeaf38dc529fp-123, 0x1.0afb53e9cec0bp-131, 0x1.1a6d4e307528fp-140};
#endif

/* a vector of doubles of the native width (half the float lanes; one lane on the scalar path),
 * its int64 masks, and the floats of one half */
#if VM_W > 1
#define VM_SP_H (VM_W / 2)
#else
#define VM_SP_H 1
#endif
typedef double VM(vh) __attribute__((vector_size(VM_SP_H * 8)));
typedef int64_t VM(vhl) __attribute__((vector_size(VM_SP_H * 8)));
typedef uint64_t VM(vhu) __attribute__((vector_size(VM_SP_H * 8))); /* (bit arithmetic: wraps, no overflow) */
typedef float VM(vfh) __attribute__((vector_size(VM_SP_H * 4)));
#define vh VM(vh)
#define vhl VM(vhl)
#define KD(c) ((vh){} + (c))
/* a ? b : c for double lanes (m: a comparison of double lanes) */
VM_INL vh VM(dsel)(vhl m, vh a, vh b) { return (vh)((m & (vhl)a) | (~m & (vhl)b)); }
VM_INL vh VM(dwiden)(VM(vfh) v) { return __builtin_convertvector(v, vh); }
VM_INL VM(vfh) VM(dnarrow)(vh v) { return __builtin_convertvector(v, VM(vfh)); }
/* integer lanes |e| < 2^20 as doubles */
VM_INL vh VM(dfrom_int)(vhl e) { return (vh)(e + (0x4330000000000000LL + (1LL << 20))) - (0x1p52 + 0x1p20); }

/* ln2 = SP_LN2_HI + SP_LN2_LO, SP_LN2_HI with 32 significant bits (n SP_LN2_HI exact for |n| < 2^20) */
#define SP_LN2_HI 0x1.62e42fee00000p-1
#define SP_LN2_LO 0x1.a39ef35793c76p-33

/* e^y for y in [-700, 700] (NaN passes): y = n ln2 + r, |r| <= ln2/2, e^r by its Taylor
 * polynomial of degree 12 (truncation below 2e-16), times 2^n built in the exponent bits */
VM_INL vh VM(dexp)(vh y)
{
  vh t = y * 0x1.71547652b82fep0 + 0x1.8p52;
  vh n = t - 0x1.8p52;
  vh r = (y - n * SP_LN2_HI) - n * SP_LN2_LO;
  vh p = KD(1.0 / 479001600);
  static const double inv_fact[12] = {1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320, 1.0 / 5040,
                                      1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5, 1, 1};
  for (int k = 0; k < 12; k++) p = p * r + inv_fact[k];
  VM(vhu) k2 = ((VM(vhu))t - 0x4338000000000000ULL + 1023) << 52; /* (NaN lanes: garbage, times NaN) */
  return p * (vh)k2;
}

/* log(x) for positive normal finite x: x = 2^e m, m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(s),
 * s = (m - 1)/(m + 1), |s| <= 0.172, by its series to s^23 (truncation below 1e-18) */
VM_INL vh VM(dlog)(vh x)
{
  VM(vhu) ix = (VM(vhu))x;
  vhl e = (vhl)(ix - 0x3fe6a09e667f3bcdULL) >> 52;
  vh m = (vh)(ix - ((VM(vhu))e << 52));
  vh s = (m - 1.0) / (m + 1.0), z = s * s;
  vh p = KD(1.0 / 23);
  for (int k = 21; k >= 1; k -= 2) p = p * z + 1.0 / k;
  vh ed = VM(dfrom_int)(e);
  return ed * SP_LN2_HI + (ed * SP_LN2_LO + (s + s) * p);
}

/* sum_j c[j] T_j(u), Clenshaw */
VM_INL vh VM(dcheb)(const double *c, int n, vh u)
{
  vh b1 = {}, b2 = {}, u2 = u + u;
  for (int j = n - 1; j >= 1; j--) {
    vh b = u2 * b1 - b2 + c[j];
    b2 = b1;
    b1 = b;
  }
  return u * b1 - b2 + c[0];
}

/* lgamma for x > 0, finite: [0.5, 2.5] from the Taylor series at 2 (less log x below 1.5), else
 * lgamma(z) - log(x (x + 1) ... (z - 1)) with z = x + n >= 8 and Stirling's series for lgamma(z)
 * (other lanes: anything, the caller replaces them) */
VM_INL vh VM(lgamma_h)(vh x)
{
  vh pt = {}, st = {};
  vhl mid = (x >= 0.5) & (x <= 2.5), lo = x < 1.5;
  vh prod = KD(1.0);
  if (VM_ANYH(mid)) {
    vh t = x - VM(dsel)(lo, KD(1.0), KD(2.0));
    vh p = KD(SP_LGAMMA2[24]);
    for (int k = 23; k >= 0; k--) p = p * t + SP_LGAMMA2[k];
    pt = p * t;
  }
  if (VM_ANYH(~mid)) {
    vh z = VM(dsel)((x > 0.0) & (x < 1e300), x, KD(1.0)); /* (NaN, inf, x <= 0: anything finite) */
    for (int k = 0; k < 8; k++) {
      vhl m = z < 8.0;
      prod = VM(dsel)(m, prod * z, prod);
      z = VM(dsel)(m, z + 1.0, z);
    }
    vh r = 1.0 / z, f = r * r;
    /* 1/(12z) - 1/(360z^3) + 1/(1260z^5) - 1/(1680z^7) + 1/(1188z^9) - 691/(360360z^11) + 1/(156z^13) */
    vh s = ((((((1.0 / 156) * f - 691.0 / 360360) * f + 1.0 / 1188) * f - 1.0 / 1680) * f + 1.0 / 1260) * f -
            1.0 / 360) * f + 1.0 / 12;
    st = (z - 0.5) * VM(dlog)(z) - z + (0.91893853320467274178 + s * r);
  }
  /* one log for both: log x (below 1.5) in the Taylor lanes, log of the shift's product in the others */
  vh l2 = VM(dlog)(VM(dsel)(mid, VM(dsel)(lo, x, KD(1.0)), prod));
  return VM(dsel)(mid, pt, st) - l2;
}

/* digamma for x > 0, finite: psi(z) - sum_k<n 1/(x + k) with z = x + n >= 10 (the sum as one
 * fraction num/den), psi(z) by its asymptotic series (the terms of dpl_sp_digamma_pos) */
VM_INL vh VM(digamma_h)(vh x)
{
  vh z = VM(dsel)((x > 0.0) & (x < 1e300), x, KD(1.0)), num = {}, den = KD(1.0);
  for (int k = 0; k < 10; k++) {
    vhl m = z < 10.0;
    num = VM(dsel)(m, num * z + den, num);
    den = VM(dsel)(m, den * z, den);
    z = VM(dsel)(m, z + 1.0, z);
  }
  vh f = 1.0 / (z * z);
  vh s = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132 - f * (691.0 / 32760 - f / 12))))));
  return ((VM(dlog)(z) - 0.5 / z) - s) - num / den;
}

/* erfc: exp(-a^2) F(u) / (1 + 2a) for a = |x| clamped to 10.1 (erfc(10.1) rounds to 0 in
 * float32), 2 - that for x < 0 (NaN passes) */
VM_INL vh VM(erfc_h)(vh x)
{
  vh a = (vh)((vhl)x & 0x7fffffffffffffffLL);
  a = VM(dsel)(a > 10.1, KD(10.1), a);
  vh t = (a - 3.75) / (a + 3.75);
  vh u = t * (2 / (SP_ERFC_T1 + 1)) + (1 - SP_ERFC_T1) / (SP_ERFC_T1 + 1);
  vh e = VM(dexp)(-(a * a)) * VM(dcheb)(SP_ERFC, 20, u) / (1.0 + (a + a));
  return VM(dsel)(x < 0.0, 2.0 - e, e);
}

/* i0: sum_k (x^2/4)^k / (k!)^2 for |x| <= 8, exp(|x|) G(u) / sqrt(|x|) beyond (|x| clamped to
 * 100: the float32 result overflows from 91.9 on); i0(+-inf) is NaN, as dpl_sp_bessel_i */
VM_INL vh VM(i0_h)(vh x)
{
  vh a = (vh)((vhl)x & 0x7fffffffffffffffLL), res = {};
  vhl small = a <= 8.0;
  if (VM_ANYH(small)) {
    vh y = a * a * 0.25, p = KD(SP_I0_SMALL[22]);
    for (int k = 21; k >= 0; k--) p = p * y + SP_I0_SMALL[k];
    res = p;
  }
  if (VM_ANYH(~small)) {
    vh ac = VM(dsel)(a > 8.0, a, KD(8.0));
    ac = VM(dsel)(ac < 100.0, ac, KD(100.0));
    vh u = (8.0 / ac) * (2 / 0.92) - 1.08 / 0.92;
    vh big = VM(dexp)(ac) * VM(dcheb)(SP_I0_BIG, 20, u) / VM_SQRTD(ac);
    res = VM(dsel)(small, res, big);
  }
  res = VM(dsel)(a == __builtin_inf(), KD(__builtin_nan("")), res);
  return VM(dsel)(x != x, x, res);
}

/* ---- Box-Muller for dpl_tensor_random.c ---- */
/* unsigned 32-bit lanes as doubles (exact) */
VM_INL vh VM(dfrom_u32)(const uint32_t *p)
{
  typedef uint32_t vuh __attribute__((vector_size(VM_SP_H * 4)));
  vuh b;
  memcpy(&b, p, sizeof b);
  vhl l = __builtin_convertvector(b, vhl); /* (zero-extended) */
  return (vh)(l | 0x4330000000000000LL) - 0x1p52;
}
/* z = sqrt(-2 log u1) cos(theta) for u1 = (a + 1) 2^-32 and theta = 6.283185307179586 (b 2^-32),
 * the double theta of dpl_tensor_random.c's libm formula: theta = n pi/2 + r (n <= 4, the first
 * part of pi/2 with 33 bits: n pi/2 exact), cos and sin of |r| <= pi/4 by their Taylor polynomials
 * to r^16 and r^17 (truncation below 1e-17) */
VM_INL vh VM(box_muller_h)(vh a, vh b)
{
  vh u1 = (a + 1.0) * 0x1p-32, th = 6.283185307179586 * (b * 0x1p-32);
  vh t = th * 0x1.45f306dc9c883p-1 + 0x1.8p52, n = t - 0x1.8p52;
  vh r = (th - n * 0x1.921fb54400000p+0) - n * 0x1.0b4611a626331p-34;
  vh z2 = r * r;
  vh c = KD(1.0 / 20922789888000.0), sn = KD(1.0 / 355687428096000.0);
  static const double cc[8] = {-1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0, 1.0 / 40320.0,
                               -1.0 / 720.0, 1.0 / 24.0, -0.5, 1.0};
  static const double sc[8] = {-1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
                               -1.0 / 5040.0, 1.0 / 120.0, -1.0 / 6.0, 1.0};
  for (int k = 0; k < 8; k++) {
    c = c * z2 + cc[k];
    sn = sn * z2 + sc[k];
  }
  sn = sn * r;
  vhl q = (vhl)t & 3;
  vh cs = VM(dsel)((q & 1) != 0, sn, c);                                    /* cos r, sin r, cos r, sin r */
  cs = (vh)((vhl)cs ^ ((((q + 1) & 2) != 0) & ((vhl){} + INT64_MIN))); /* + - - + */
  return VM_SQRTD(-2.0 * VM(dlog)(u1)) * cs;
}
/* normal draws into float32: z for the pairs (u0[i], u1[i]), v = mean + sd z rounded to out[i];
 * the lanes where v lies within d of a float32 rounding boundary (d far above the difference of z
 * from the libm formula's: 2^-40 |sd|, plus the double roundings of v; and 0, inf, NaN results)
 * are listed in redo for the caller to recompute; returns how many */
VM_INL vhl VM(normal_round_h)(vh z, vh mean, vh sd, VM(vfh) *out)
{
  typedef uint32_t vih __attribute__((vector_size(VM_SP_H * 4)));
  vh v = mean + sd * z;
  VM(vfh) f = VM(dnarrow)(v);
  vih fb = (vih)f;
  vh fd = VM(dwiden)(f), dn = VM(dwiden)((VM(vfh))(fb - 1)), up = VM(dwiden)((VM(vfh))(fb + 1));
  vhl absm = (vhl){} + 0x7fffffffffffffffLL;
  vh d = (vh)((vhl)sd & absm) * (0x1p-40 + (vh)((vhl)z & absm) * 0x1p-50) + (vh)((vhl)v & absm) * 0x1p-50;
  vh e1 = v - (fd + dn) * 0.5, e2 = v - (fd + up) * 0.5;
  *out = f;
  return ((vh)((vhl)e1 & absm) > d) & ((vh)((vhl)e2 & absm) > d); /* (NaN neighbours: false) */
}
/* the lanes of ok not set, i0 + their index, appended to redo */
#define VM_SP_REDO(ok, i0, m)                                                        \
  do {                                                                               \
    if (VM_ANYH(~(ok)))                                                              \
      for (int k_ = 0; k_ < (m); k_++)                                               \
        if (!(ok)[k_]) redo[nredo++] = (int32_t)((i0) + k_);                         \
  } while (0)
VM_TARGET static int VM(normal_f32)(const uint32_t *u0, const uint32_t *u1, int64_t n, double mean, double sd,
                                    float *out, int32_t *redo)
{
  int nredo = 0;
  int64_t i = 0;
  for (; i + 2 * VM_SP_H <= n; i += 2 * VM_SP_H) { /* two vectors a step: two dependency chains */
    VM(vfh) f0, f1;
    vh z0 = VM(box_muller_h)(VM(dfrom_u32)(u0 + i), VM(dfrom_u32)(u1 + i));
    vh z1 = VM(box_muller_h)(VM(dfrom_u32)(u0 + i + VM_SP_H), VM(dfrom_u32)(u1 + i + VM_SP_H));
    vhl ok0 = VM(normal_round_h)(z0, KD(mean), KD(sd), &f0), ok1 = VM(normal_round_h)(z1, KD(mean), KD(sd), &f1);
    memcpy(out + i, &f0, sizeof f0);
    memcpy(out + i + VM_SP_H, &f1, sizeof f1);
    VM_SP_REDO(ok0, i, VM_SP_H);
    VM_SP_REDO(ok1, i + VM_SP_H, VM_SP_H);
  }
  for (; i < n; i += VM_SP_H) { /* the rest through padded vectors */
    uint32_t a[VM_SP_H] = {0}, b[VM_SP_H] = {0};
    int64_t m = n - i < VM_SP_H ? n - i : VM_SP_H;
    memcpy(a, u0 + i, (size_t)m * 4);
    memcpy(b, u1 + i, (size_t)m * 4);
    VM(vfh) f;
    vhl ok = VM(normal_round_h)(VM(box_muller_h)(VM(dfrom_u32)(a), VM(dfrom_u32)(b)), KD(mean), KD(sd), &f);
    memcpy(out + i, &f, (size_t)m * 4);
    VM_SP_REDO(ok, i, m);
  }
  return nredo;
}
#undef VM_SP_REDO

/* ---- Marsaglia and Tsang's standard Gamma draws, one try, for dpl_tensor_random.c ---- */
/* for alpha (boosted to alpha + 1 below 1): d = a - 1/3, c = 1/sqrt(9d); z the Box-Muller normal of
 * (w0, w1), u = (w2 + 1/2) 2^-32, v = (1 + c z)^3; accepted when v > 0 and log u < z^2/2 + d - d v +
 * d log v, x = d v, times ((w3 + 1/2) 2^-32)^(1/alpha) for alpha < 1 (the exponent's log kept above
 * -708: smaller draws are clamped by the caller anyway). Returns the acceptance mask. */
VM_INL vhl VM(gamma_try_h)(vh alpha, vh w0, vh w1, vh w2, vh w3, vh *x)
{
  vhl small = alpha < 1.0;
  vh a = VM(dsel)(small, alpha + 1.0, alpha);
  vh d = a - 1.0 / 3, c = 1.0 / VM_SQRTD(9.0 * d);
  vh z = VM(box_muller_h)(w0, w1);
  vh t = 1.0 + c * z, v = t * t * t;
  vhl pos = v > 0.0;
  vh lu = VM(dlog)((w2 + 0.5) * 0x1p-32);
  vh rhs = (0.5 * z * z + d) - d * v + d * VM(dlog)(VM(dsel)(pos, v, KD(1.0)));
  vh lb = VM(dlog)((w3 + 0.5) * 0x1p-32) / VM(dsel)(small, alpha, KD(1.0));
  lb = VM(dsel)(lb > -708.0, lb, KD(-708.0));
  *x = d * v * VM(dsel)(small, VM(dexp)(lb), KD(1.0));
  return pos & (lu < rhs);
}
/* one try for each of n draws: words w[4][i], alpha[i]; accepted ones to x[i], the others' i to redo */
VM_TARGET static int VM(gamma_try)(const uint32_t *const *w, const double *alpha, int64_t n, double *x, int32_t *redo)
{
  int nredo = 0;
  for (int64_t i = 0; i < n; i += VM_SP_H) {
    int64_t m = n - i < VM_SP_H ? n - i : VM_SP_H;
    uint32_t b[4][VM_SP_H] = {{0}};
    double al[VM_SP_H];
    for (int k = 0; k < VM_SP_H; k++) al[k] = 1.0;
    for (int q = 0; q < 4; q++) memcpy(b[q], w[q] + i, (size_t)m * 4);
    memcpy(al, alpha + i, (size_t)m * 8);
    vh av, xv;
    memcpy(&av, al, sizeof av);
    vhl ok = VM(gamma_try_h)(av, VM(dfrom_u32)(b[0]), VM(dfrom_u32)(b[1]), VM(dfrom_u32)(b[2]), VM(dfrom_u32)(b[3]), &xv);
    double xs[VM_SP_H];
    memcpy(xs, &xv, sizeof xs);
    for (int k = 0; k < m; k++) {
      if (ok[k]) x[i + k] = xs[k];
      else redo[nredo++] = (int32_t)(i + k);
    }
  }
  return nredo;
}

/* f over a float vector: each half widened, f_h, narrowed */
#define VM_SP_MAP(v, f_h)                                                            \
  ({                                                                                 \
    vf r_;                                                                           \
    if (VM_W == 1) {                                                                 \
      VM(vfh) h_;                                                                    \
      memcpy(&h_, &(v), 4);                                                          \
      h_ = VM(dnarrow)(f_h(VM(dwiden)(h_)));                                         \
      memcpy(&r_, &h_, 4);                                                           \
    } else {                                                                         \
      VM(vfh) h_[2];                                                                 \
      memcpy(h_, &(v), sizeof(v));                                                  \
      h_[0] = VM(dnarrow)(f_h(VM(dwiden)(h_[0])));                                   \
      h_[1] = VM(dnarrow)(f_h(VM(dwiden)(h_[1])));                                   \
      memcpy(&r_, h_, sizeof r_);                                                    \
    }                                                                                \
    r_;                                                                              \
  })

/* lanes of res where m is set, recomputed in double by the reference f */
#define VM_SP_REF_LANES(res, v, m, f)                                                \
  do {                                                                               \
    if (VM_ANY(m))                                                                   \
      for (int k_ = 0; k_ < VM_W; k_++)                                              \
        if ((m)[k_]) (res)[k_] = (float)f((double)(v)[k_]);                          \
  } while (0)

/* lgamma and digamma: x <= 0, +inf and NaN by the reference */
VM_INL vf VM(lgamma)(vf v)
{
  vf r = VM_SP_MAP(v, VM(lgamma_h));
  vi ref = ~(v > 0.0f) | (v == __builtin_inff());
  VM_SP_REF_LANES(r, v, ref, dpl_sp_lgamma);
  return r;
}
VM_INL vf VM(digamma)(vf v)
{
  vf r = VM_SP_MAP(v, VM(digamma_h));
  vi ref = ~(v > 0.0f) | (v == __builtin_inff());
  VM_SP_REF_LANES(r, v, ref, dpl_sp_digamma);
  return r;
}
VM_INL vf VM(erfc)(vf v) { return VM_SP_MAP(v, VM(erfc_h)); }
VM_INL vf VM(i0)(vf v) { return VM_SP_MAP(v, VM(i0_h)); }

#undef KD
#undef VM_SP_MAP
#undef VM_SP_REF_LANES
#undef VM_SP_H
#undef vh
#undef vhl
