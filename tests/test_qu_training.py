"""Qu et al.'s training figures: HFL on the network of the bandit-only figures."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tensorflow_datasets as tfds

import fedjax_sel
from experiments.reproductions import Options, qu_training, reproduce
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.envs.hierarchical import max_cohort


def _images(labels_per_client: list[list[int]], test_labels: list[int]) -> FederatedData:
    """Clients holding the given labels (one example each), 1x1 features."""
    n, n_max = len(labels_per_client), max(len(c) for c in labels_per_client)
    y = np.zeros((n, n_max), np.int32)
    for i, c in enumerate(labels_per_client):
        y[i, : len(c)] = c
    counts = np.array([len(c) for c in labels_per_client], np.int32)
    return FederatedData(
        x=np.zeros((n, n_max, 1), np.float32),
        y=y,
        counts=counts,
        x_heldout=np.zeros((n, 1, 1), np.float32),
        y_heldout=np.zeros((n, 1), np.int32),
        heldout_counts=np.zeros(n, np.int32),
        x_test=np.zeros((len(test_labels), 1), np.float32),
        y_test=np.asarray(test_labels, np.int32),
        num_classes=4,
    )


def test_effective_clients_and_label_skew_on_hand_worked_cases():
    assert qu_training.effective_clients([0.2] * 5) == pytest.approx(5.0)
    assert qu_training.effective_clients([0.5, 0.5, 0, 0]) == pytest.approx(2.0)
    # (0.6 + 0.2)^2 / (0.36 + 0.04) = 1.6
    assert qu_training.effective_clients([0.6, 0.2]) == pytest.approx(1.6)
    images = _images([[0, 1], [2, 3]], test_labels=[0, 1, 2, 3])
    # Only client 0 trained: labels {0, 1} at 1/2 each against 1/4 each: TV = 1/2.
    assert qu_training.label_skew([1.0, 0.0], images) == pytest.approx(0.5)
    assert qu_training.label_skew([0.3, 0.3], images) == pytest.approx(0.0)
    # Client 1 three times as often: (1/8, 1/8, 3/8, 3/8) against 1/4: TV = 1/4.
    assert qu_training.label_skew([0.25, 0.75], images) == pytest.approx(0.25)


def test_every_selected_client_trains_on_the_network(monkeypatch):
    # The training environment has max_cohort slots: no client the budgets let a policy
    # select goes untrained (the training environment would report it failed), so the
    # failures are exactly the selected clients that missed the deadline.
    options = Options("calibrated", "unused")
    images, setting = qu_training.load_images(options, "mnist")
    assert images.x.shape[0] == 50 and setting.model == "logistic_regression"
    # Two labels per client (spec §5).
    for client in range(50):
        held = np.unique(np.asarray(images.y[client, : int(images.counts[client])]))
        assert held.size == 2
    selectors = qu_training.policies("calibrated", "mnist", 5.0)
    env = qu_training.training_env(images, setting, "mnist", "round", budget=5.0)
    assert env.num_selected == max_cohort("mnist", 5.0, 3) == 15
    results = fedjax_sel.simulate(
        {p: selectors[p] for p in ("oracle", "cocs", "random")},
        env,
        num_rounds=6,
        num_trials=2,
        seed=1,
        progress=None,
    )
    for policy in results.policies:
        curves = results.curves[policy]
        selected = curves["extra/selected"]["mean"]
        missed = selected - curves["extra/successes"]["mean"]
        np.testing.assert_allclose(curves["failed"]["mean"], missed, atol=1e-6)
        assert selected.max() <= 15 and selected.min() > 0
        assert np.all((curves["accuracy"]["mean"] >= 0) & (curves["accuracy"]["mean"] <= 1))


def test_fig2_runs_on_a_small_setting(tmp_path):
    options = Options("calibrated", str(tmp_path), num_trials=1, num_rounds=3)
    numbers = reproduce("qu_training", "2a", options)
    assert numbers["participants"] == list(qu_training.PARTICIPANTS)
    assert numbers["num_rounds"] == 3 and numbers["dataset"] == "digits"
    finals = numbers["final_accuracy"]
    assert len(finals) == 4 and all(0.0 <= a <= 1.0 for a in finals)
    assert numbers["target_accuracy"] == pytest.approx(qu_training.TARGET_FRACTION * min(finals))
    higher = all(a < b for a, b in zip(finals[:-1], finals[1:], strict=False))
    assert numbers["more_participants_higher_final_accuracy"] == higher
    assert os.path.exists(tmp_path / "qu_training_fig2a_calibrated.png")
    assert os.path.exists(tmp_path / "qu_training_fig2a_calibrated.json")


def test_training_figures_check_their_dataset_before_anything_runs(tmp_path):
    options = Options("calibrated", str(tmp_path), dataset="fashion_mnist")
    with pytest.raises(ValueError, match="dataset must be one of"):
        reproduce("qu_training", "7", options)


@pytest.mark.parametrize(
    "dataset, family, shape", [("mnist", "mnist", (28, 28, 1)), ("cifar10", "cifar10", (32, 32, 3))]
)
def test_a_prepared_tfds_dataset_takes_the_papers_training(dataset, family, shape):
    # --dataset with --data_dir reads tensorflow-datasets (mocked here, offline) and trains
    # with the paper's model, epochs and learning rate (Table I) instead of the stand-ins'.
    options = Options("calibrated", "unused", dataset=dataset, data_dir="unused")
    with tfds.testing.mock_data(num_examples=600):
        images, setting = qu_training.load_images(options, family)
    assert images.x.shape[0] == 50 and tuple(images.x.shape[2:]) == shape
    assert setting == qu_training.PAPER[family]
    for client in range(50):
        held = np.unique(np.asarray(images.y[client, : int(images.counts[client])]))
        assert held.size == 2
