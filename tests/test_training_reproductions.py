"""The training reproductions on tiny settings: Xia Figs. 2, 6, Huang Figs. 5-7, Chen Figs. 5-6.

The Huang figures compile one CNN training program per policy; here they run with a
logistic regression in place of the CNN (monkeypatched), which checks the figures'
plumbing and claims' logic, not the claims; so does Chen Fig. 6 and the Chen figures on
mocked tfds data. Chen Fig. 5 checks its claim on the digits at 30 rounds; its delay
environment driving training is tested in `tests/test_training_env.py`.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorflow_datasets as tfds

import fedjax_sel
import models
from experiments.reproductions import Options, chen_training, huang_training, reproduce
from experiments.reproductions.huang_training import dirichlet_biased
from fedjax_sel import envs
from fedjax_sel.types import RoundInput


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


def test_dataset_option_is_checked_before_anything_runs(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=2)
    with pytest.raises(ValueError, match=r"dataset must be one of .*'fashion_mnist'.*'imagenet'"):
        reproduce("huang_training", "5a", options._replace(dataset="imagenet"))
    # The digits figures cannot take images the Huang CNNs need, and vice versa.
    with pytest.raises(ValueError, match="dataset must be one of"):
        reproduce("huang_training", "6a", options._replace(dataset="digits"))
    with pytest.raises(ValueError, match="trains no model"):
        reproduce("huang", "3", options._replace(dataset="mnist"))
    with pytest.raises(ValueError, match="data_dir needs a dataset"):
        reproduce("xia_training", "2", options._replace(data_dir=str(tmp_path)))
    assert not os.listdir(tmp_path)


def test_xia_fig6_runs_on_a_prepared_tfds_dataset(tmp_path):
    options = Options(
        "calibrated", str(tmp_path), num_trials=1, num_rounds=2, dataset="mnist", data_dir="x"
    )
    with tfds.testing.mock_data(num_examples=600):
        numbers = reproduce("xia_training", "6", options)
    assert numbers["dataset"] == "mnist"
    # §II.C's heuristic at varphi = 1/2 on the mock split's sizes: c sums to N / 2.
    fairness = np.array(numbers["fairness_target"])
    np.testing.assert_allclose(fairness.sum(), 2.0, rtol=1e-9)
    assert fairness[:2].min() > fairness[2:].max()


def _logistic(images, setting):
    """A model that compiles in seconds in place of the figures' CNNs."""
    del setting
    return models.get("logistic_regression", images.x.shape[2:], images.num_classes)


def test_huang_fig5_panel_runs_on_a_small_setting(tmp_path, monkeypatch):
    monkeypatch.setattr(huang_training, "_model", _logistic)
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=2)
    numbers = reproduce("huang_training", "5f", options)
    assert numbers["gamma_1"] == "iid" and numbers["dataset"] == "gaussian_mixture"
    assert set(numbers["final_accuracy"]) == {
        "dirichlet_0.1",
        "dirichlet_1",
        "dirichlet_10",
        "random",
    }
    final = [numbers["final_accuracy"][f"dirichlet_{g:g}"] for g in huang_training.GAMMA_2]
    assert numbers["holds"] == bool(final[0] < final[1] < final[2])
    assert os.path.exists(tmp_path / "huang_training_fig5f_calibrated.png")


def test_huang_fig5_panels_follow_the_paper():
    # (a)-(c) Fashion-MNIST, (d)-(f) CIFAR-10, each with gamma_1 = 1, 10, iid.
    options = Options("calibrated", "unused")
    images, setting = huang_training.load_images(options, "fashion_mnist", 1.0)
    assert images.x.shape[2:] == (16, 16, 1) and setting.model == "cnn_mnist"
    np.testing.assert_array_equal(images.counts, 50)
    images, setting = huang_training.load_images(options, "cifar10", None)
    assert images.x.shape[2:] == (16, 16, 3) and setting.model == "cnn_cifar10"
    # The i.i.d. panel splits the pool without overlap.
    flat = np.asarray(images.x).reshape(-1, 16 * 16 * 3)
    assert np.unique(flat, axis=0).shape[0] == flat.shape[0]
    assert [huang_training.PANELS[p] for p in "abcdef"] == [
        ("fashion_mnist", 1.0),
        ("fashion_mnist", 10.0),
        ("fashion_mnist", None),
        ("cifar10", 1.0),
        ("cifar10", 10.0),
        ("cifar10", None),
    ]


def test_huang_fig6_and_fig7_share_one_run_on_exchange_times(tmp_path, monkeypatch):
    monkeypatch.setattr(huang_training, "_model", _logistic)
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    # Panel (e): CIFAR-10 stand-in, gamma_1 = 10, with the claims of Figs. 6(e) and 7(e).
    fig6 = reproduce("huang_training", "6e", options)
    fig7 = reproduce("huang_training", "7e", options)
    rbcs = [f"RBCS-F({v})" for v in (1, 10, 20, 50, 100)]
    names = {*rbcs, "random", "FedCS(3)"}
    assert set(fig6["final_accuracy"]) == names
    assert fig6["gamma_1"] == "10" and fig6["dataset"] == "gaussian_mixture"
    assert fig6["total_time_s"] == fig7["total_time_s"]
    # With 40 clients available w.p. 0.8, a round has fewer than 8 available with
    # probability below 1e-9: RBCS-F and random select exactly m = 8 every round.
    for policy in (*rbcs, "random"):
        np.testing.assert_allclose(fig6["mean_cohort"][policy], 8.0, rtol=1e-6)
    assert 0.0 < fig6["mean_cohort"]["FedCS(3)"] <= huang_training.FEDCS_SLOTS
    results = huang_training._selection_results("e", options)
    for policy in names:
        latency = results.curves[policy]["latency"]["mean"]
        elapsed = results.curves[policy]["cumulative_latency"]["mean"]
        # Fig. 7's time axis is the running sum of the exchange-time round lengths f.
        np.testing.assert_allclose(elapsed, np.cumsum(latency), rtol=1e-5)
        assert np.all(latency > 0.0)
    assert fig6["holds"] == (
        fig6["smaller_v_higher_accuracy"]
        and fig6["random_best"]
        and fig6["fedcs_worst"]
        and fig6["rbcs_f_fewer_rounds_than_fedcs"]
    )
    # RBCS-F(20) against RBCS-F(50) on ten accuracy levels: the time to a higher level is
    # never shorter, and the flag is the comparison level by level.
    levels = np.asarray(fig7["levels_20_vs_50"])
    assert levels.shape == (10,) and np.all(np.diff(levels) > 0)
    times = {p: np.asarray(t) for p, t in fig7["time_to_levels_s"].items()}
    assert all(np.all(np.diff(t) >= 0) for t in times.values())
    assert fig7["rbcs_f_20_ahead_of_50"] == bool(np.all(times["RBCS-F(20)"] <= times["RBCS-F(50)"]))
    assert fig7["holds"] == (
        fig7["fedcs_fastest_at_low_accuracy"]
        and fig7["random_slowest"]
        and fig7["rbcs_f_between"]
        and fig7["rbcs_f_20_ahead_of_50"]
    )
    assert os.path.exists(tmp_path / "huang_training_fig6e_calibrated.png")
    assert os.path.exists(tmp_path / "huang_training_fig7e_calibrated.png")


def test_huang_figs_6_and_7_have_every_panel_of_the_paper():
    for figure in "67":
        for panel, (family, _) in huang_training.PANELS.items():
            claim = huang_training.FIGURES[figure + panel].claim
            assert f"Panel ({panel}): {family}, gamma_1 = " in claim
    # Only (e) and (f) carry the remarks on RBCS-F(20) vs RBCS-F(50) and on FedCS(3)'s rounds.
    assert [p for p in "abcdef" if "RBCS-F(20)" in huang_training.FIGURES["7" + p].claim] == [
        "e",
        "f",
    ]
    assert [p for p in "abcdef" if "fewer rounds" in huang_training.FIGURES["6" + p].claim] == [
        "e",
        "f",
    ]


def test_huang_panels_read_the_papers_tfds_datasets():
    # Panels (a)-(c) on Fashion-MNIST, (d)-(f) on CIFAR-10: the datasets' own images, the
    # CNN that fits them and the spec's 500 examples per client, batch 50, lr 0.01 / 0.05.
    cases = (("fashion_mnist", 1.0, (28, 28, 1)), ("cifar10", 10.0, (32, 32, 3)))
    for name, gamma_1, shape in cases:
        options = Options("calibrated", "unused", dataset=name, data_dir="x")
        with tfds.testing.mock_data(num_examples=6000):
            images, setting = huang_training.load_images(options, name, gamma_1)
        assert images.x.shape[2:] == shape
        assert setting == huang_training.PAPER[name]
        np.testing.assert_array_equal(images.counts, 500)
        assert huang_training._model(images, setting).name == setting.model


def test_exchange_time_training_keeps_the_exchange_time_rounds(monkeypatch):
    # The training environment takes the availability and contexts, hence FedCS(3)'s
    # cohorts and the fairness queues, from the exchange-time model unchanged.
    monkeypatch.setattr(huang_training, "_model", _logistic)
    images, setting = huang_training.load_images(
        Options("calibrated", "unused"), "fashion_mnist", 1.0
    )
    fedcs = {"FedCS(3)": huang_training.selection_policies()["FedCS(3)"]}
    env = huang_training.exchange_time_training(images, setting)
    bare = envs.exchange_time(40, 8, availability=0.8, fairness_rate=0.15)
    runs = [
        fedjax_sel.simulate(fedcs, e, num_rounds=6, num_trials=2, seed=3, progress=None)
        for e in (env, bare)
    ]
    for metric in ("num_selected", "extra/mean_queue"):
        trained, alone = (r.curves["FedCS(3)"][metric]["mean"] for r in runs)
        np.testing.assert_array_equal(trained, alone)
    assert runs[0].curves["FedCS(3)"]["num_selected"]["mean"].max() <= huang_training.FEDCS_SLOTS


def _chen_checks(numbers, rounds):
    """What every run of a Chen training figure must show, whatever its length."""
    time = numbers["training_time_s"]
    # Common random numbers: every round, Optimal schedules the fastest clients of the
    # same draws, so its training time is below every other scheduler's.
    assert all(time["optimal"] < time[p] for p in ("proposed", "epsilon_greedy", "random"))
    assert numbers["num_rounds"] == rounds
    losses = np.array(list(numbers["final_training_loss"].values()))
    assert np.all(np.isfinite(losses) & (losses > 0.0))
    accuracies = np.array(list(numbers["final_accuracy"].values()))
    assert np.all((accuracies >= 0.0) & (accuracies <= 1.0))
    assert numbers["holds"] == (numbers["accuracy_holds"] and numbers["loss_holds"])


def test_chen_fig5_learns_faster_in_time_with_the_delay_learning_scheduler(tmp_path):
    # 30 rounds x 2 trials on the digits: the proposed scheduler's time to the accuracy and
    # loss targets is below epsilon-greedy's and random's (at 150 rounds x 4 trials, the
    # flagfile's, by 19% and more; docs/reproductions/chen.md).
    options = Options("calibrated", str(tmp_path), num_trials=2, num_rounds=30)
    numbers = reproduce("chen_training", "5", options)
    _chen_checks(numbers, 30)
    assert numbers["dataset"] == "digits" and numbers["shard_size"] == 79
    assert numbers["holds"], numbers
    assert os.path.exists(tmp_path / "chen_training_fig5_calibrated.png")


def test_chen_fig6_runs_on_the_mixture_stand_in(tmp_path, monkeypatch):
    monkeypatch.setattr(chen_training, "_model", _logistic)
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    numbers = reproduce("chen_training", "6", options)
    _chen_checks(numbers, 3)
    assert numbers["dataset"] == "gaussian_mixture" and numbers["shard_size"] == 40
    assert numbers["model"] == "cnn_cifar10_small"
    assert os.path.exists(tmp_path / "chen_training_fig6_calibrated.png")


def test_chen_fig5_runs_on_a_prepared_tfds_dataset(tmp_path, monkeypatch):
    monkeypatch.setattr(chen_training, "_model", _logistic)
    options = Options(
        "calibrated", str(tmp_path), num_trials=1, num_rounds=2, dataset="fashion_mnist",
        data_dir="x",
    )  # fmt: skip
    with tfds.testing.mock_data(num_examples=90):
        numbers = reproduce("chen_training", "5", options)
    _chen_checks(numbers, 2)
    # 90 mock training images over 18 clients: shards of 5, the delay model's D_k.
    assert numbers["dataset"] == "fashion_mnist" and numbers["shard_size"] == 5
    # The paper's model (replaced by a logistic regression here) and learning rate.
    assert numbers["model"] == "mlp_128" and numbers["learning_rate"] == 0.05
    # The test set is the 90 mock images: the mean accuracy of two rounds is a multiple
    # of 1/180.
    final = np.array(list(numbers["final_accuracy"].values()))
    np.testing.assert_allclose(final * 180, np.round(final * 180), atol=1e-3)
    with pytest.raises(ValueError, match="dataset must be one of"):
        reproduce("chen_training", "5", options._replace(dataset="emnist"))


def test_chen_fig6_loads_a_prepared_cifar10(tmp_path):
    # Fig. 6's data path on tfds (its figure runs on the stand-in above, and Fig. 5's
    # on tfds): 90 mock CIFAR-10 images over 18 clients, the paper's setting.
    options = Options("calibrated", str(tmp_path), dataset="cifar10", data_dir="x")
    with tfds.testing.mock_data(num_examples=90):
        images, setting = chen_training.load_images(options, "6")
    assert images.x.shape[2:] == (32, 32, 3) and images.num_classes == 10
    np.testing.assert_array_equal(images.counts, np.full(18, 5))
    assert setting.model == "cnn_cifar10_small" and setting.learning_rate == 0.02
