"""Huang et al.'s Theorem 3 (eq. 24) on the small instance of
`experiments.reproductions.huang.thm3_regret`, and the bound worked by hand."""

import numpy as np
import pytest

from experiments.reproductions import Options, huang, reproduce


def test_bound_24_by_hand():
    # T = 100, N = 4, beta = 0.1, V = 10, K = 0.9, R = 0.5, S = 0.5, L = 1, lambda = 1,
    # delta = 0.05: 4 * 1.01 / 20 = 0.202; alpha = sqrt(3 ln 2020) + 0.5 = 5.27835,
    # zeta = max(0.9, 1) * alpha; sqrt(6 ln(1 + 100/3) / 100) = 0.460616.
    args = dict(ridge=1.0, confidence=0.05)
    bound = huang.regret_bound_24(100, 4, 0.1, 10, 0.9, 0.5, 0.5, 1.0, **args)
    assert bound == pytest.approx(0.202 + 5.27835 * 0.460616, abs=1e-4)
    # K = 2 > 1 doubles the second term (zeta_T = max{K, 1} ...).
    doubled = huang.regret_bound_24(100, 4, 0.1, 10, 2.0, 0.5, 0.5, 1.0, **args)
    assert doubled - 0.202 == pytest.approx(2 * (bound - 0.202))


def test_thm3_constants():
    const = huang.thm3_constants()
    assert const["K"] == pytest.approx(0.9)
    assert const["R"] == pytest.approx(0.9 / np.sqrt(3))
    assert const["S"] == pytest.approx(np.sqrt(0.33))


def test_theorem_3_regret_under_eq_24(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=16, num_rounds=2000, seed=0)
    numbers = reproduce("huang", "thm3", options)
    for v in huang.THM3_PENALTY_WEIGHTS:
        row = numbers[f"RBCS-F({v})"]
        # Not vacuous: below the 2K = 1.8 s no round exceeds.
        assert row["bound_24"] < numbers["trivial_bound"] == pytest.approx(1.8)
        assert 0 < row["regret_upper_estimate"] + row["ci95"] <= row["bound_24"]
        # The fairness the bound is paid for: every client near beta = 0.1 by T = 2000.
        assert row["min_selection_fraction"] >= huang.THM3_FAIRNESS_RATE - 0.01
    assert numbers["RBCS-F(10)"]["bound_24"] == pytest.approx(1.21833, abs=1e-4)
    assert numbers["holds"]
    assert (tmp_path / "huang_figthm3_calibrated.png").exists()
