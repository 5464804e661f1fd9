"""`Results.growth_exponent` on hand-built curves."""

import numpy as np
import pytest

from fedjax_sel.results import Results


def _results(curve):
    curve = np.asarray(curve, np.float64)
    return Results(
        config={"num_trials": 1, "num_rounds": curve.size},
        curves={"p": {"cumulative_regret": {"mean": curve, "std": np.zeros_like(curve)}}},
        totals={},
        selection_fraction={},
    )


@pytest.mark.parametrize("alpha", [0.25, 0.5, 2 / 3, 1.0, 1.5])
def test_a_power_law_gives_its_exponent(alpha):
    t = np.arange(1, 4001, dtype=np.float64)
    assert _results(7.0 * t**alpha).growth_exponent("p") == pytest.approx(alpha, abs=1e-9)


def test_a_linear_regret_with_an_offset_gives_one():
    # 500 accumulated in the first 100 rounds, then 0.3 per round: the log-log slope of
    # the whole curve is well below 1, the growth exponent is 1.
    t = np.arange(1, 2001, dtype=np.float64)
    curve = np.minimum(t, 100) * 5.0 + np.maximum(t - 100, 0) * 0.3
    slope = np.polyfit(np.log(t[199:]), np.log(curve[199:]), 1)[0]
    assert slope < 0.8
    assert _results(curve).growth_exponent("p") == pytest.approx(1.0, abs=1e-12)


def test_flat_and_short_curves():
    t = np.arange(1, 101, dtype=np.float64)
    # Regret that stops growing at half time: -inf; none in the mid quarter: NaN.
    assert _results(np.minimum(t, 50)).growth_exponent("p") == -np.inf
    assert np.isnan(_results(np.minimum(t, 10)).growth_exponent("p"))
    assert np.isnan(_results(np.zeros(100)).growth_exponent("p"))
    assert np.isnan(_results([1.0, 2.0, 3.0]).growth_exponent("p"))
