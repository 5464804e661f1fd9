"""Chen et al.'s Theorem 1 (eq. 28) on the context-free two-client instance of
`experiments.reproductions.chen.thm1_regret`, and the bound worked by hand."""

import pytest

from experiments.reproductions import Options, chen, reproduce


def test_bound_28_by_hand():
    # alpha = 1, D = 1: z = 1/2, gamma = 1/4, theta = -1/4. T = 1e4, K_s = 2, N = 1,
    # r_max = tau_max = L = 1: 2 * 2 * (1000 ln 1e4 + 10) = 36881.37; 3 * 1000 = 3000;
    # A = 2 + 2 = 4, 4 * 1000 / 0.75 = 5333.33; (pi^2/3) * C(2, 1) = 6.58.
    bound = chen.regret_bound_28(10_000, 2, 1, 1.0, 1.0, 1.0, 1, 1.0)
    assert bound == pytest.approx(36881.37 + 3000 + 5333.33 + 6.58, abs=0.02)


def test_bound_28_is_vacuous_at_the_paper_scale_and_not_on_the_small_instance():
    # Sec. 7.1: K_s = 6, N = 2, r_max = tau_max = 5 s, alpha = 1, D = 2; L = 0 at best.
    assert chen.regret_bound_28(2000, 6, 2, 5.0, 5.0, 1.0, 2, 0.0) > 2000 * 5.0
    args = (2, 1, 0.6, 1.0, chen.THM1_ALPHA, chen.THM1_CONTEXT_DIM, 0.0)
    assert chen.regret_bound_28(200_000, *args) > 0.6 * 200_000
    assert chen.regret_bound_28(300_000, *args) < 0.95 * 0.6 * 300_000


def test_theorem_1_regret_under_eq_28(tmp_path):
    options = Options("literal", str(tmp_path), num_trials=2, num_rounds=300_000, seed=0)
    numbers = reproduce("chen", "thm1", options)
    assert numbers["grid"] == 2 and numbers["max_loss"] == pytest.approx(0.6)
    assert numbers["bound_28"] < numbers["trivial_bound"]
    assert 0 < numbers["regret"] + numbers["regret_ci95"] <= numbers["bound_28"]
    assert numbers["holds"]
    assert (tmp_path / "chen_figthm1_literal.png").exists()
