#!/usr/bin/env python3
"""vmath_coeffs.py: fits the polynomial coefficients of src/tensor/dpl_tensor_vmath_body.h.

Each approximation is a polynomial sum c_k v(t)^k fitted to a target T(t) on an
interval, minimising the weighted maximum error max W(t) |p(v(t)) - T(t)| (the
weight turns it into the relative error of the function the kernel returns).
The fit is Lawson's iteratively reweighted least squares on Chebyshev-spaced
points (targets from mpmath at 40 digits); the coefficients are then rounded to
float32 one at a time, lowest order first, the remaining ones refitted after each
rounding. Needs numpy and mpmath (Debian: python3-numpy, python3-mpmath).
Prints C initialisers and the fitted weighted error of each polynomial; the
kernels' real accuracy (float32 arithmetic included) is what
spec/tensor_vmath_spec.lua measures.
"""
import numpy as np
import mpmath as mp

mp.mp.dps = 40


def cheb_points(a, b, n):
    k = np.arange(n)
    return 0.5 * (a + b) + 0.5 * (b - a) * np.cos(np.pi * (k + 0.5) / n)[::-1]


def lawson(V, T, W, iters=400):
    """coefficients c minimising max |W (V c - T)| (V: the basis columns)"""
    u = np.ones(len(T)) / len(T)
    c = None
    for _ in range(iters):
        s = np.sqrt(u) * W
        c, *_ = np.linalg.lstsq(V * s[:, None], T * s, rcond=None)
        e = np.abs(W * (V @ c - T))
        u = u * e
        u /= u.sum()
    return c, np.max(np.abs(W * (V @ c - T)))


def fit(name, ts, v, T, W, deg, lo=0, fixed=None):
    """fit sum_{k=lo}^{deg} c_k v^k to T; coefficients in `fixed` ({k: value}) are kept"""
    ts = np.asarray(ts, dtype=float)
    vs = np.array([float(v(t)) for t in ts])
    Tm = np.array([float(T(t)) for t in ts])
    Wm = np.array([float(W(t)) for t in ts])
    fixed = dict(fixed or {})
    coefs = {}
    for k in range(lo, deg + 1):
        free = [j for j in range(lo, deg + 1) if j not in fixed]
        rest = Tm - sum(fixed[j] * vs ** j for j in fixed)
        V = np.stack([vs ** j for j in free], axis=1)
        c, err = lawson(V, rest, Wm)
        if k in fixed:
            continue
        fixed[k] = float(np.float32(c[free.index(k)]))
    V = np.stack([vs ** j for j in range(lo, deg + 1)], axis=1)
    cs = np.array([fixed[j] for j in range(lo, deg + 1)])
    err = np.max(np.abs(Wm * (V @ cs - Tm)))
    print(f"/* {name}: degree {lo}..{deg}, weighted max error {err:.3g} ({err / 2.0 ** -24:.3f} x 2^-24) */")
    for j in range(lo, deg + 1):
        print(f"  {np.float32(fixed[j]).item()!r:>26}f, /* c{j} = {float.hex(float(np.float32(fixed[j])))} */")
    return cs


def m(x):
    return mp.mpf(float(x))


N = 3000
LN2 = float(mp.log(2))

# exp / expm1 / exp2: e^r = 1 + r + r^2 P(r), |r| <= ln2/2 (+ a little: n is rounded from x*log2e)
R = 0.3466 + 1e-3
ts = cheb_points(-R, R, N)
fit("exp: P(r) = (e^r - 1 - r) / r^2", ts, lambda t: t,
    lambda t: (mp.exp(m(t)) - 1 - m(t)) / m(t) ** 2,
    lambda t: m(t) ** 2 / min(mp.exp(m(t)), abs(mp.expm1(m(t)))), 5, lo=0)

# expm1 for |x| < ln2 (no reduction there): expm1(r) = r + r^2 P(r)
ts = cheb_points(-LN2 - 1e-4, LN2 + 1e-4, N)
fit("expm1: P(r) = (e^r - 1 - r) / r^2", ts, lambda t: t,
    lambda t: (mp.exp(m(t)) - 1 - m(t)) / m(t) ** 2, lambda t: m(t) ** 2 / abs(mp.expm1(m(t))), 6, lo=0)

# log / log1p: log(1+f) = f - f^2/2 + f^3 P(f), sqrt(1/2)-1 <= f <= sqrt(2)-1
a, b = float(mp.sqrt(0.5) - 1) - 1e-4, float(mp.sqrt(2) - 1) + 1e-4
ts = cheb_points(a, b, N)
fit("log: P(f) = (log1p(f) - f + f^2/2) / f^3", ts, lambda t: t,
    lambda t: (mp.log1p(m(t)) - m(t) + m(t) ** 2 / 2) / m(t) ** 3,
    lambda t: abs(m(t) ** 3 / mp.log1p(m(t))), 7, lo=0)

# tanh for |x| < 0.625: tanh(x) = x + x^3 P(x^2)
ts = cheb_points(1e-4, 0.625, N)
fit("tanh: P(x^2) = (tanh x - x) / x^3", ts, lambda t: t * t,
    lambda t: (mp.tanh(m(t)) - m(t)) / m(t) ** 3, lambda t: m(t) ** 3 / mp.tanh(m(t)), 4, lo=0)

# erf and gelu's erfc: R(a) = log(erfc(a)) + a^2 = log(erfcx(a)) = a (c0 + a P(a - 2)) on [0, 3.95],
# c0 = -2/sqrt(pi) exact (split in two floats by the kernel; P in a - 2 keeps Horner's sums small);
# erf(a) = -expm1(R - a^2), erfc(a) = exp(R - a^2) with a^2 carried exactly. The relative error of
# erf is erfc/erf * |dR|, that of erfc |dR|
C0 = -2 / mp.sqrt(mp.pi)
ts = cheb_points(1e-3, 3.95, N)
fit("erf/erfc: P(a - 2) = ((log(erfc(a)) + a^2)/a - c0)/a", ts, lambda t: t - 2,
    lambda t: ((mp.log(mp.erfc(m(t))) + m(t) ** 2) / m(t) - C0) / m(t),
    lambda t: m(t) ** 2 * max(1, mp.erfc(m(t)) / mp.erf(m(t))), 9, lo=0)
print(f"/* c0 = -2/sqrt(pi) = {float.hex(float(np.float32(float(C0))))} + "
      f"{float.hex(float(np.float32(float(C0 - mp.mpf(float(np.float32(float(C0))))))))} */")

# sin / cos on |r| <= pi/4
PI4 = float(mp.pi / 4) + 1e-4
ts = cheb_points(1e-4, PI4, N)
fit("sin: P(r^2) = (sin r - r) / r^3", ts, lambda t: t * t,
    lambda t: (mp.sin(m(t)) - m(t)) / m(t) ** 3, lambda t: m(t) ** 3 / mp.sin(m(t)), 3, lo=0)
fit("cos: P(r^2) = (cos r - 1 + r^2/2) / r^4", ts, lambda t: t * t,
    lambda t: (mp.cos(m(t)) - 1 + m(t) ** 2 / 2) / m(t) ** 4, lambda t: m(t) ** 4 / mp.cos(m(t)), 3, lo=0)

# atan on |t| <= tan(pi/8): atan(t) = t + t^3 P(t^2)
ts = cheb_points(1e-4, float(mp.tan(mp.pi / 8)) + 1e-4, N)
fit("atan: P(t^2) = (atan t - t) / t^3", ts, lambda t: t * t,
    lambda t: (mp.atan(m(t)) - m(t)) / m(t) ** 3, lambda t: m(t) ** 3 / mp.atan(m(t)), 4, lo=0)

# asin on |z| <= 0.5: asin(z) = z + z^3 P(z^2)
ts = cheb_points(1e-4, 0.5 + 1e-4, N)
fit("asin: P(z^2) = (asin z - z) / z^3", ts, lambda t: t * t,
    lambda t: (mp.asin(m(t)) - m(t)) / m(t) ** 3, lambda t: m(t) ** 3 / mp.asin(m(t)), 4, lo=0)

# gelu: e^(-x^2/2) = e^(-s/2) 2^-n with s = x^2 - 2 n ln2 in [-ln2, ln2]: e^(-s/2) = 1 + s Q(s), Q(0) = -1/2
S = 0.6932 + 2e-3
ts = cheb_points(-S, S, N)
fit("gelu: Q(s) = (e^(-s/2) - 1) / s", ts, lambda t: t,
    lambda t: mp.expm1(-m(t) / 2) / m(t), lambda t: abs(m(t)) / mp.exp(-m(t) / 2), 5, lo=0, fixed={0: -0.5})


def fit_rational(name, us, f, p, q, p0, iters=40):
    """P(u)/Q(u) (degrees p, q; Q(0) = 1, P(0) = p0) minimising the relative error to f on the
    points us: Loeb's linearised iteration (|P - f Q| / (f Q_prev)) with Lawson's reweighting; the
    coefficients rounded to float32 one at a time (P's, then Q's, lowest first), the rest refitted"""
    us = np.asarray(us, dtype=float)
    fm = np.array([float(f(u)) for u in us])
    names = [('p', j) for j in range(p + 1)] + [('q', j) for j in range(1, q + 1)]

    def col(n):
        return us ** n[1] if n[0] == 'p' else -fm * us ** n[1]

    def value(vals):
        P = sum(vals[('p', j)] * us ** j for j in range(p + 1))
        Q = 1 + sum(vals[('q', j)] * us ** j for j in range(1, q + 1))
        return np.max(np.abs(P / Q - fm) / fm)

    def solve(fixed):
        free = [n for n in names if n not in fixed]
        rhs = fm - sum(fixed[n] * col(n) for n in fixed)
        Qprev, w, best = np.ones(len(us)), np.ones(len(us)) / len(us), None
        for _ in range(iters):
            A = np.stack([col(n) for n in free], 1) / (fm * Qprev)[:, None]
            b = rhs / (fm * Qprev)
            for _ in range(40):
                sw = np.sqrt(w)
                c, *_ = np.linalg.lstsq(A * sw[:, None], b * sw, rcond=None)
                w = w * np.abs(A @ c - b) + 1e-300
                w /= w.sum()
            vals = dict(fixed)
            vals.update(zip(free, c))
            err = value(vals)
            if best is None or err < best[0]:
                best = (err, vals)
            Qprev = 1 + sum(vals[('q', j)] * us ** j for j in range(1, q + 1))
        return best[1]

    fixed = {('p', 0): p0}
    for n in names[1:]:
        fixed[n] = float(np.float32(solve(fixed)[n]))
    err = value(fixed)
    print(f"/* {name}: P/Q of degrees {p}/{q}, relative max error {err:.3g} ({err / 2.0 ** -24:.3f} x 2^-24) */")
    for n in names:
        print(f"  {n[0].upper()}{n[1]} = {float.hex(fixed[n])}")


# gelu: H(u) = erfcx(u/sqrt(2))/2 = e^(u^2/2) Phi(-u) on [0, 5.59] (u = |x|; GELU_FAR = 5.586), a
# rational function in u itself
ts = cheb_points(0, 5.59, N)
fit_rational("gelu: H(u) = erfcx(u/sqrt(2))/2", ts,
             lambda u: mp.erfc(m(u) / mp.sqrt(2)) * mp.exp(m(u) ** 2 / 2) / 2, 4, 4, 0.5)
