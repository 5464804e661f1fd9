"""Huang et al., RBCS-F: the figures with real training (Sec. 6.2, Figs. 5, 6 and 7).

Common setting (spec §5.2 proposals): N = 40 clients, every client available with
probability 0.8, FedAvg weighted by sample count, one local epoch of plain SGD, clients'
label proportions q_i ~ Dir(gamma_1) with a fixed number of examples each (Hsu et al.,
the Dirichlet partitioner in the spec's per-client reading, overlap between clients
allowed), or an i.i.d. disjoint split for "gamma_1 = iid".

Fig. 5 (panels a-c: Fashion-MNIST with gamma_1 = 1, 10, iid; d-f: CIFAR-10 with the
same gamma_1): m = 8 clients selected at random with probabilities q' ~ Dir(gamma_2 * 1),
drawn once per run; gamma_2 in {0.1, 1, 10} next to uniform random. Claim: a higher
gamma_2 (fairer selection) gives a higher final accuracy (spec §6.1).

Figs. 6 and 7 (the six panels of Fig. 5: Fashion-MNIST or CIFAR-10, gamma_1 = 1, 10,
iid): RBCS-F(V) for V in {1, 10, 20, 50, 100} (the spec's sweep; the paper names only
20 and 50, in Figs. 7(e)-(f)), random and FedCS(3) select the clients, as in the
numerical study of `experiments.reproductions.huang`, and the exchange-time model of
Sec. 6.1 (`envs.exchange_time`, Table I, m = 8, beta = 0.15) drives the training
environment as its `delay_env`: it gives each round's availability and contexts (which
RBCS-F and FedCS(3) need), the clients' exchange times and the round time f(S_t, tau_t),
whose cumulative sum is the time axis of Fig. 7 (spec §5.2). FedCS(3) has no cap at m
(spec §4.1); its cohort never exceeded 14 in 10^5 simulated rounds, so the training
environment has 16 cohort slots and trains every client a policy selects. Fig. 6:
accuracy against rounds; Fig. 7: against time; panel x of both is one run.

Offline stand-ins (the default, calibrated): Gaussian-mixture images (`fedjax_sel.data`
"gaussian_mixture", noise 4) of 16x16x1 pixels with the paper's Fashion-MNIST CNN
(`models` "cnn_mnist", which needs at least 16x16) for Fashion-MNIST, and of 16x16x3
pixels with the paper's CIFAR-10 CNN ("cnn_cifar10": its layers and widths, but 64
flattened features instead of 1,600, as a round on 32x32x3 images takes ~20 s on two
CPU cores) for CIFAR-10; 50 examples per client instead of 500, batch 10, learning
rate 0.003 (0.01 diverges on these unnormalised pixels); Fig. 5: 50 rounds x 3 trials
(Fashion-MNIST stand-in) and 25 rounds x 2 trials (CIFAR-10 stand-in), Figs. 6-7: 50
and 25 rounds x 2 trials, instead of the spec's 500 and 1,000 rounds.

`Options.dataset` names a prepared tfds dataset instead: then the paper's images
(28x28x1 or 32x32x3), the CNN that fits them (`cnn_cifar10` for three channels, else
`cnn_mnist`), 500 examples per client, batch 50 and learning rate 0.01 (0.05 for
CIFAR-10), as the spec proposes.
"""

from __future__ import annotations

import functools
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import bandits
import models
from experiments.figures import final_accuracy, plot_accuracy, run_policies, time_to
from experiments.reproductions import Figure, Options
from fedjax_sel import data, envs, fl, validation
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.data.sources import TFDS_DATASETS
from fedjax_sel.ops import gumbel_top_k
from fedjax_sel.results import Results
from fedjax_sel.types import Decision, Env, Selector

NUM_CLIENTS, NUM_SELECTED, FAIRNESS_RATE = 40, 8, 0.15
GAMMA_2 = (0.1, 1.0, 10.0)
PENALTY_WEIGHTS = (1, 10, 20, 50, 100)
# Cohort slots of the Figs. 6-7 training environment: FedCS(3) selects a varying number.
FEDCS_SLOTS = 16
# Datasets `Options.dataset` may name (images of at least 16x16 for the CNNs).
DATASETS = ("gaussian_mixture", "fashion_mnist", "mnist", "emnist", "cifar10")


class Setting(NamedTuple):
    """Data and local training of one image family.

    Attributes:
      image_shape: (height, width, channels) of the stand-in images, None for tfds.
      model: name in `models.REGISTRY`.
      learning_rate: local SGD step size.
      batch_size: local minibatch size.
      samples_per_client: examples per client.
    """

    image_shape: tuple[int, int, int] | None
    model: str
    learning_rate: float
    batch_size: int
    samples_per_client: int


STAND_INS = {
    "fashion_mnist": Setting((16, 16, 1), "cnn_mnist", 0.003, 10, 50),
    "cifar10": Setting((16, 16, 3), "cnn_cifar10", 0.003, 10, 50),
}
PAPER = {
    "fashion_mnist": Setting(None, "cnn_mnist", 0.01, 50, 500),
    "cifar10": Setting(None, "cnn_cifar10", 0.05, 50, 500),
}
# Default rounds and trials of Fig. 5 and of Figs. 6-7 per family (the CIFAR-10 CNN is
# ~4x slower).
FIG5_RUNS = {"fashion_mnist": (50, 3), "cifar10": (25, 2)}
SELECTION_RUNS = {"fashion_mnist": (50, 2), "cifar10": (25, 2)}
# Figs. 7(e)-(f): "RBCS-F(20) outperforms RBCS-F(50) during the whole training process".
TIME_PANELS_20_VS_50 = ("e", "f")
# Figs. 6(e)-(f): RBCS-F beats FedCS(3) in round efficiency, "conspicuously" there.
ROUND_PANELS_VS_FEDCS = ("e", "f")
# The panels of Figs. 5, 6 and 7: the paper's dataset and gamma_1 (None: the i.i.d. split).
PANELS = {
    "a": ("fashion_mnist", 1.0),
    "b": ("fashion_mnist", 10.0),
    "c": ("fashion_mnist", None),
    "d": ("cifar10", 1.0),
    "e": ("cifar10", 10.0),
    "f": ("cifar10", None),
}


def dirichlet_biased(num_clients: int, num_selected: int, concentration: float) -> Selector:
    """Huang et al. §6.2.2: sample k available clients with probabilities q' ~ Dir(gamma_2).

    q' is drawn once per trial (policy init); each round draws k available clients
    without replacement with probability proportional to q' (Gumbel-top-k).
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    gamma = validation.positive_float("concentration", concentration)

    def init(key):
        q = jax.random.dirichlet(key, jnp.full((n,), gamma))
        return jnp.log(jnp.maximum(q, 1e-30))

    def select(state, inp, key):
        return Decision(gumbel_top_k(state, inp.available, k, key)), state

    def update(state, decision, feedback):
        del decision, feedback
        return state

    return Selector(init=init, select=select, update=update)


def load_images(
    options: Options, family: str, gamma_1: float | None
) -> tuple[FederatedData, Setting]:
    """The clients' images of one panel: the offline stand-in, or `options.dataset`.

    Args:
      options: the run's options; `dataset` (one of `DATASETS`) and `data_dir`.
      family: "fashion_mnist" or "cifar10", the paper's dataset of the panel.
      gamma_1: Dirichlet concentration of the label proportions; None for i.i.d.

    Returns:
      The federated data and the local-training setting that goes with it.
    """
    name = options.dataset or "gaussian_mixture"
    if name == "gaussian_mixture":
        setting = STAND_INS[family]
        source = {"image_shape": setting.image_shape, "noise": 4.0}
    else:
        setting = PAPER["cifar10" if name == "cifar10" else "fashion_mnist"]
        source = {"data_dir": options.data_dir} if name in TFDS_DATASETS else {}
    m = setting.samples_per_client
    if gamma_1 is None:
        split = {"partition": "iid", "sizes": [m] * NUM_CLIENTS}
    else:
        split = {
            "partition": "dirichlet",
            "alpha": gamma_1,
            "mode": "per_client",
            "samples_per_client": m,
        }
    images = data.load(name, NUM_CLIENTS, seed=options.seed, **source, **split)
    return images, setting


def _model(images: FederatedData, setting: Setting) -> models.Model:
    return models.get(setting.model, images.x.shape[2:], images.num_classes)


def _training_env(images, setting, num_selected: int, **kwargs) -> Env:
    return envs.make(
        "training",
        NUM_CLIENTS,
        num_selected,
        data=images,
        model=_model(images, setting),
        algorithm="fedavg",
        learning_rate=setting.learning_rate,
        batch_size=setting.batch_size,
        num_epochs=1,
        **kwargs,
    )


def _gamma_label(gamma_1: float | None) -> str:
    return "iid" if gamma_1 is None else f"{gamma_1:g}"


def _dataset_label(options: Options, family: str) -> str:
    if options.dataset in (None, "gaussian_mixture"):
        return "stand-in " + "x".join(map(str, STAND_INS[family].image_shape))
    return options.dataset


def _fig5(panel: str, options: Options) -> dict:
    family, gamma_1 = PANELS[panel]
    images, setting = load_images(options, family, gamma_1)
    env = _training_env(images, setting, NUM_SELECTED, feedback="accuracy", availability=0.8)
    policies = {f"dirichlet_{g:g}": dirichlet_biased(NUM_CLIENTS, NUM_SELECTED, g) for g in GAMMA_2}
    policies["random"] = bandits.random(NUM_CLIENTS, NUM_SELECTED)
    config = {"figure": f"5{panel}", "dataset": options.dataset or "gaussian_mixture"}
    rounds, trials = FIG5_RUNS[family]
    results = run_policies(policies, env, options, rounds=rounds, trials=trials, config=config)
    final = {p: final_accuracy(results, p, last=10) for p in policies}
    ordered = [final[f"dirichlet_{g:g}"] for g in GAMMA_2]
    monotone = all(a < b for a, b in zip(ordered[:-1], ordered[1:], strict=True))
    path = os.path.join(options.output_dir, f"huang_training_fig5{panel}_{options.setting}.png")
    title = (
        f"Huang Fig. 5({panel}): {_dataset_label(options, family)}, "
        f"gamma_1 = {_gamma_label(gamma_1)}"
    )
    plot_accuracy(results, path, title, time_axis=False)
    return {
        "final_accuracy": final,
        "dataset": options.dataset or "gaussian_mixture",
        "model": _model(images, setting).name,
        "gamma_1": _gamma_label(gamma_1),
        "num_rounds": results.num_rounds,
        "num_trials": results.num_trials,
        "increasing_in_gamma_2": monotone,
        "holds": bool(monotone),
    }


def _rbcs(v: int) -> str:
    return f"RBCS-F({v})"


def exchange_time_training(images: FederatedData, setting: Setting) -> Env:
    """Training driven by Huang's exchange-time model (Sec. 6.1) as the `delay_env`."""
    delays = envs.exchange_time(
        NUM_CLIENTS, NUM_SELECTED, availability=0.8, fairness_rate=FAIRNESS_RATE
    )
    return _training_env(images, setting, FEDCS_SLOTS, delay_env=delays)


def selection_policies() -> dict[str, Selector]:
    """RBCS-F(V) for V in `PENALTY_WEIGHTS`, random and FedCS(3) (spec §4.1)."""
    truth = envs.true_coefficients(NUM_CLIENTS, "2")
    policies = {
        _rbcs(v): bandits.rbcs_f(
            NUM_CLIENTS, NUM_SELECTED, penalty_weight=v, fairness_rate=FAIRNESS_RATE
        )
        for v in PENALTY_WEIGHTS
    }
    policies["random"] = bandits.random(NUM_CLIENTS, NUM_SELECTED)
    policies["FedCS(3)"] = bandits.fedcs(NUM_CLIENTS, NUM_SELECTED, truth, deadline_s=3.0)
    return policies


@functools.lru_cache(maxsize=2)
def _selection_results(panel: str, options: Options) -> Results:
    """The run behind panel `panel` of Figs. 6 and 7, shared by the two within a process."""
    family, gamma_1 = PANELS[panel]
    images, setting = load_images(options, family, gamma_1)
    env = exchange_time_training(images, setting)
    config = {"figure": f"6-7{panel}", "dataset": options.dataset or "gaussian_mixture"}
    rounds, trials = SELECTION_RUNS[family]
    return run_policies(
        selection_policies(), env, options, rounds=rounds, trials=trials, config=config
    )


def _selection_numbers(panel: str, options: Options, results: Results) -> dict:
    """Final accuracies, times to two targets and totals behind Figs. 6 and 7."""
    policies = results.policies
    final = {p: final_accuracy(results, p, last=10) for p in policies}
    low, high = 0.5 * min(final.values()), 0.9 * min(final.values())
    return {
        "dataset": options.dataset or "gaussian_mixture",
        "gamma_1": _gamma_label(PANELS[panel][1]),
        "num_rounds": results.num_rounds,
        "num_trials": results.num_trials,
        "final_accuracy": final,
        "target_accuracy": {"low": low, "high": high},
        "rounds_to_target": {
            p: {
                "low": fl.rounds_to_accuracy(results, p, low),
                "high": fl.rounds_to_accuracy(results, p, high),
            }
            for p in policies
        },
        "time_to_target_s": {
            p: {"low": time_to(results, p, low), "high": time_to(results, p, high)}
            for p in policies
        },
        "total_time_s": {p: results.final(p, "cumulative_latency")[0] for p in policies},
        # Clients selected per round, the sum of the selection fractions.
        "mean_cohort": {p: float(np.sum(results.selection_fraction[p])) for p in policies},
    }


def _title(figure: str, panel: str, options: Options) -> str:
    family, gamma_1 = PANELS[panel]
    return (
        f"Huang Fig. {figure}({panel}): {_dataset_label(options, family)}, "
        f"gamma_1 = {_gamma_label(gamma_1)}"
    )


def _fig6(panel: str, options: Options) -> dict:
    """Fig. 6: test accuracy against rounds under RBCS-F(V), random and FedCS(3)."""
    results = _selection_results(panel, options)
    numbers = _selection_numbers(panel, options, results)
    final = numbers["final_accuracy"]
    by_v = [final[_rbcs(v)] for v in PENALTY_WEIGHTS]
    others = [p for p in final if p != "FedCS(3)"]
    numbers["smaller_v_higher_accuracy"] = bool(np.all(np.diff(by_v) < 0))
    numbers["random_best"] = bool(final["random"] >= max(final.values()))
    numbers["fedcs_worst"] = bool(final["FedCS(3)"] < min(final[p] for p in others))
    rounds = {p: numbers["rounds_to_target"][p]["high"] for p in final}
    by_v_rounds = [rounds[_rbcs(v)] for v in PENALTY_WEIGHTS]
    numbers["higher_v_more_rounds"] = bool(
        all(r is not None for r in by_v_rounds) and np.all(np.diff(by_v_rounds) >= 0)
    )
    # Never reaching the target counts as more rounds than any that does.
    never = results.num_rounds + 1
    numbers["rbcs_f_fewer_rounds_than_fedcs"] = bool(
        all((rounds[_rbcs(v)] or never) < (rounds["FedCS(3)"] or never) for v in PENALTY_WEIGHTS)
    )
    claims = ["smaller_v_higher_accuracy", "random_best", "fedcs_worst"]
    if panel in ROUND_PANELS_VS_FEDCS:
        claims.append("rbcs_f_fewer_rounds_than_fedcs")
    return _plotted(numbers, results, claims, "6", panel, options)


def _plotted(numbers, results, claims, figure, panel, options) -> dict:
    """`numbers` with "holds" (every one of `claims`), after plotting Fig. `figure`
    ("6": accuracy against rounds, "7": against time, titled as Figs. 6-7) of `panel`."""
    path = os.path.join(
        options.output_dir, f"huang_training_fig{figure}{panel}_{options.setting}.png"
    )
    title = _title("6" if figure == "6" else "6-7", panel, options)
    plot_accuracy(results, path, title, time_axis=figure == "7")
    numbers["holds"] = all(numbers[c] for c in claims)
    return numbers


def _rbcs_20_ahead_of_50(results: Results) -> tuple[list[float], dict, bool]:
    """Figs. 7(e)-(f): RBCS-F(20) reaches every accuracy level no later than RBCS-F(50).

    "During the whole training process" is read on ten levels evenly spaced up to the
    lower of the two final accuracies; returns the levels, each policy's times to them
    and whether the claim holds.
    """
    top = min(final_accuracy(results, _rbcs(v), last=10) for v in (20, 50))
    levels = np.linspace(0.1, 1.0, 10) * top
    times = {_rbcs(v): [time_to(results, _rbcs(v), a) for a in levels] for v in (20, 50)}
    ahead = all(a <= b for a, b in zip(times[_rbcs(20)], times[_rbcs(50)], strict=True))
    return levels.tolist(), times, bool(ahead)


def _fig7(panel: str, options: Options) -> dict:
    """Fig. 7: test accuracy against the cumulative simulated round time."""
    results = _selection_results(panel, options)
    numbers = _selection_numbers(panel, options, results)
    times = numbers["time_to_target_s"]
    rbcs = [_rbcs(v) for v in PENALTY_WEIGHTS]
    numbers["fedcs_fastest_at_low_accuracy"] = bool(
        all(times["FedCS(3)"]["low"] < times[p]["low"] for p in times if p != "FedCS(3)")
    )
    numbers["random_slowest"] = bool(
        all(times["random"]["high"] > times[p]["high"] for p in times if p != "random")
    )
    numbers["rbcs_f_between"] = bool(
        all(times["FedCS(3)"]["high"] < times[p]["high"] < times["random"]["high"] for p in rbcs)
    )
    levels, times, ahead = _rbcs_20_ahead_of_50(results)
    numbers["levels_20_vs_50"] = levels
    numbers["time_to_levels_s"] = times
    numbers["rbcs_f_20_ahead_of_50"] = ahead
    claims = ["fedcs_fastest_at_low_accuracy", "random_slowest", "rbcs_f_between"]
    if panel in TIME_PANELS_20_VS_50:
        claims.append("rbcs_f_20_ahead_of_50")
    return _plotted(numbers, results, claims, "7", panel, options)


def _panel(panel: str) -> str:
    family, gamma_1 = PANELS[panel]
    return f"Panel ({panel}): {family}, gamma_1 = {_gamma_label(gamma_1)}."


_FIG5_CLAIM = "Fairer selection (higher gamma_2) gives a higher final accuracy on non-i.i.d. data."
_FIG6_CLAIM = (
    "In rounds, a smaller V gives RBCS-F a higher final accuracy; random selection reaches "
    "the best final accuracy and FedCS(3) the worst."
)
_FIG6_EF_CLAIM = " RBCS-F reaches a given accuracy in fewer rounds than FedCS(3)."
_FIG7_CLAIM = (
    "In training time, FedCS(3) is fastest while accuracy is low, random slowest, and "
    "RBCS-F between them."
)
_FIG7_EF_CLAIM = " RBCS-F(20) is ahead of RBCS-F(50) during the whole training."


def _panels(figure, claim, remark, remark_panels, run) -> dict[str, Figure]:
    """Figure `figure`'s panels (a)-(f): its `claim`, with the paper's `remark` added in
    `remark_panels`, each run by `run(panel, options)`."""
    return {
        f"{figure}{panel}": Figure(
            claim=claim + (remark if panel in remark_panels else "") + f" {_panel(panel)}",
            run=functools.partial(run, panel),
            settings=("calibrated",),
            datasets=DATASETS,
        )
        for panel in PANELS
    }


FIGURES = {
    **_panels("5", _FIG5_CLAIM, "", (), _fig5),
    **_panels("6", _FIG6_CLAIM, _FIG6_EF_CLAIM, ROUND_PANELS_VS_FEDCS, _fig6),
    **_panels("7", _FIG7_CLAIM, _FIG7_EF_CLAIM, TIME_PANELS_20_VS_50, _fig7),
}
