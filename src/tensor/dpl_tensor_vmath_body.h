/* dpl_tensor_vmath_body.h: the float32 vector math kernels themselves, written once
 * with GCC vector extensions and included by dpl_tensor_vmath.c once per instruction
 * set. The includer defines VM_W (lanes: 16 for AVX-512, 8 for AVX2, 1 for the scalar
 * path), VM_SFX (the suffix of every name made here), VM_TARGET (a target attribute or
 * nothing), VM_SQRT(v), VM_FMA(a, b, c), VM_MAXC(x, c), VM_MINC(x, c) and VM_ANY(m) (any
 * lane of an int mask set).
 *
 * Only IEEE operations whose results the standard fixes are used (add, sub, mul, div,
 * sqrt, fused multiply-add written out (VM_FMA: the scalar path calls fmaf), compares,
 * bit operations; no approximate reciprocal), so every path gives the same bits for
 * every element; the file is compiled with -ffp-contract=off so that the compiler fuses
 * nothing on its own. VM_MAXC / VM_MINC are (c > x ? c : x) and (c < x ? c : x), as
 * maxps / minps with c first. Arguments where a polynomial cannot reach the accuracy
 * (sin/cos/tan beyond |x| > 1.5e6) go to libm lane by lane, on every path alike. */

#define VM_CAT2(a, b) a##_##b
#define VM_CAT(a, b) VM_CAT2(a, b)
#define VM(name) VM_CAT(name, VM_SFX)
#define VM_INL static inline __attribute__((always_inline)) VM_TARGET

typedef float VM(vf) __attribute__((vector_size(VM_W * 4)));
typedef int32_t VM(vi) __attribute__((vector_size(VM_W * 4)));
typedef double VM(vd) __attribute__((vector_size(VM_W * 8)));
typedef uint32_t VM(vu) __attribute__((vector_size(VM_W * 4)));
typedef int64_t VM(vl) __attribute__((vector_size(VM_W * 8)));
#define vf VM(vf)
#define vi VM(vi)
#define vu VM(vu)
#define vd VM(vd)
#define vl VM(vl)

/* ---- helpers ---- */
VM_INL vf VM(load)(const float *p) { vf v; memcpy(&v, p, sizeof v); return v; }
VM_INL void VM(store)(float *p, vf v) { memcpy(p, &v, sizeof v); }
VM_INL vf VM(sel)(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }
VM_INL vi VM(seli)(vi m, vi a, vi b) { return (m & a) | (~m & b); }
VM_INL vf VM(fabs)(vf x) { return (vf)((vi)x & 0x7fffffff); }
VM_INL vi VM(signbit)(vf x) { return (vi)x & INT32_MIN; }
VM_INL vf VM(orsign)(vf x, vi s) { return (vf)((vi)x | s); }
VM_INL vf VM(fma)(vf a, vf b, vf c) { return VM_FMA(a, b, c); }
/* c > x ? c : x and c < x ? c : x (NaN x stays NaN) */
VM_INL vf VM(maxc)(vf x, float c) { return VM_MAXC(x, ((vf){} + c)); }
VM_INL vf VM(minc)(vf x, float c) { return VM_MINC(x, ((vf){} + c)); }
/* 2^k for integer lanes k in [-126, 127] */
VM_INL vf VM(pow2i)(vi k) { return (vf)(((vu)k + 127u) << 23); }
/* x * m rounded to the nearest integer (ties to even), for |x * m| < 2^22: the value and the integer */
VM_INL vf VM(rint_mul)(vf x, float m, vi *k)
{
  vf t = VM(fma)(x, (vf){} + m, (vf){} + 0x1.8p23f);
  *k = (vi)((vu)t - 0x4B400000u); /* (unsigned: lanes of NaN or out of range give garbage, not overflow) */
  return t - 0x1.8p23f;
}
#define sel VM(sel)
#define vfabs VM(fabs)
#define FMA VM(fma)
#define K(c) ((vf){} + (c))

/* ---- exp family ---- */
/* ln2 = LN2F + LN2F_LO (LN2F: ln2 rounded to float) */
#define LN2F 0x1.62e430p-1f
#define LN2F_LO -0x1.05c610p-29f
#define LOG2E 0x1.715476p+0f

/* e^r for |r| <= ln2/2 + a little: 1 + r + r^2 P(r) (weighted fit error 0.007 x 2^-24), in Horner form */
VM_INL vf VM(exp_poly)(vf r)
{
  vf p = K(0x1.9e7d96p-13f);
  p = FMA(p, r, K(0x1.6d3aacp-10f));
  p = FMA(p, r, K(0x1.1112d4p-7f));
  p = FMA(p, r, K(0x1.5554f8p-5f));
  p = FMA(p, r, K(0x1.555554p-3f));
  p = FMA(p, r, K(0x1p-1f));
  p = FMA(p, r, K(1.0f));
  return FMA(p, r, K(1.0f));
}

/* p * 2^n for p in [2^-40, 2^40] and n in [-162, 128]: two exact steps, then one rounding
 * (into the subnormals or to infinity) */
VM_INL vf VM(scale2)(vf p, vi n)
{
  vi n1 = n >> 1;
  return p * VM(pow2i)(n1) * VM(pow2i)(n - n1);
}

/* x clamped to [-112, 89], the range of exp_parts (NaN stays NaN) */
VM_INL vf VM(exp_clamp)(vf x) { return VM(minc)(VM(maxc)(x, -112.0f), 89.0f); }
/* e^x as p 2^k with p in [0.7, 1.5] and k in [-162, 128], for x = exp_clamp(x):
 * n = round(x / ln2), r = x - n ln2 (the first step exact) */
VM_INL vf VM(exp_parts)(vf x, vi *k)
{
  vf n = VM(rint_mul)(x, LOG2E, k);
  vf r = FMA(n, K(-LN2F), x);
  r = FMA(n, K(-LN2F_LO), r);
  return VM(exp_poly)(r);
}
/* e^x for x in [-87, 88] (normal results; NaN passes): no clamps, one scaling */
VM_INL vf VM(exp_mid)(vf x)
{
  vi k;
  vf p = VM(exp_parts)(x, &k);
  return p * VM(pow2i)(k);
}
/* e^x; x > 88.72 gives +inf, x < -103.97 gives 0 (subnormals between) */
VM_INL vf VM(exp)(vf x)
{
  vi k;
  vf p = VM(exp_parts)(VM(exp_clamp)(x), &k);
  return VM(scale2)(p, k);
}

/* 2^x, the same polynomial at r ln2 */
VM_INL vf VM(exp2)(vf x)
{
  x = VM(minc)(VM(maxc)(x, -152.0f), 129.0f);
  vi k;
  vf n = VM(rint_mul)(x, 1.0f, &k);
  vf r = x - n; /* exact */
  return VM(scale2)(VM(exp_poly)(r * LN2F), k);
}

/* e^x - 1: no reduction for |x| < ln2 (its own polynomial there, 0.025 x 2^-24), else
 * 2^n (expm1(r) + 1) - 1 with |r| <= ln2/2, where no term cancels another badly */
VM_INL vf VM(expm1)(vf x0)
{
  vf x = VM(minc)(VM(maxc)(x0, -30.0f), 89.0f);
  vi k;
  vf n = VM(rint_mul)(x, LOG2E, &k);
  vi small = vfabs(x) < 0x1.62e42ep-1f;
  n = sel(small, (vf){}, n);
  k = k & ~small;
  vf r = FMA(n, K(-LN2F), x);
  r = FMA(n, K(-LN2F_LO), r);
  vf p = K(0x1.a0d16cp-16f);
  p = FMA(p, r, K(0x1.a558b6p-13f));
  p = FMA(p, r, K(0x1.6c1c64p-10f));
  p = FMA(p, r, K(0x1.110b6cp-7f));
  p = FMA(p, r, K(0x1.55554ap-5f));
  p = FMA(p, r, K(0x1.55555cp-3f));
  p = FMA(p, r, K(0x1p-1f));
  vf q = FMA(r * r, p, r); /* expm1(r) */
  vi big = k > 127;        /* 2^128 (e^x near FLT_MAX): scale by 2^127, then by 2 */
  vf s = VM(pow2i)(VM(seli)(big, (vi){} + 127, k));
  vf res = FMA(q, s, s - 1.0f) * sel(big, K(2.0f), K(1.0f));
  return sel(vfabs(x0) < 0x1p-25f, x0, res); /* -0 and tiny x: x itself */
}

/* ---- log family ---- */
/* log(1 + f) for sqrt(1/2)-1 <= f <= sqrt(2)-1: f - f^2/2 + f^3 P(f) (0.098 x 2^-24) */
VM_INL vf VM(log1p_red)(vf f)
{
  vf p = K(-0x1.38dd5ep-4f);
  p = FMA(p, f, K(0x1.056c32p-3f));
  p = FMA(p, f, K(-0x1.0d852ap-3f));
  p = FMA(p, f, K(0x1.22d790p-3f));
  p = FMA(p, f, K(-0x1.54720ep-3f));
  p = FMA(p, f, K(0x1.99a028p-3f));
  p = FMA(p, f, K(-0x1.000228p-2f));
  p = FMA(p, f, K(0x1.555554p-2f));
  return FMA(f * f, FMA(f, p, K(-0.5f)), f);
}
/* u (> 0, normal, finite) as 2^e m with m in [sqrt(1/2), sqrt(2)) */
VM_INL vf VM(split)(vf u, vi *e)
{
  vu iu = (vu)u;
  *e = (vi)(iu - 0x3f3504f3u) >> 23;
  return (vf)(iu - ((vu)*e << 23));
}
/* log(2^e (1 + f)) = e ln2 + log(1 + f), one rounding for the sum */
VM_INL vf VM(log_join)(vi e, vf f)
{
  vf ef = __builtin_convertvector(e, vf);
  vf y = VM(log1p_red)(f);
  return FMA(ef, K(LN2F), FMA(ef, K(LN2F_LO), y));
}
/* the special values of log-like functions of x: x < 0 NaN, x == 0 -inf, +inf and NaN themselves */
VM_INL vf VM(log_special)(vf x, vf res)
{
  res = sel(x == __builtin_inff(), x, res);
  res = sel(x == 0.0f, K(-__builtin_inff()), res);
  res = sel(x < 0.0f, K(__builtin_nanf("")), res);
  return sel(x != x, x, res);
}
/* x normalised: subnormals scaled by 2^23, *eadj = -23 for them */
VM_INL vf VM(unsub)(vf x, vi *eadj)
{
  vi sub = x < 0x1p-126f;
  *eadj = sub & -23;
  return sel(sub, x * 0x1p23f, x);
}

VM_INL vf VM(log)(vf x)
{
  vi ea, e;
  vf m = VM(split)(VM(unsub)(x, &ea), &e);
  return VM(log_special)(x, VM(log_join)(e + ea, m - 1.0f));
}

#define LOG2E_LO 0x1.4ae0c0p-26f
VM_INL vf VM(log2)(vf x)
{
  vi ea, e;
  vf m = VM(split)(VM(unsub)(x, &ea), &e);
  vf l = VM(log1p_red)(m - 1.0f);
  vf ef = __builtin_convertvector(e + ea, vf);
  return VM(log_special)(x, FMA(l, K(LOG2E), FMA(l, K(LOG2E_LO), ef)));
}

VM_INL vf VM(log10)(vf x)
{
  vi ea, e;
  vf m = VM(split)(VM(unsub)(x, &ea), &e);
  vf l = VM(log1p_red)(m - 1.0f);
  vf ef = __builtin_convertvector(e + ea, vf);
  /* log10(2) = 0x1.344136p-2 - 0x1.ec10c0p-27, log10(e) = 0x1.bcb7b2p-2 - 0x1.5b235ep-27 */
  vf lo = FMA(ef, K(-0x1.ec10c0p-27f), l * -0x1.5b235ep-27f);
  return VM(log_special)(x, FMA(ef, K(0x1.344136p-2f), FMA(l, K(0x1.bcb7b2p-2f), lo)));
}

/* log(1 + x) for x > -1 (no special cases): u = 1 + x rounded, c its rounding error,
 * 1 + x = 2^e (m + c 2^-e) */
VM_INL vf VM(log1p_core)(vf x)
{
  vf u = 1.0f + x;
  vf c = x - (u - 1.0f);
  vi e;
  vf m = VM(split)(u, &e);
  vi far = e > 24; /* u - 1 may be rounded there; c does not matter */
  vf sc = VM(pow2i)(((vi){} + 0) - (e & ~far));
  vf f = (m - 1.0f) + (vf)((vi)(c * sc) & ~far);
  return VM(log_join)(e, f);
}
VM_INL vf VM(log1p)(vf x)
{
  vf res = VM(log1p_core)(x);
  res = sel(x == __builtin_inff(), x, res);
  res = sel(x == -1.0f, K(-__builtin_inff()), res);
  res = sel(x < -1.0f, K(__builtin_nanf("")), res);
  res = sel(vfabs(x) < 0x1p-25f, x, res);
  return sel(x != x, x, res);
}

/* ---- hyperbolic ---- */
VM_INL vf VM(tanh)(vf x)
{
  vf a = vfabs(x);
  /* |x| < 0.625: x + x^3 P(x^2) (0.076 x 2^-24) */
  vf z = a * a;
  vf p = K(-0x1.750ce2p-8f);
  p = FMA(p, z, K(0x1.51f8cep-6f));
  p = FMA(p, z, K(-0x1.b835a4p-5f));
  p = FMA(p, z, K(0x1.1106f6p-3f));
  p = FMA(p, z, K(-0x1.555532p-2f));
  vf small = FMA(a * z, p, a);
  /* else 1 - 2 / (e^2|x| + 1); 1 from |x| > 9.1 */
  vf e = VM(exp_mid)(VM(minc)(a + a, 19.0f));
  vf big = 1.0f - 2.0f / (e + 1.0f);
  vf res = sel(a < 0.625f, small, big);
  res = sel(a != a, a, res);
  return VM(orsign)(res, VM(signbit)(x));
}

VM_INL vf VM(sinh)(vf x)
{
  vf a = vfabs(x);
  vi big = a > 88.5f; /* e^|x| / 2 as (e^(|x|/2) / 2) e^(|x|/2) */
  vf em = VM(expm1)(sel(big, a * 0.5f, a));
  vf e1 = em + 1.0f;
  vf res = sel(big, (0.5f * e1) * e1, 0.5f * (em + em / e1));
  return VM(orsign)(res, VM(signbit)(x));
}

VM_INL vf VM(cosh)(vf x)
{
  vf a = vfabs(x);
  vi big = a > 88.5f;
  vf e = VM(exp)(sel(big, a * 0.5f, a));
  return sel(big, (0.5f * e) * e, 0.5f * e + 0.5f / e);
}

VM_INL vf VM(asinh)(vf x)
{
  vf a = vfabs(x);
  vi big = a > 4096.0f; /* log(2|x|): 1/(4x^2) is below half an ulp */
  vf z = a * a;
  vf arg = sel(big, a - 1.0f, a + z / (1.0f + VM_SQRT(1.0f + z)));
  vf res = VM(log1p_core)(arg) + sel(big, K(LN2F), (vf){});
  res = sel(a == __builtin_inff(), a, res);
  res = sel(a < 0x1p-25f, a, res);
  res = sel(a != a, a, res);
  return VM(orsign)(res, VM(signbit)(x));
}

VM_INL vf VM(acosh)(vf x)
{
  vi big = x > 4096.0f;
  vf t = x - 1.0f;
  vf arg = sel(big, t, t + VM_SQRT(FMA(t, t, t + t)));
  vf res = VM(log1p_core)(arg) + sel(big, K(LN2F), (vf){});
  res = sel(x == __builtin_inff(), x, res);
  res = sel(x == 1.0f, (vf){}, res);
  res = sel(x < 1.0f, K(__builtin_nanf("")), res);
  return sel(x != x, x, res);
}

VM_INL vf VM(atanh)(vf x)
{
  vf a = vfabs(x);
  vf d = (a + a) / (1.0f - a);
  vf arg = sel(a < 0.5f, FMA(a, d, a + a), d);
  vf res = 0.5f * VM(log1p_core)(arg);
  res = sel(a == 1.0f, K(__builtin_inff()), res);
  res = sel(a > 1.0f, K(__builtin_nanf("")), res);
  res = sel(a < 0x1p-25f, a, res);
  res = sel(a != a, a, res);
  return VM(orsign)(res, VM(signbit)(x));
}

/* ---- erf ---- */
/* expm1(q) for q in [-18, 0] (NaN passes): expm1's kernel without its range handling */
VM_INL vf VM(expm1_neg)(vf q)
{
  vi k;
  vf n = VM(rint_mul)(q, LOG2E, &k);
  vi small = q > -0x1.62e42ep-1f;
  n = sel(small, (vf){}, n);
  k = k & ~small;
  vf r = FMA(n, K(-LN2F), q);
  r = FMA(n, K(-LN2F_LO), r);
  vf p = K(0x1.a0d16cp-16f);
  p = FMA(p, r, K(0x1.a558b6p-13f));
  p = FMA(p, r, K(0x1.6c1c64p-10f));
  p = FMA(p, r, K(0x1.110b6cp-7f));
  p = FMA(p, r, K(0x1.55554ap-5f));
  p = FMA(p, r, K(0x1.55555cp-3f));
  p = FMA(p, r, K(0x1p-1f));
  vf s = VM(pow2i)(k);
  return FMA(FMA(r * r, p, r), s, s - 1.0f);
}
/* R(a) = log(erfc(a)) + a^2 = a (C0 + a P(a - 2)) for a in [0, 3.95] (fit error 0.57 x 2^-24
 * relative to erf and to erfc; C0 = -2/sqrt(pi) in two parts; P in a - 2 keeps Horner's terms
 * small); erf(a) = -expm1(R - a^2), 1 from 3.95 on */
VM_INL vf VM(erfcx_log)(vf a)
{
  vf t = a - 2.0f;
  vf p = K(0x1.8eb086p-24f);
  p = FMA(p, t, K(-0x1.7c5392p-21f));
  p = FMA(p, t, K(0x1.479966p-19f));
  p = FMA(p, t, K(-0x1.1e9086p-18f));
  p = FMA(p, t, K(-0x1.a99434p-17f));
  p = FMA(p, t, K(0x1.a6fd46p-13f));
  p = FMA(p, t, K(-0x1.867732p-10f));
  p = FMA(p, t, K(0x1.1dd882p-7f));
  p = FMA(p, t, K(-0x1.73ea18p-5f));
  p = FMA(p, t, K(0x1.c89c40p-3f));
  p = FMA(p, a, K(0x1.f7ac92p-25f));
  return FMA(a, K(-0x1.20dd76p+0f), a * p);
}
VM_INL vf VM(erf)(vf x)
{
  vf a = VM(minc)(vfabs(x), 3.95f);
  vf q = FMA(-a, a, VM(erfcx_log)(a));                   /* log(erfc(a)) */
  vf res = vfabs(VM(expm1_neg)(q));                     /* -expm1, +0 at 0 */
  return VM(orsign)(res, VM(signbit)(x));
}

/* ---- trigonometric ---- */
/* |x| = n pi/2 + r with |r| <= pi/4 (in double: exact enough for |x| < 1.5e6, where n
 * fits 21 bits and n * PIO2_1 (32 bits) is exact); *big marks the lanes beyond */
VM_INL vf VM(trig_reduce)(vf a, vi *n, vi *big)
{
  vd ad = __builtin_convertvector(a, vd);
  vd t = ad * 0x1.45f306dc9c883p-1 + 0x1.8p52;
  vd nd = t - 0x1.8p52;
  vd rd = (ad - nd * 0x1.921fb544p+0) - nd * 0x1.0b4611a626331p-34;
  *n = __builtin_convertvector((vl)t, vi);
  *big = a > 1.5e6f;
  return __builtin_convertvector(rd, vf);
}
/* sin r and cos r for |r| <= pi/4 */
VM_INL vf VM(sin_poly)(vf r)
{
  vf z = r * r;
  vf p = K(0x1.7c2c4ep-19f);
  p = FMA(p, z, K(-0x1.a05954p-13f));
  p = FMA(p, z, K(0x1.111174p-7f));
  p = FMA(p, z, K(-0x1.555556p-3f));
  return FMA(r * z, p, r);
}
VM_INL vf VM(cos_poly)(vf r)
{
  vf z = r * r;
  vf p = K(-0x1.361b34p-22f);
  p = FMA(p, z, K(0x1.a071c4p-16f));
  p = FMA(p, z, K(-0x1.6c175ep-10f));
  p = FMA(p, z, K(0x1.555556p-5f));
  return FMA(z, FMA(z, p, K(-0.5f)), K(1.0f));
}
/* lanes of res where big is set, recomputed by the scalar libm function f */
#define VM_LIBM_LANES(res, x, big, f)                                                 \
  do {                                                                               \
    if (VM_ANY(big))                                                                 \
      for (int k_ = 0; k_ < VM_W; k_++)                                              \
        if ((big)[k_]) (res)[k_] = f((x)[k_]);                                       \
  } while (0)

VM_INL vf VM(sin)(vf x)
{
  vf a = vfabs(x);
  vi n, big;
  vf r = VM(trig_reduce)(a, &n, &big);
  vf s = VM(sin_poly)(r), c = VM(cos_poly)(r);
  vf res = sel((n & 1) != 0, c, s);
  res = (vf)((vu)res ^ (((vu)n & 2u) << 30) ^ (vu)VM(signbit)(x));
  VM_LIBM_LANES(res, x, big, sinf);
  return res;
}

VM_INL vf VM(cos)(vf x)
{
  vf a = vfabs(x);
  vi n, big;
  vf r = VM(trig_reduce)(a, &n, &big);
  vf s = VM(sin_poly)(r), c = VM(cos_poly)(r);
  vf res = sel((n & 1) != 0, s, c);
  res = (vf)((vu)res ^ ((((vu)n + 1u) & 2u) << 30));
  VM_LIBM_LANES(res, x, big, cosf);
  return res;
}

VM_INL vf VM(tan)(vf x)
{
  vf a = vfabs(x);
  vi n, big;
  vf r = VM(trig_reduce)(a, &n, &big);
  vf s = VM(sin_poly)(r), c = VM(cos_poly)(r);
  vi odd = (n & 1) != 0;
  vf res = sel(odd, -c, s) / sel(odd, s, c);
  res = (vf)((vi)res ^ VM(signbit)(x));
  VM_LIBM_LANES(res, x, big, tanf);
  return res;
}

#define PIO2_HI 0x1.921fb6p+0f
#define PIO2_LO -0x1.777a5cp-25f
#define PIO4_HI 0x1.921fb6p-1f
#define PIO4_LO -0x1.777a5cp-26f

VM_INL vf VM(atan)(vf x)
{
  vf a = vfabs(x);
  vi big = a > 0x1.3504f4p+1f, mid = (a > 0x1.a827a0p-2f) & ~big; /* tan(3pi/8), tan(pi/8) */
  vf num = sel(big, K(-1.0f), sel(mid, a - 1.0f, a));
  vf den = sel(big, a, sel(mid, a + 1.0f, K(1.0f)));
  vf t = num / den;
  vf hi = sel(big, K(PIO2_HI), sel(mid, K(PIO4_HI), (vf){}));
  vf lo = sel(big, K(PIO2_LO), sel(mid, K(PIO4_LO), (vf){}));
  vf z = t * t;
  vf p = K(-0x1.f2e012p-5f);
  p = FMA(p, z, K(0x1.b2239ap-4f));
  p = FMA(p, z, K(-0x1.23b99cp-3f));
  p = FMA(p, z, K(0x1.9991e2p-3f));
  p = FMA(p, z, K(-0x1.55554ap-2f));
  vf res = hi + (t + FMA(t * z, p, lo));
  res = sel(a != a, a, res);
  return VM(orsign)(res, VM(signbit)(x));
}

/* asin(s) - s over s^3 for s <= 0.5, times s^3 */
VM_INL vf VM(asin_tail)(vf s, vf z)
{
  vf p = K(0x1.596d5cp-5f);
  p = FMA(p, z, K(0x1.8c2d86p-6f));
  p = FMA(p, z, K(0x1.747d06p-5f));
  p = FMA(p, z, K(0x1.3301fcp-4f));
  p = FMA(p, z, K(0x1.5555c8p-3f));
  return s * z * p;
}
/* asin(|x|) = |x| + tail for |x| <= 0.5; pi/2 - 2 asin(sqrt((1 - |x|)/2)) beyond */
VM_INL vf VM(asin)(vf x)
{
  vf a = vfabs(x);
  vi hi = a > 0.5f;
  vf z = sel(hi, (1.0f - a) * 0.5f, a * a);
  vf s = sel(hi, VM_SQRT(z), a);
  vf tl = VM(asin_tail)(s, z);
  vf res = sel(hi, PIO2_HI - ((s + s) + ((tl + tl) - PIO2_LO)), s + tl);
  res = sel(a > 1.0f, K(__builtin_nanf("")), res);
  res = sel(a != a, a, res);
  return VM(orsign)(res, VM(signbit)(x));
}
VM_INL vf VM(acos)(vf x)
{
  vf a = vfabs(x);
  vi hi = a > 0.5f, neg = x < 0.0f;
  vf z = sel(hi, (1.0f - a) * 0.5f, a * a);
  vf s = sel(hi, VM_SQRT(z), x);
  vf tl = VM(asin_tail)(s, z);
  /* x > 0.5: 2 asin(s); x < -0.5: pi - 2 asin(s); else pi/2 - asin(x) */
  vf two = (s + s) + (tl + tl);
  vf res = sel(hi, sel(neg, (2.0f * PIO2_HI) - (two - 2.0f * PIO2_LO), two), PIO2_HI - (s + (tl - PIO2_LO)));
  res = sel(a > 1.0f, K(__builtin_nanf("")), res);
  return sel(a != a, x, res);
}

/* ---- activations ---- */
/* sigmoid: 1 / (1 + e^-x), and e^x / (1 + e^x) for x < 0 (no overflow, subnormal results kept) */
VM_INL vf VM(sigmoid)(vf x)
{
  vf e = VM(exp)((vf)((vi)x | INT32_MIN)); /* e^-|x| */
  return sel(x < 0.0f, e, K(1.0f)) / (1.0f + e);
}
/* silu: x / (1 + e^-x); x e^x / (1 + e^x) for x < 0, with x e^x scaled once (subnormals) */
VM_INL vf VM(silu)(vf x)
{
  vi k;
  vf xn = VM(exp_clamp)((vf)((vi)x | INT32_MIN));
  vf p = VM(exp_parts)(xn, &k);
  vf e = VM(scale2)(p, k);
  vf res = sel(x < 0.0f, VM(scale2)(xn * p, k), x) / (1.0f + e);
  return sel(x == -__builtin_inff(), K(__builtin_nanf("")), res); /* -inf / inf, as x / (1 + e^-x) */
}
/* gelu's gradient (d_gelu below): Phi(x) = 1 - E/2 for x >= 0 and E/2 for x < 0, E =
 * erfc(|x|/sqrt(2)): no 1 + erf cancelling for x < 0 */
/* erfc(|x|/sqrt(2)) = exp(-x^2/2 + R(a)), a = |x|/sqrt(2) clamped to 3.95 (*a): x^2/2 = (h + l)/2
 * exactly, -h/2 kept apart from the small rest through exp's reduction, so that the result keeps
 * its relative accuracy down to 1e-7 (the rounding of a moves R by at most an ulp) */
VM_INL vf VM(gelu_erfc)(vf x, vf *a)
{
  *a = VM(minc)(vfabs(x) * 0x1.6a09e6p-1f, 3.95f);
  vf h = x * x, l = FMA(x, x, -h);
  vf yh = -0.5f * h, yl = FMA(l, K(-0.5f), VM(erfcx_log)(*a)); /* the exponent is yh + yl */
  vi k;
  vf n = VM(rint_mul)(yh + yl, LOG2E, &k);
  vf r = FMA(n, K(-LN2F), yh) + yl;
  r = FMA(n, K(-LN2F_LO), r);
  return VM(exp_poly)(r) * VM(pow2i)(k);
}
VM_INL vf VM(gelu_cdf)(vf x, vi *far)
{
  vf a;
  vf e = 0.5f * VM(gelu_erfc)(x, &a);
  *far = a == 3.95f;
  return sel(x <= 0.0f, e, 1.0f - e);
}
/* gelu(x) = x Phi(x) = x - v for x > 0 and v for x <= 0, v = x Phi(-|x|) = x e^(-x^2/2) H(|x|),
 * H(u) = erfcx(u/sqrt(2))/2 as P(u)/Q(u) (degree 4 each, fitted in u itself: no rounding of
 * u/sqrt(2) enters; scripts/vmath_coeffs.py). The two factors are independent, which keeps the
 * dependency chains short (the former e^(log erfc) form chained a polynomial into an exp: 2.5x
 * slower): e^(-x^2/2) = e^(-s/2) 2^-n, n = round(x^2 / (2 ln2)), s = x^2 - 2 n ln2 (x^2 - 2 n
 * ln2_hi rounded once by the FMA, ln2_hi short enough that 2 n ln2_hi is exact), e^(-s/2) by a
 * degree-6 polynomial, 2^-n subtracted from its exponent bits (the result is normal for |x| <
 * 5.6). Error: 5.43 ulps over every float32 (3.7 in [-1, 1], 0.5 from x = 2.5 on). From |x| >=
 * GELU_FAR on (|x|/sqrt(2) >= 3.95 in float, as before; |x Phi(-|x|)| < 1.1e-7) Phi(-|x|) is
 * masked to +0: the result is x for x > 0 (x clamped to GELU_FAR in v keeps +inf), x * 0 for x
 * < 0 (-0, and NaN at -inf as x Phi(x) gives); NaN passes through */
#define GELU_FAR 0x1.658362p+2f
VM_INL vf VM(gelu)(vf x)
{
  vf u = vfabs(x), u2 = u * u;
  vf t = FMA(u2, K(0.5f * LOG2E), K(0x1.8p23f)), n = t - 0x1.8p23f; /* n = round(x^2 / (2 ln2)) */
  vf sh = FMA(x, x, n * -0x1.62e440p+0f);                            /* x^2 - 2 n ln2_hi */
  vf s = FMA(n, K(0x1.0105c6p-20f), sh);                             /* s = x^2 - 2 n ln2 */
  vf e = FMA(s, K(0x1.6a4004p-16f), K(-0x1.1239ecp-12f));            /* e^(-s/2) = 1 + s E(s) */
  e = FMA(e, s, K(0x1.5558bep-9f));
  e = FMA(e, s, K(-0x1.555492p-6f));
  e = FMA(e, s, K(0x1.fffffcp-4f));
  e = FMA(e, s, K(-0.5f));
  e = FMA(e, s, K(1.0f));
  e = (vf)((vu)e - ((vu)t << 23)); /* e^(-x^2/2) = e^(-s/2) 2^-n (unsigned: far lanes wrap, masked below) */
  vf p = FMA(u, FMA(u2, FMA(u, K(0x1.999c0cp-20f), K(0x1.60f550p-7f)), FMA(u, K(0x1.72bc18p-4f), K(0x1.386de6p-2f))), K(0.5f));
  vf q = FMA(u, FMA(u2, FMA(u, K(0x1.bc391ep-6f), K(0x1.cd822cp-3f)), FMA(u, K(0x1.9beb2ep-1f), K(0x1.687914p+0f))), K(1.0f));
  vf g = (vf)((vi)(e * (p / q)) & (u < GELU_FAR)); /* Phi(-|x|), +0 from GELU_FAR on (NaN: +0) */
  vf v = VM(minc)(x, GELU_FAR) * g;
  return sel(x <= 0.0f, v, x - v); /* (-0 stays -0) */
}
VM_INL vf VM(softplus)(vf x, float beta, float thr)
{
  vf z = x * beta;
  vf res = VM(log1p)(VM(exp)(z)) / beta;
  return sel(z > thr, x, res);
}
VM_INL vf VM(elu)(vf x, float alpha) { return sel(x <= 0.0f, VM(expm1)(x) * alpha, x); }
/* tanh(log1p(e^x)) = n / (n + 2) with n = e^x (e^x + 2); mish(x) = x e^x (e^x + 2) / (n + 2),
 * x e^x scaled once; x itself from x > 20 */
VM_INL vf VM(mish)(vf x)
{
  vf xc = VM(exp_clamp)(VM(minc)(x, 20.0f));
  vi k;
  vf p = VM(exp_parts)(xc, &k);
  vf e = VM(scale2)(p, k), e2 = e + 2.0f;
  vf res = VM(scale2)(xc * p, k) * e2 / FMA(e, e2, K(2.0f));
  res = sel(x > 20.0f, x, res);
  return sel(x == -__builtin_inff(), K(__builtin_nanf("")), res); /* -inf * tanh(0), as PyTorch */
}

/* gradients: g f'(x), the formulas of dpl_tensor_elementwise.c / dpl_tensor_math.c */
VM_INL vf VM(d_gelu)(vf g, vf x)
{
  vi far;
  vf cdf = VM(gelu_cdf)(x, &far);
  cdf = sel(far, sel(x < 0.0f, (vf){}, K(1.0f)), cdf);
  vf pdf = VM(exp)(-0.5f * x * x) * 0x1.988454p-2f;
  return g * FMA(x, pdf, cdf);
}
/* s = sigmoid(x) and 1 - s, both from e^-|x| without cancellation */
VM_INL vf VM(d_silu)(vf g, vf x)
{
  vf e = VM(exp)((vf)((vi)x | INT32_MIN));
  vf d = 1.0f / (1.0f + e), ed = e * d;
  vi neg = x < 0.0f;
  vf s = sel(neg, ed, d), oms = sel(neg, d, ed);
  return g * s * FMA(x, oms, K(1.0f));
}
VM_INL vf VM(d_softplus)(vf g, vf x, float beta, float thr)
{
  vf z = VM(exp)(x * beta);
  return sel(x * beta > thr, g, g * z / (z + 1.0f));
}
VM_INL vf VM(d_elu)(vf g, vf x, float alpha) { return sel(x <= 0.0f, g * alpha * VM(exp)(x), g); }
VM_INL vf VM(d_mish)(vf g, vf x)
{
  vf e = VM(exp)(VM(minc)(x, 20.0f));
  vf n = e * (e + 2.0f);
  vf q = 1.0f / (n + 2.0f);
  vf ts = n * q;
  vf sg = e / (e + 1.0f);
  vf res = g * FMA(x * sg, (q + q) * (1.0f + ts), ts); /* 1 - ts^2 = (1 - ts)(1 + ts), 1 - ts = 2 q */
  res = sel(x > 20.0f, g, res);                          /* tanh(softplus(x)) is 1 there */
  return sel(x == __builtin_inff(), K(__builtin_nanf("")), res); /* inf * 0, as the formula gives */
}

/* ---- special functions, in double lanes ---- */
#include "dpl_tensor_vmath_sp.h"

/* ---- loops over arrays ---- */
/* two vectors an iteration: two independent dependency chains for the out-of-order core */
#define VM_LOOP1(EXPR)                                                                        \
  do {                                                                                        \
    int64_t i = 0;                                                                            \
    for (; i + 2 * VM_W <= n; i += 2 * VM_W) {                                                \
      vf r0, r1;                                                                              \
      { vf v = VM(load)(x + i); r0 = (EXPR); }                                                \
      { vf v = VM(load)(x + i + VM_W); r1 = (EXPR); }                                         \
      VM(store)(y + i, r0);                                                                   \
      VM(store)(y + i + VM_W, r1);                                                            \
    }                                                                                         \
    for (; i + VM_W <= n; i += VM_W) {                                                        \
      vf v = VM(load)(x + i);                                                                 \
      VM(store)(y + i, (EXPR));                                                               \
    }                                                                                         \
    if (i < n) { /* the tail through a padded vector: the same bits as in the body */        \
      float buf[VM_W] = {0};                                                                  \
      memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));                                    \
      vf v = VM(load)(buf);                                                                   \
      VM(store)(buf, (EXPR));                                                                 \
      memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));                                    \
    }                                                                                         \
  } while (0)
#define VM_LOOP2(EXPR)                                                                        \
  do {                                                                                        \
    int64_t i = 0;                                                                            \
    for (; i + 2 * VM_W <= n; i += 2 * VM_W) {                                                \
      vf r0, r1;                                                                              \
      { vf gv = VM(load)(g + i), v = VM(load)(x + i); r0 = (EXPR); }                          \
      { vf gv = VM(load)(g + i + VM_W), v = VM(load)(x + i + VM_W); r1 = (EXPR); }             \
      VM(store)(y + i, r0);                                                                   \
      VM(store)(y + i + VM_W, r1);                                                            \
    }                                                                                         \
    for (; i + VM_W <= n; i += VM_W) {                                                        \
      vf gv = VM(load)(g + i), v = VM(load)(x + i);                                           \
      VM(store)(y + i, (EXPR));                                                               \
    }                                                                                         \
    if (i < n) {                                                                              \
      float bg[VM_W] = {0}, bx[VM_W] = {0};                                                   \
      memcpy(bg, g + i, (size_t)(n - i) * sizeof(float));                                     \
      memcpy(bx, x + i, (size_t)(n - i) * sizeof(float));                                     \
      vf gv = VM(load)(bg), v = VM(load)(bx);                                                 \
      VM(store)(bx, (EXPR));                                                                  \
      memcpy(y + i, bx, (size_t)(n - i) * sizeof(float));                                    \
    }                                                                                         \
  } while (0)

/* y[i] = f(x[i]), contiguous (y == x allowed) */
VM_TARGET static void VM(map)(int fn, float *y, const float *x, int64_t n, float p0, float p1)
{
  switch (fn) {
  case DPL_VM_EXP: VM_LOOP1(VM(exp)(v)); break;
  case DPL_VM_EXPM1: VM_LOOP1(VM(expm1)(v)); break;
  case DPL_VM_EXP2: VM_LOOP1(VM(exp2)(v)); break;
  case DPL_VM_LOG: VM_LOOP1(VM(log)(v)); break;
  case DPL_VM_LOG1P: VM_LOOP1(VM(log1p)(v)); break;
  case DPL_VM_LOG2: VM_LOOP1(VM(log2)(v)); break;
  case DPL_VM_LOG10: VM_LOOP1(VM(log10)(v)); break;
  case DPL_VM_SIN: VM_LOOP1(VM(sin)(v)); break;
  case DPL_VM_COS: VM_LOOP1(VM(cos)(v)); break;
  case DPL_VM_TAN: VM_LOOP1(VM(tan)(v)); break;
  case DPL_VM_ASIN: VM_LOOP1(VM(asin)(v)); break;
  case DPL_VM_ACOS: VM_LOOP1(VM(acos)(v)); break;
  case DPL_VM_ATAN: VM_LOOP1(VM(atan)(v)); break;
  case DPL_VM_SINH: VM_LOOP1(VM(sinh)(v)); break;
  case DPL_VM_COSH: VM_LOOP1(VM(cosh)(v)); break;
  case DPL_VM_TANH: VM_LOOP1(VM(tanh)(v)); break;
  case DPL_VM_ASINH: VM_LOOP1(VM(asinh)(v)); break;
  case DPL_VM_ACOSH: VM_LOOP1(VM(acosh)(v)); break;
  case DPL_VM_ATANH: VM_LOOP1(VM(atanh)(v)); break;
  case DPL_VM_ERF: VM_LOOP1(VM(erf)(v)); break;
  case DPL_VM_SIGMOID: VM_LOOP1(VM(sigmoid)(v)); break;
  case DPL_VM_SILU: VM_LOOP1(VM(silu)(v)); break;
  case DPL_VM_GELU: VM_LOOP1(VM(gelu)(v)); break;
  case DPL_VM_SOFTPLUS: VM_LOOP1(VM(softplus)(v, p0, p1)); break;
  case DPL_VM_ELU: VM_LOOP1(VM(elu)(v, p0)); break;
  case DPL_VM_MISH: VM_LOOP1(VM(mish)(v)); break;
  case DPL_VM_LGAMMA: VM_LOOP1(VM(lgamma)(v)); break;
  case DPL_VM_DIGAMMA: VM_LOOP1(VM(digamma)(v)); break;
  case DPL_VM_ERFC: VM_LOOP1(VM(erfc)(v)); break;
  case DPL_VM_I0: VM_LOOP1(VM(i0)(v)); break;
  default: break;
  }
}

/* y[i] = g[i] f'(x[i]), contiguous */
VM_TARGET static void VM(grad)(int fn, float *y, const float *g, const float *x, int64_t n, float p0, float p1)
{
  switch (fn) {
  case DPL_VM_D_GELU: VM_LOOP2(VM(d_gelu)(gv, v)); break;
  case DPL_VM_D_SILU: VM_LOOP2(VM(d_silu)(gv, v)); break;
  case DPL_VM_D_SOFTPLUS: VM_LOOP2(VM(d_softplus)(gv, v, p0, p1)); break;
  case DPL_VM_D_ELU: VM_LOOP2(VM(d_elu)(gv, v, p0)); break;
  case DPL_VM_D_MISH: VM_LOOP2(VM(d_mish)(gv, v)); break;
  default: break;
  }
}

#undef vf
#undef vi
#undef vu
#undef vd
#undef vl
#undef sel
#undef FMA
#undef K
#undef LN2F
#undef LN2F_LO
#undef LOG2E_LO
#undef vfabs
#undef VM_INL
#undef VM_LOOP1
#undef VM_LOOP2
#undef VM_LIBM_LANES
#undef LOG2E
#undef PIO2_HI
#undef PIO2_LO
#undef PIO4_HI
#undef PIO4_LO
