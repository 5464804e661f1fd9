"""Tong et al.'s reproductions on a small setting: Fig. 8's claim; BP-UCB on the
training slots; the training figures' dataset check."""

import jax
import numpy as np
import pytest
import tensorflow_datasets as tfds

import bandits
from experiments.reproductions import Options, reproduce, tong
from experiments.tong_trials import run_trials
from fedjax_sel import envs


def test_fig8_beliefs_settle_within_about_ten_slots(tmp_path):
    options = Options("literal", str(tmp_path), num_trials=4, num_rounds=25)
    numbers = tong.run_fig8(options)
    assert numbers["holds"]["converges_within_about_10_slots"], numbers["settled_from_slot"]
    # With the paper's constants the Ising beliefs are about r^2 (spec §3.4), and the
    # surrogate's opinions share the slot's accuracy, in [0.60, 0.88].
    beliefs = np.asarray(numbers["final_beliefs"])
    assert np.ptp(beliefs) < 0.01 and np.all((0.6**2 < beliefs) & (beliefs < 0.88**2))
    assert (tmp_path / "tong_fig8_literal.png").exists()


def test_bp_ucb_runs_unchanged_on_the_training_slots():
    # Tong et al.'s FL&DA slots with training (N = 6, K = 2): 3 cold-start slots, then 2
    # more. BP-UCB reads each client's own opinion (Feedback.reward) and all N opinions
    # (Feedback.info["opinions"], which Quick-Init UCB reads too, as on the surrogate).
    env = envs.make("fl_da", 6, 2, rounds_per_slot=2, num_epochs=1)
    run = run_trials(bandits.bp_ucb(6, 2), env, 5, 2)
    # Every client once in the cold start, K clients a slot.
    assert np.all(run.counts >= 1) and np.all(run.counts.sum(1) == 10)
    np.testing.assert_allclose(run.expected, run.reward)  # no oracle: realised values
    assert np.all((run.accuracy > 0.0) & (run.accuracy <= 1.0))
    assert run.belief.shape == (5, 6) and np.all((run.belief > 0.0) & (run.belief < 1.0))


def test_training_figures_check_their_dataset_before_anything_runs(tmp_path):
    options = Options("calibrated", str(tmp_path), dataset="synthetic")
    with pytest.raises(ValueError, match="dataset must be one of"):
        reproduce("tong_training", "7", options)


def test_figs_6_and_8_run_on_the_training_slots(tmp_path):
    # Fig. 6 counts Quick-Init's selections on FL&FA, Fig. 8 reads BP-UCB's beliefs on
    # FL&DA, both over the digits split into 20 clients.
    options = Options("calibrated", str(tmp_path), num_trials=2, num_rounds=6)
    fig6 = reproduce("tong_training", "6", options)
    counts = np.asarray(fig6["selections_per_client"])
    # K = 5 clients a slot: 30 selections per trial; the cold start (4 slots) takes every
    # client once.
    assert counts.shape == (20,) and counts.sum() == pytest.approx(30.0)
    assert np.all(counts >= 1.0)
    fig8 = reproduce("tong_training", "8", options)
    beliefs = np.asarray(fig8["final_beliefs"])
    assert beliefs.shape == (5,) and np.all((beliefs > 0.0) & (beliefs < 1.0))
    assert (tmp_path / "tong_training_fig6_calibrated.png").exists()
    assert (tmp_path / "tong_training_fig8_calibrated.png").exists()


def test_the_training_figures_put_bp_ucb_on_fl_da_and_the_others_on_fl_fa():
    # FL&DA tells each selected client its own opinion, FL&FA the mean opinion of all
    # clients (eq. 8).
    from experiments.reproductions import tong_training

    make = tong_training.make_env(Options("literal", "unused"))
    policy = bandits.fixed(20, range(5))
    rewards = {}
    for name in ("bp_ucb", "quick_init_ucb"):
        env = make(20, 1.0, name)
        state = env.reset(jax.random.PRNGKey(0))
        inp = env.observe(state, 1, jax.random.PRNGKey(1))
        decision, _ = policy.select(policy.init(jax.random.PRNGKey(2)), inp, jax.random.PRNGKey(3))
        feedback, _, _ = env.step(state, inp, decision, jax.random.PRNGKey(4))
        rewards[name] = np.asarray(feedback.reward)[:5]
        opinions = np.asarray(feedback.info["opinions"])
    np.testing.assert_allclose(rewards["bp_ucb"], opinions[:5], rtol=1e-6)
    np.testing.assert_allclose(rewards["quick_init_ucb"], opinions.mean(), rtol=1e-6)
    assert np.ptp(opinions) > 0  # the two readings differ


def test_the_training_slots_read_a_prepared_tfds_mnist():
    # --dataset=mnist --data_dir=... (mocked here, offline): the same split (clients 1-5
    # IID, the others two labels each) over MNIST's images, for any N of the figures.
    from experiments.reproductions import tong_training

    options = Options("calibrated", "unused", dataset="mnist", data_dir="unused")
    with tfds.testing.mock_data(num_examples=2000):
        data = tong_training._data(options, 40)
    assert data.x.shape[0] == 40 and tuple(data.x.shape[2:]) == (28, 28, 1)
    labels = [np.unique(np.asarray(data.y[i, : int(data.counts[i])])).size for i in range(40)]
    assert min(labels[:5]) > 2 and max(labels[5:]) == 2
    assert np.all(np.asarray(data.heldout_counts) > 0)  # every client has opinions to give
