"""Huang et al.'s Theorem 3 (eq. 24) on the small instance of
`experiments.reproductions.huang.thm3_regret`, and the bound worked by hand."""

import numpy as np
import pytest

import bandits
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


def test_lemma_1_alpha_by_hand():
    # R = 0.5, S = 0.5, L = 1, lambda = 1, delta = 0.05, d = 3, t = 100:
    # 0.5 sqrt(3 ln(101 / 0.05)) + 0.5 = 0.5 * 4.77835 + 0.5.
    alpha = bandits.theory_exploration(100, 3, 1.0, 0.05, 0.5, 0.5, 1.0)
    assert float(alpha) == pytest.approx(2.889175, abs=1e-5)


def test_lemma_1_coverage_at_least_one_minus_delta(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=64, num_rounds=300, seed=0)
    numbers = reproduce("huang", "lemma1", options)
    delta = numbers["confidence_delta"]
    # A binomial coverage of 1 - delta over 64 trials has a standard error of 0.027.
    covered = numbers["lemma1_alpha"]["coverage_all_clients"]
    assert covered >= 1 - delta - 1.96 * np.sqrt(delta * (1 - delta) / 64)
    assert numbers["holds"]
    # Table II's alpha = 0.1 leaves the lemma's regime: the interval misses tau* often.
    assert numbers["constant_alpha_0.1"]["coverage_all_clients"] < 0.5
    assert numbers["constant_alpha_0.1"]["missed_pairs_fraction"] > 0.2
