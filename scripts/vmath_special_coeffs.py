#!/usr/bin/env python3
"""vmath_special_coeffs.py: the double-precision coefficients of the float32 special-function
kernels (src/tensor/dpl_tensor_vmath_sp.h): lgamma, digamma, erfc, i0.

- lgamma(2 + t) = (1 - gamma) t + sum_k>=2 (-1)^k (zeta(k) - 1) / k t^k, |t| <= 1/2: the Taylor
  coefficients themselves (exact values from mpmath, rounded to double).
- erfc(x) = exp(-x^2) F(u) / (1 + 2x), x in [0, 10.1], F = (1 + 2x) erfcx(x) as a Chebyshev series
  in u, an affine map of t = (x - K) / (x + K), K = 3.75 (Shepherd and Laframboise's variable):
  coefficients of the interpolant at Chebyshev points, values from mpmath at 40 digits.
- i0(x) for x in [0, 8]: sum_k (x^2/4)^k / (k!)^2 (exact coefficients); for x in [8, 100]:
  exp(x) G(u) / sqrt(x), G = sqrt(x) e^-x i0(x) as a Chebyshev series in u, an affine map of 8/x.
Prints C initialisers (hex doubles) and the truncation error of each series (relative, at 2000
points) so that the degree can be checked. Needs mpmath.
"""
import mpmath as mp

mp.mp.dps = 40


def cheb_coeffs(f, n):
    """the degree n-1 interpolant of f on [-1, 1] at the n Chebyshev points, as sum c_j T_j(u)"""
    nodes = [mp.cos(mp.pi * (k + mp.mpf(1) / 2) / n) for k in range(n)]
    vals = [f(u) for u in nodes]
    c = []
    for j in range(n):
        s = mp.fsum(vals[k] * mp.cos(mp.pi * j * (k + mp.mpf(1) / 2) / n) for k in range(n))
        c.append(2 * s / n)
    c[0] /= 2
    return c


def clenshaw(c, u):
    b1 = b2 = mp.mpf(0)
    for cj in reversed(c[1:]):
        b1, b2 = 2 * u * b1 - b2 + cj, b1
    return u * b1 - b2 + c[0]


def trunc_err(f, c, m, lo=-1, hi=1):
    worst = 0
    for i in range(2001):
        u = lo + (hi - lo) * mp.mpf(i) / 2000
        worst = max(worst, abs(clenshaw([mp.mpf(float(x)) for x in c[:m]], u) / f(u) - 1))
    return worst


def emit(name, c):
    print('static const double %s[%d] = {' % (name, len(c)))
    print('  ' + ', '.join(float(x).hex() for x in c) + '};')


# lgamma around 2
K_LG = 25
lg = [1 - mp.euler] + [(-1) ** k * (mp.zeta(k) - 1) / k for k in range(2, K_LG + 1)]
emit('SP_LGAMMA2', lg)

# erfc: x = K (1 + t) / (1 - t); t in [-1, T1], u = (2 t - (T1 - 1)) / (T1 + 1)
K = mp.mpf('3.75')
XMAX = mp.mpf('10.1')
T1 = (XMAX - K) / (XMAX + K)
def erfc_F(u):
    t = ((T1 + 1) * u + (T1 - 1)) / 2
    x = K * (1 + t) / (1 - t)
    return (1 + 2 * x) * mp.erfc(x) * mp.exp(x * x)
for n in (16, 18, 20):
    c = cheb_coeffs(erfc_F, 40)
    print('/* erfc: %d terms, truncation error %s */' % (n, mp.nstr(trunc_err(erfc_F, c, n), 3)))
c = cheb_coeffs(erfc_F, 40)
print('/* T1 = %s */' % float(T1).hex())
emit('SP_ERFC', c[:20])

# i0 large: w = 8 / x in [W0, 1], u = (2 w - (1 + W0)) / (1 - W0)
W0 = mp.mpf(8) / 100
def i0_G(u):
    w = ((1 - W0) * u + (1 + W0)) / 2
    x = 8 / w
    return mp.sqrt(x) * mp.exp(-x) * mp.besseli(0, x)
for n in (16, 18, 20):
    c = cheb_coeffs(i0_G, 40)
    print('/* i0: %d terms, truncation error %s */' % (n, mp.nstr(trunc_err(i0_G, c, n), 3)))
c = cheb_coeffs(i0_G, 40)
emit('SP_I0_BIG', c[:20])
emit('SP_I0_SMALL', [1 / mp.factorial(k) ** 2 for k in range(23)])
