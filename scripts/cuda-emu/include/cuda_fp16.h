/* cuda_fp16.h (dplhost CUDA emulator): __half and __half_raw with the
 * conversions src/cuda uses (__half2float, __float2half_rn: IEEE binary16,
 * round to nearest even, subnormals, overflow to infinity), for C++. */
#ifndef DPL_EMU_CUDA_FP16_H
#define DPL_EMU_CUDA_FP16_H
#ifdef __cplusplus
#include <stdint.h>
#include <string.h>

struct __half_raw {
  unsigned short x;
};
struct __half {
  unsigned short __x;
  __half() = default;
  constexpr __half(const __half_raw &r) : __x(r.x) {}
  operator __half_raw() const { __half_raw r; r.x = __x; return r; }
};

static inline float __half2float(__half h)
{
  const uint32_t v = h.__x, sign = (v & 0x8000u) << 16, e = (v >> 10) & 0x1fu, m = v & 0x3ffu;
  uint32_t f;
  if (e == 0) {
    float r = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
    return sign ? -r : r;
  }
  if (e == 31) f = sign | 0x7f800000u | (m << 13);
  else f = sign | ((e + 112) << 23) | (m << 13);
  float r;
  memcpy(&r, &f, 4);
  return r;
}

static inline __half __float2half_rn(float x)
{
  uint32_t f;
  memcpy(&f, &x, 4);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  __half_raw r;
  if (f > 0x7f800000u) r.x = (unsigned short)(sign | 0x7e00u | ((f >> 13) & 0x3ffu)); /* NaN stays NaN */
  else if (f >= 0x477ff000u) r.x = (unsigned short)(sign | 0x7c00u);                  /* >= 65520: infinity */
  else if (f < 0x38800000u) {                                                          /* below 2^-14: subnormal */
    const uint32_t e = f >> 23;
    if (e < 102) r.x = (unsigned short)sign;
    else {
      const uint32_t m = (f & 0x7fffffu) | 0x800000u, sh = 126 - e, half = 1u << (sh - 1), rem = m & ((1u << sh) - 1);
      uint32_t q = m >> sh;
      if (rem > half || (rem == half && (q & 1))) q++;
      r.x = (unsigned short)(sign | q);
    }
  } else {
    uint32_t h = (((f >> 23) - 112) << 10) | ((f >> 13) & 0x3ffu);
    const uint32_t rem = f & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    r.x = (unsigned short)(sign | h);
  }
  return __half(r);
}
#endif
#endif
