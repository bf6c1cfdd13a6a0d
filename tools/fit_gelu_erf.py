#!/usr/bin/env python3
"""The polynomial behind kernels/gelu.h's erf GELU: fit, print, or check against the header.

The kernels evaluate the normal tail h(z) = Phi(-|z|) = erfc(|z|/sqrt 2) / 2 as

    h = tau * 2^(P(tau) - s^2),   t = |z| / sqrt 2,   s^2 = t^2 log2(e),   tau = 1 / (1 + kappa t)

(the classic erfc form: tau carries the 1/t decay of erfc(t) e^(t^2), so the rest is smooth on
tau in (0, 1]). P is a polynomial in tau, fitted here to

    P(tau) = log2(h / tau) + s^2

with uniform (minimax) absolute error in log2 units, which is a uniform relative error of h, over
t in [0, t_max]. t_max = 9.3 (|z| <= 13.2) runs a little past the last z whose h is a normal float
(t = 9.157, z = -12.95; the kernels' exp2 flushes what is below 2^-126), so the relative accuracy
holds wherever h is not flushed.

Two figures are printed: the fit's error in exact arithmetic, and the error of what the kernels
evaluate, the float coefficients by float Horner steps (each step's a*b + c rounded once to float;
emulated as a double product, exact, plus c in double, then rounded to float), on 20000 points of
the range. The second is the larger (the monomial coefficients alternate in sign and sum to about
15 in magnitude against |P| <= 3.3, so the steps' roundings add up); the kernels' h carries it
plus the rcp and ex2 errors, which tests/kernels/gelu_test.cpp measures. The fit is Lawson's iteratively reweighted least squares over Chebyshev
nodes in tau, in the Chebyshev basis (well conditioned), converted to monomials for Horner's rule.
Standard library only: math.erfc (double) is ~1e-16 relative, far below the float target.

    tools/fit_gelu_erf.py                        print the fit and the C++ constants
    tools/fit_gelu_erf.py --check kernels/gelu.h the header's kappa and coefficients are this fit's,
                                                 each within 2 float ulps (exit 1 otherwise)
"""
import argparse
import math
import re
import struct
import sys

KAPPA = 0.38
DEGREE = 8
T_MAX = 9.3
NODES = 600
ITERATIONS = 200


def as_float(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def float_ulps(a, b):
    """Distance between two floats in units in the last place (same sign assumed)."""
    ia = struct.unpack("i", struct.pack("f", a))[0]
    ib = struct.unpack("i", struct.pack("f", b))[0]
    return abs(ia - ib)


def target(tau, kappa):
    t = (1.0 / tau - 1.0) / kappa
    h = 0.5 * math.erfc(t)
    return math.log2(h / tau) + t * t / math.log(2.0)


def chebyshev(x, n):
    values = [1.0, x]
    for _ in range(2, n + 1):
        values.append(2.0 * x * values[-1] - values[-2])
    return values[: n + 1]


def solve(matrix, rhs):
    """Gaussian elimination with partial pivoting (the systems are (degree+1)^2, well conditioned)."""
    n = len(rhs)
    m = [row[:] + [rhs[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(n):
            if r != col:
                f = m[r][col] / m[col][col]
                for k in range(col, n + 1):
                    m[r][k] -= f * m[col][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(kappa, degree, t_max):
    """Chebyshev coefficients on [tau_min, 1] and the max abs error (log2 units) on the nodes."""
    lo, hi = 1.0 / (1.0 + kappa * t_max), 1.0
    xs = [math.cos(math.pi * (i + 0.5) / NODES) for i in range(NODES)]
    taus = [lo + (hi - lo) * (x + 1.0) / 2.0 for x in xs]
    ys = [target(tau, kappa) for tau in taus]
    basis = [chebyshev(x, degree) for x in xs]
    weights = [1.0 / NODES] * NODES
    coeffs, errors = [], []
    for _ in range(ITERATIONS):
        gram = [[sum(w * b[i] * b[j] for w, b in zip(weights, basis)) for j in range(degree + 1)]
                for i in range(degree + 1)]
        moment = [sum(w * b[i] * y for w, b, y in zip(weights, basis, ys)) for i in range(degree + 1)]
        coeffs = solve(gram, moment)
        errors = [abs(sum(c * v for c, v in zip(coeffs, b)) - y) for b, y in zip(basis, ys)]
        total = sum(w * e for w, e in zip(weights, errors))
        weights = [w * e / total for w, e in zip(weights, errors)]
    return coeffs, max(errors), lo, hi


def to_monomials(cheb, lo, hi):
    """sum c_k T_k(x), x = a tau + b, as coefficients of tau^0 .. tau^n."""
    n = len(cheb) - 1
    in_x = [0.0] * (n + 1)
    prev, cur = [1.0], [0.0, 1.0]
    in_x[0] += cheb[0]
    if n >= 1:
        in_x[1] += cheb[1]
    for k in range(2, n + 1):
        nxt = [0.0] * (k + 1)
        for i, v in enumerate(cur):
            nxt[i + 1] += 2.0 * v
        for i, v in enumerate(prev):
            nxt[i] -= v
        for i, v in enumerate(nxt):
            in_x[i] += cheb[k] * v
        prev, cur = cur, nxt
    a, b = 2.0 / (hi - lo), -(lo + hi) / (hi - lo)
    out = [0.0] * (n + 1)
    for i, p in enumerate(in_x):
        for j in range(i + 1):
            out[j] += p * math.comb(i, j) * a**j * b ** (i - j)
    return out


def float_horner_error(poly, kappa, lo, hi, points=20000):
    """Max |P evaluated in float - target| (log2 units) over `points` taus of [lo, hi]."""
    worst = 0.0
    for i in range(points + 1):
        tau = as_float(lo + (hi - lo) * i / points)
        p = poly[-1]
        for c in reversed(poly[:-1]):
            p = as_float(p * tau + c)
        worst = max(worst, abs(p - target(tau, kappa)))
    return worst


def header_constants(path):
    text = open(path, encoding="utf-8").read()
    kappa = re.findall(r"^constexpr double kGeluErfKappa = ([-+0-9.eE]+);", text, re.M)
    found = re.findall(r"^constexpr float kGeluErfP(\d+) = ([-+0-9.eE]+)f;", text, re.M)
    if len(kappa) != 1 or not found:
        raise SystemExit(f"{path}: expected one 'constexpr double kGeluErfKappa = ...;' and the "
                         "'constexpr float kGeluErfP<k> = ...f;' lines")
    terms = {}
    for k, v in found:
        if int(k) in terms:
            raise SystemExit(f"{path}: kGeluErfP{k} is defined twice")
        terms[int(k)] = float(v)
    if sorted(terms) != list(range(len(terms))):
        raise SystemExit(f"{path}: the kGeluErfP<k> are not k = 0 .. {len(terms) - 1}: {sorted(terms)}")
    # Horner's rule must use them from the highest down, each once (normal_tail's chain).
    used = [int(k) for k in re.findall(r"kGeluErfP(\d+)\b(?! =)", text)]
    if used != list(range(len(terms) - 1, -1, -1)):
        raise SystemExit(f"{path}: the Horner chain uses the coefficients in the order {used}, "
                         f"not {len(terms) - 1} .. 0 once each")
    return float(kappa[0]), [terms[k] for k in range(len(terms))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", metavar="HEADER", help="compare with the constants in HEADER")
    args = parser.parse_args()

    cheb, err, lo, hi = fit(KAPPA, DEGREE, T_MAX)
    poly = [as_float(c) for c in to_monomials(cheb, lo, hi)]
    u = 2.0**-24
    print(f"kappa {KAPPA}, degree {DEGREE}, t in [0, {T_MAX}] (tau in [{lo:.6f}, 1]): "
          f"max |error| {err:.3g} in log2 h, a relative error of h of {err * math.log(2) / u:.2f} u_f32")
    in_float = float_horner_error(poly, KAPPA, lo, hi)
    print(f"evaluated in float (float coefficients, float Horner steps): max |error| {in_float:.3g} in "
          f"log2 h, {in_float * math.log(2) / u:.2f} u_f32 relative in h")
    if args.check:
        kappa, coeffs = header_constants(args.check)
        problems = []
        if abs(kappa - KAPPA) > 1e-9:
            problems.append(f"kappa {kappa} in the header, {KAPPA} in the fit")
        if len(coeffs) != len(poly):
            problems.append(f"{len(coeffs)} coefficients in the header, {len(poly)} in the fit")
        for k, (have, want) in enumerate(zip(coeffs, poly)):
            if float_ulps(as_float(have), want) > 2:
                problems.append(f"coefficient {k}: {have!r} in the header, {want!r} fitted")
        for p in problems:
            print(f"{args.check}: {p}", file=sys.stderr)
        if problems:
            return 1
        print(f"{args.check}: kappa and the {len(poly)} coefficients match the fit")
        return 0
    for k, c in enumerate(poly):
        print(f"constexpr float kGeluErfP{k} = {c:.9e}f;")
    return 0


if __name__ == "__main__":
    sys.exit(main())
