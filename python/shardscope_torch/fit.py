"""Exact integer polynomials in (B, T) fitted from values traced at several sizes.

A traced quantity (a tensor dim, an op's FLOPs or bytes) is one integer per
traced size. fit() interpolates it on a tensor-product grid of batch sizes
and sequence lengths with exact rationals (Lagrange on each axis), so a
polynomial of degree < len(batches) in B and < len(seqs) in T is recovered
exactly; the caller checks the result at a held-out size. Poly text is the
syntax of plan/expr.h: "c*B^i*T^j" terms joined by " + ".
"""
from fractions import Fraction


class FitError(ValueError):
    pass


def _lagrange_coeffs(xs, ys):
    """Coefficients (lowest degree first) of the polynomial through (xs, ys), as Fractions."""
    n = len(xs)
    coeffs = [Fraction(0)] * n
    for i in range(n):
        # basis_i(x) = prod_{j != i} (x - x_j) / (x_i - x_j)
        basis = [Fraction(1)]
        denom = Fraction(1)
        for j in range(n):
            if j == i:
                continue
            basis = [Fraction(0)] + basis  # times x
            for k in range(len(basis) - 1):
                basis[k] -= xs[j] * basis[k + 1]
            denom *= xs[i] - xs[j]
        for k in range(n):
            coeffs[k] += Fraction(ys[i]) * basis[k] / denom
    return coeffs


def fit(batches, seqs, values):
    """values[(b, t)] for every b in batches, t in seqs -> {(i, j): int coefficient}.

    seqs may be [None] (the model has no sequence axis): the result has j = 0 only.
    Raises FitError when a coefficient is not an integer.
    """
    # First along T for each B, then along B for each T-power.
    per_b = {}
    for b in batches:
        if seqs == [None]:
            per_b[b] = [Fraction(values[(b, None)])]
        else:
            per_b[b] = _lagrange_coeffs(seqs, [values[(b, t)] for t in seqs])
    n_t = len(per_b[batches[0]])
    poly = {}
    for j in range(n_t):
        cb = _lagrange_coeffs(batches, [per_b[b][j] for b in batches])
        for i, c in enumerate(cb):
            if c == 0:
                continue
            if c.denominator != 1:
                raise FitError("non-integer coefficient %s of B^%d*T^%d" % (c, i, j))
            poly[(i, j)] = int(c)
    return poly


def evaluate(poly, b, t):
    return sum(c * b ** i * (t or 0) ** j for (i, j), c in poly.items())


def has_negative(poly):
    return any(c < 0 for c in poly.values())


def to_text(poly):
    """plan/expr.h text form; "0" for the zero polynomial."""
    if not poly:
        return "0"
    terms = []
    for (i, j) in sorted(poly):
        c = poly[(i, j)]
        factors = [] if (c == 1 and (i or j)) else [str(c)]
        if i:
            factors.append("B" if i == 1 else "B^%d" % i)
        if j:
            factors.append("T" if j == 1 else "T^%d" % j)
        terms.append("*".join(factors))
    return " + ".join(terms)
