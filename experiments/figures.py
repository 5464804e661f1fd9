"""Shared pieces of the training reproductions: running policies, plotting, numbers.

The training figures run offline on small datasets of `fedjax_sel.data` (scikit-learn's
digits, Gaussian-mixture images) with the papers' models from `models`; each figure
module says which dataset of the paper its setting replaces. `Options.dataset` re-runs
a figure on another dataset, e.g. a prepared tfds one (`load_data`).
"""

from __future__ import annotations

import numpy as np

import fedjax_sel
from fedjax_sel import data, fl
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.data.sources import TFDS_DATASETS
from fedjax_sel.plot import pyplot, save
from fedjax_sel.results import Results

# Datasets a figure on the digits may be re-run on (`Options.dataset`).
DIGITS_DATASETS = ("digits", "mnist", "fashion_mnist", "emnist", "cifar10")


def load_data(options, default: str, num_clients: int, partition: str, **kw) -> FederatedData:
    """`data.load` of `options.dataset` (from `options.data_dir` for tfds) or of `default`."""
    name = options.dataset or default
    if name in TFDS_DATASETS:
        kw["data_dir"] = options.data_dir
    return data.load(name, num_clients, partition, seed=options.seed, **kw)


def run_policies(policies, env, options, rounds: int, trials: int, config: dict) -> Results:
    """Simulates every policy on the same environment draws (common random numbers)."""
    return fedjax_sel.simulate(
        policies,
        env,
        num_rounds=options.num_rounds or rounds,
        num_trials=options.num_trials or trials,
        seed=options.seed,
        config=config,
        progress=None,
    )


def final_accuracy(results: Results, policy: str, last: int = 5) -> float:
    """Mean test accuracy over the last `last` rounds (smooths round-to-round jitter)."""
    return float(np.mean(results.curves[policy]["accuracy"]["mean"][-last:]))


def time_to(results: Results, policy: str, target: float) -> float:
    """`fl.time_to_accuracy`, with infinity where the target is never reached."""
    t = fl.time_to_accuracy(results, policy, target)
    return float("inf") if t is None else t


def plot_accuracy(results: Results, path: str, title: str, time_axis: bool) -> None:
    """Test accuracy against rounds (and against wall-clock time) per policy."""
    panels = 2 if time_axis else 1
    fig, axes = pyplot().subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False)
    fedjax_sel.plot(results, "accuracy", ax=axes[0, 0], title=title, ylabel="test accuracy")
    if time_axis:
        fedjax_sel.plot(
            results,
            "accuracy",
            ax=axes[0, 1],
            title="",
            x="cumulative_latency",
            bands=False,
            xlabel="wall-clock time (s)",
            ylabel="test accuracy",
            legend=False,
        )
    save(fig, path)
