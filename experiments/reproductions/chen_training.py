"""Chen et al., MAB scheduling for decentralized FL: the training figures (Figs. 5 and 6).

Fig. 5 (MNIST, MLP) and Fig. 6 (CIFAR-10, CNN), decentralized FL over S = 3 fully
connected edge servers with N = 2 channels each and K = 18 clients: test accuracy and
training loss against training time; claim: the proposed delay-learning scheduler "can
achieve the best performance", i.e. reaches a given accuracy and a given loss in less
wall-clock time than epsilon-greedy and random (spec §6).

The four schedulers and the delay process are those of the delay figures
(`experiments.reproductions.chen`): the CC-MAB scheduler `bandits.dfl_ccmab` (calibrated
exploration scale c_E = 0.01, horizon = the run's rounds), per-server epsilon-greedy
(epsilon = 0.3) and random, and the oracle that knows the round's realised delays. The
delay environment `dfl_delay` (Sec. 7.1: fading channels, CPU activity and data-amount
contexts, tau_max = 5 s) drives the training environment (`delay_env`): it supplies the
contexts, the clients' delays and the time axis, while the selected clients train. The
amount of local data D_k(t) ~ U{1..D_k} of round t is both a context and what a
scheduled client trains on (`local_data="delay_env"`): one local epoch of minibatch SGD
(batch 64, plain SGD, lambda = 0.05 for MNIST and 0.02 for CIFAR-10; `Setting`) on a uniformly
random D_k(t) of its D_k examples, the same D_k(t) that sets its computation delay
s_k D_k(t) / (phi eta_k(t)) (eq. 11, spec A5-A6). D_k is the clients' shard (the smallest
one, so that every D_k(t) exists), and D_k(t) also weighs the client in the per-server
aggregation and the exact exchange between servers (eqs. 4-5, spec A6); late clients are
kept (the deadline only caps the time accounted, A9). The training loss is eq. (1),
F(g) = (1/K) sum_k F_k(g), the mean of the clients' mean losses on their training
examples (`loss_on="train"`); the accuracy is on the test set.

Data. Offline by default, stand-ins of the paper's datasets split IID and equally over
the 18 clients: for Fig. 5, scikit-learn's 8x8 digits (79-80 training images per client)
with the paper's MLP with 128 hidden units (`models` "mlp_128", 64-128-10 on these
images); for Fig. 6, Gaussian-mixture images of 16x16x3 (`data` "gaussian_mixture",
noise 1.5, 40 per client, 300 test images; minibatches of 4, `STAND_INS`) with the
paper's CNN (`models` "cnn_cifar10_small": two 5x5 convolutions of 16 and 20 channels,
596 hidden units; 313,802 parameters on 32x32x3). Smaller shards mean smaller D_k(t),
so the stand-ins' computation delays (and time axes) are about 40 (digits) and 70
(mixture) times shorter than the paper's. `--dataset` names the
paper's prepared tfds dataset instead (`mnist` or `fashion_mnist` for Fig. 5, `cifar10`
for Fig. 6, read from `--data_dir`), 3333 or 2777 training images per client as in the
paper, with `PAPER`'s local training (and its 2000 rounds and 3 trials unless
`--num_rounds` and `--num_trials` say otherwise).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

import fedjax_sel
import models
from experiments.figures import final_accuracy, load_data, run_policies, time_to
from experiments.reproductions import Figure, Options
from experiments.reproductions.chen import NUM_SERVERS, PER_SERVER, policies
from fedjax_sel import envs, fl
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.plot import pyplot, save
from fedjax_sel.results import Results

NUM_CLIENTS = 18
# The target of the time-to claims: this fraction of the lowest final accuracy, and this
# multiple of the highest final loss, over the four schedulers.
TARGET_FRACTION = 0.95
LOSS_MARGIN = 1.05
FIG5_DATASETS = ("digits", "mnist", "fashion_mnist")
FIG6_DATASETS = ("gaussian_mixture", "cifar10")


class Setting(NamedTuple):
    """Local training and run length of one figure.

    Attributes:
      model: name in `models.REGISTRY`.
      learning_rate: lambda, the local SGD step size.
      batch_size: local minibatch size.
      rounds: rounds of the run.
      trials: Monte Carlo trials.
    """

    model: str
    learning_rate: float
    batch_size: int
    rounds: int
    trials: int


# Sec. 7.1: batch 64, the MLP at lambda = 0.05 (MNIST), the CNN at 0.02 (CIFAR-10), T = 2000.
PAPER = {
    "5": Setting("mlp_128", 0.05, 64, 2000, 3),
    "6": Setting("cnn_cifar10_small", 0.02, 64, 2000, 3),
}
# The CNN stand-in takes minibatches of 4 (up to 10 steps a round; the paper's batch of 64
# makes its D_k(t) <= 40 examples one step) on images of noise 1.5: at noise 2 to 4 this
# CNN stays near chance level for 40-100 rounds, at noise 1 it is perfect in 10.
STAND_INS = {
    "5": Setting("mlp_128", 0.05, 64, 150, 4),
    "6": Setting("cnn_cifar10_small", 0.02, 4, 60, 2),
}
_MIXTURE = {
    "image_shape": (16, 16, 3),
    "noise": 1.5,
    "num_train": 40 * NUM_CLIENTS,
    "num_test": 300,
}


def load_images(options: Options, figure: str) -> tuple[FederatedData, Setting]:
    """The clients' IID shards of `figure`'s data (`options.dataset` or the stand-in)."""
    if figure == "5":
        images = load_data(options, "digits", NUM_CLIENTS, "iid")
        stand_in = options.dataset in (None, "digits")
    else:
        stand_in = options.dataset in (None, "gaussian_mixture")
        images = load_data(
            options, "gaussian_mixture", NUM_CLIENTS, "iid", **(_MIXTURE if stand_in else {})
        )
    return images, (STAND_INS if stand_in else PAPER)[figure]


def _model(images: FederatedData, setting: Setting) -> models.Model:
    """The setting's classifier for the images' shape and classes."""
    return models.get(setting.model, images.x.shape[2:], images.num_classes)


def training_env(images: FederatedData, setting: Setting) -> fedjax_sel.Env:
    """DFL training on `images`, each scheduled client on its round's D_k(t) examples."""
    shard = int(np.min(images.counts))
    delays = envs.make(
        "dfl_delay", NUM_CLIENTS, PER_SERVER, num_servers=NUM_SERVERS, shard_size=shard
    )
    return envs.make(
        "training",
        NUM_CLIENTS,
        NUM_SERVERS * PER_SERVER,
        data=images,
        model=_model(images, setting),
        algorithm="decentralized",
        num_groups=NUM_SERVERS,
        learning_rate=setting.learning_rate,
        batch_size=setting.batch_size,
        num_epochs=1,
        delay_env=delays,
        local_data="delay_env",
        loss_on="train",
    )


def final_loss(results: Results, policy: str, last: int = 5) -> float:
    """Mean training loss over the last `last` rounds."""
    return float(np.mean(results.curves[policy]["loss"]["mean"][-last:]))


def time_to_loss(results: Results, policy: str, target: float) -> float:
    """`fl.time_to_loss`, with infinity where the target is never reached."""
    t = fl.time_to_loss(results, policy, target)
    return float("inf") if t is None else t


def _plot(results: Results, path: str, title: str) -> None:
    """Test accuracy and training loss against wall-clock time, as in Figs. 5 and 6."""
    fig, (left, right) = pyplot().subplots(1, 2, figsize=(11, 4))
    for ax, metric, label in (
        (left, "accuracy", "test accuracy"),
        (right, "loss", "training loss"),
    ):
        fedjax_sel.plot(
            results,
            metric,
            ax=ax,
            title="",
            x="cumulative_latency",
            bands=False,
            xlabel="training time (s)",
            ylabel=label,
            legend=ax is left,
        )
    fig.suptitle(title)
    save(fig, path)


def _figure(options: Options, figure: str) -> dict:
    images, setting = load_images(options, figure)
    env = training_env(images, setting)
    rounds = options.num_rounds or setting.rounds
    selectors = policies(NUM_CLIENTS, rounds, "calibrated")
    dataset = options.dataset or ("digits" if figure == "5" else "gaussian_mixture")
    config = {"figure": figure, "dataset": dataset}
    results = run_policies(selectors, env, options, setting.rounds, setting.trials, config)
    accuracy = {p: final_accuracy(results, p) for p in selectors}
    loss = {p: final_loss(results, p) for p in selectors}
    target_accuracy = TARGET_FRACTION * min(accuracy.values())
    target_loss = LOSS_MARGIN * max(loss.values())
    to_accuracy = {p: time_to(results, p, target_accuracy) for p in selectors}
    to_loss = {p: time_to_loss(results, p, target_loss) for p in selectors}
    others = ("epsilon_greedy", "random")
    accuracy_faster = all(to_accuracy["proposed"] < to_accuracy[p] for p in others)
    loss_faster = all(to_loss["proposed"] < to_loss[p] for p in others)
    path = os.path.join(options.output_dir, f"chen_training_fig{figure}_{options.setting}.png")
    _plot(results, path, f"Chen Fig. {figure} ({dataset}, DFL, {results.num_trials} trials)")
    delay = {p: results.final(p, "cumulative_latency")[0] for p in selectors}
    return {
        "dataset": dataset,
        "model": setting.model,
        "learning_rate": setting.learning_rate,
        "batch_size": setting.batch_size,
        "shard_size": int(np.min(images.counts)),
        "num_rounds": rounds,
        "final_accuracy": accuracy,
        "final_training_loss": loss,
        "training_time_s": delay,
        "target_accuracy": target_accuracy,
        "target_training_loss": target_loss,
        "time_to_target_accuracy_s": to_accuracy,
        "time_to_target_loss_s": to_loss,
        "accuracy_holds": bool(accuracy_faster),
        "loss_holds": bool(loss_faster),
        "holds": bool(accuracy_faster and loss_faster),
    }


CLAIM = (
    "The delay-learning scheduler reaches a given test accuracy and a given training loss in "
    "less wall-clock time than epsilon-greedy and random scheduling"
)
FIGURES = {
    "5": Figure(
        claim=f"{CLAIM} (MNIST, MLP).",
        run=lambda options: _figure(options, "5"),
        settings=("calibrated",),
        datasets=FIG5_DATASETS,
    ),
    "6": Figure(
        claim=f"{CLAIM} (CIFAR-10, CNN).",
        run=lambda options: _figure(options, "6"),
        settings=("calibrated",),
        datasets=FIG6_DATASETS,
    ),
}
