"""shardscope_torch.fit: exact integer polynomials in (B, T)."""
import pytest

from shardscope_torch import fit


def values_of(f, batches, seqs):
    return {(b, t): f(b, t) for b in batches for t in seqs}


def test_fit_recovers_attention_flops_exactly():
    # 4*B*T^2*H*D with H*D = 768, plus a linear term 2*B*T*768*2304
    f = lambda b, t: 4 * b * t * t * 768 + 2 * b * t * 768 * 2304
    poly = fit.fit([2, 3, 4], [32, 48, 64], values_of(f, [2, 3, 4], [32, 48, 64]))
    assert poly == {(1, 2): 3072, (1, 1): 3538944}
    assert fit.to_text(poly) == "3538944*B*T + 3072*B*T^2"
    assert fit.evaluate(poly, 5, 80) == f(5, 80)


def test_fit_constant_and_unit_coefficients():
    assert fit.to_text(fit.fit([2, 3, 4], [8, 9, 10], values_of(lambda b, t: 7, [2, 3, 4],
                                                                 [8, 9, 10]))) == "7"
    assert fit.to_text(fit.fit([2, 3, 4], [8, 9, 10], values_of(lambda b, t: b * t, [2, 3, 4],
                                                                 [8, 9, 10]))) == "B*T"
    assert fit.to_text({}) == "0"


def test_fit_without_sequence_axis():
    poly = fit.fit([2, 3, 4], [None], {(b, None): 150528 * b for b in [2, 3, 4]})
    assert poly == {(1, 0): 150528}


def test_non_integer_coefficient_is_an_error():
    with pytest.raises(fit.FitError, match="non-integer coefficient 1/2"):
        fit.fit([2, 3, 4], [8, 9, 10], values_of(lambda b, t: b * t * (t + 1) // 2 if False
                                                 else (b * t * t + b * t) // 2, [2, 3, 4],
                                                 [8, 9, 10]))


def test_negative_coefficient_is_detected():
    poly = fit.fit([2, 3, 4], [8, 9, 10], values_of(lambda b, t: b * (t - 1), [2, 3, 4],
                                                    [8, 9, 10]))
    assert poly == {(1, 1): 1, (1, 0): -1}
    assert fit.has_negative(poly)
