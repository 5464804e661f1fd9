"""Xia et al.'s Theorems 3 and 4 (CS-UCB-Q, beta = 1/sqrt(T)) on the two-client instance of
`experiments.reproductions.xia.run_thm3`, and the bounds' constants worked by hand."""

import numpy as np
import pytest

from experiments.reproductions import Options, reproduce, xia
from fedjax_sel import fairness_lp


def test_bound_29_by_hand():
    # T = 100, K = 2, N = 1, c = (0.2, 0.3), beta = 0.1: Omega = 0.64 + 0.49 = 1.13;
    # 0.1 * 1.13 * 100 / 2 = 5.65; (pi^2/3 + 1) * 2 = 8.5797; 4 sqrt(400 ln 100) = 171.677;
    # 5.65 + 0.9 * (8.5797 + 171.677) = 167.881.
    assert xia.omega((0.2, 0.3)) == pytest.approx(1.13)
    assert xia.regret_bound_29(100, 2, 1, (0.2, 0.3), 0.1) == pytest.approx(167.881, abs=1e-3)
    # Fig. 4's targets: Omega = 0.36 + 0.25 + 0.36 (spec §6.3).
    assert xia.omega((0.6, 0.5, 0.4)) == pytest.approx(0.97)


def test_queue_bound_59_by_hand():
    # beta = 0.1, N = 1: Xi = 1.13 / 2 + 0.9 / 0.1 = 9.565; epsilon = (1 - 0.5) / 2.
    bound = xia.queue_bound_59((0.2, 0.3), 1, 1.0, 0.1)
    assert bound["xi"] == pytest.approx(9.565)
    assert bound["epsilon"] == pytest.approx(0.25)
    assert bound["mean_backlog_bound"] == pytest.approx(38.26)
    with pytest.raises(ValueError, match="strictly inside"):
        xia.queue_bound_59((0.5, 0.5), 1, 1.0, 0.1)


@pytest.mark.parametrize(
    "fairness, num_selected, availability, margin",
    [
        # Fig. 4: the three clients bind, (E[min{2, |A|}] - 1.5) / 3 = (1.971 - 1.5) / 3.
        ((0.6, 0.5, 0.4), 2, 0.9, 0.157),
        # A pair binds: (P(1 or 2 available) - 0.7) / 2 = (0.75 - 0.7) / 2.
        ((0.35, 0.35, 0.05), 1, (0.5, 0.5, 0.9), 0.025),
        # A single client binds: 0.5 - 0.45.
        ((0.1, 0.1, 0.45), 1, (0.9, 0.9, 0.5), 0.05),
    ],
)
def test_fairness_margin_by_hand_and_by_lp_23(fairness, num_selected, availability, margin):
    assert xia.fairness_margin(fairness, num_selected, availability) == pytest.approx(margin)
    means = np.full(len(fairness), 0.5)
    c = np.asarray(fairness)
    fairness_lp.optimal_fair_value(means, c + margin - 1e-4, num_selected, availability)
    with pytest.raises(ValueError, match="infeasible"):
        fairness_lp.optimal_fair_value(means, c + margin + 1e-3, num_selected, availability)


@pytest.fixture(scope="module")
def theorems(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("xia_thm"))
    options = Options("calibrated", out, num_trials=32, num_rounds=2000, seed=0)
    return reproduce("xia", "thm3", options), reproduce("xia", "thm4", options)


def test_theorem_3_backlog_and_violation_under_the_bounds(theorems):
    thm3, _ = theorems
    beta = 1 / np.sqrt(2000)
    # Xi = 1.13 / 2 + (1 - beta) sqrt(2000) = 44.286, epsilon = 0.25: not vacuous, the
    # trivial backlog being (0.2 + 0.3) * 1999 / 2 = 499.75.
    assert thm3["mean_backlog_bound"] == pytest.approx(44.286 / 0.25, abs=1e-2)
    assert thm3["mean_backlog_bound"] < thm3["trivial_mean_backlog"] == pytest.approx(499.75)
    assert thm3["beta"] == pytest.approx(beta)
    assert thm3["mean_backlog"] + thm3["mean_backlog_ci95"] <= thm3["mean_backlog_bound"]
    # eq. 27 without its clip: c_k - F_k(T) <= D_k(T + 1) / T in every trial, so in the mean.
    c = np.asarray(xia.THEOREM_FAIRNESS)
    assert np.all(c - thm3["selection_fraction"] <= np.asarray(thm3["final_queue"]) / 2000 + 1e-6)
    assert max(thm3["violation"]) <= thm3["violation_bound"]
    assert thm3["holds"]


def test_theorem_4_regret_under_eq_29(theorems):
    _, thm4 = theorems
    # r* = 0.7 * 0.9 + 0.3 * 0.1 (client 2 held at its target).
    assert thm4["r_star"] == pytest.approx(0.66, abs=1e-6)
    # Omega sqrt(T)/2 + (1 - beta)(8.5797 + 4 sqrt(8000 ln 2000)) = 25.268 + 972.697.
    assert thm4["bound_29"] == pytest.approx(997.964, abs=1e-2)
    assert thm4["bound_29"] < thm4["trivial_bound"] == pytest.approx(0.56 * 2000, abs=1e-3)
    assert thm4["regret"] + thm4["regret_ci95"] <= thm4["bound_29"]
    assert thm4["holds"]
