"""The training reproductions: Xia Figs. 2 and 6 end to end on a tiny setting, Huang's selector.

Huang Fig. 5 and Chen Fig. 5 compile four training programs each; they run through
their flagfiles (docs/reproductions/training.md), and the test suite checks here the
pieces of them that no other test covers: the Dirichlet-biased selector (Huang) and
the delay environment driving training (Chen, `tests/test_training_env.py`).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.types import RoundInput
from launch.reproductions import Options, reproduce
from launch.reproductions.huang_training import dirichlet_biased


def test_xia_fig2_runs_on_a_small_setting(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    numbers = reproduce("xia_training", "2", options)
    assert isinstance(numbers["holds"], bool)
    accuracies = np.array(list(numbers["final_accuracy"].values()))
    assert np.all((accuracies > 0.0) & (accuracies <= 1.0))
    assert os.path.exists(tmp_path / "xia_training_fig2_calibrated.png")
    assert os.path.exists(tmp_path / "xia_training_fig2_calibrated.json")


def test_xia_fig6_runs_on_a_small_setting(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    numbers = reproduce("xia_training", "6", options)
    assert isinstance(numbers["holds"], bool)
    assert set(numbers["final_accuracy"]) == {
        "cs_ucb_q",
        "random",
        "round_robin",
        "local_accuracy",
        "modified_cs_ucb",
    }
    # Fairness targets c_k = (N / 2) s_k / sum s sum to N / 2 = 2, the 5-digit clients highest.
    fairness = np.array(numbers["fairness_target"])
    np.testing.assert_allclose(fairness.sum(), 2.0, rtol=1e-9)
    assert fairness[:2].min() > fairness[2:].max()
    # Every policy schedules at most N = 4 of the 10 clients per round.
    for fractions in numbers["selection_fraction"].values():
        assert 0.0 < sum(fractions) <= 4.0 + 1e-6
    assert os.path.exists(tmp_path / "xia_training_fig6_calibrated.png")


def test_dirichlet_biased_selection_follows_its_probabilities():
    n, k, rounds = 6, 2, 4000
    selector = dirichlet_biased(n, k, concentration=0.5)
    logq = selector.init(jax.random.PRNGKey(0))
    available = jnp.array([True, True, True, True, False, True])
    inp = RoundInput(jnp.int32(1), available)
    select = jax.jit(jax.vmap(lambda key: selector.select(logq, inp, key)[0].selected))
    picks = np.asarray(select(jax.random.split(jax.random.PRNGKey(1), rounds)))
    assert np.all(picks.sum(1) == k) and not picks[:, 4].any()
    # Single draws (k = 1) are exactly softmax(log q') over the available clients.
    one = dirichlet_biased(n, 1, concentration=0.5)
    first = jax.jit(jax.vmap(lambda key: one.select(logq, inp, key)[0].selected))
    freq = np.asarray(first(jax.random.split(jax.random.PRNGKey(2), rounds))).mean(0)
    q = np.where(np.asarray(available), np.exp(np.asarray(logq)), 0.0)
    q /= q.sum()
    # Binomial standard error <= 0.008 at 4000 draws; 0.035 is > 4 of them.
    np.testing.assert_allclose(freq, q, atol=0.035)
