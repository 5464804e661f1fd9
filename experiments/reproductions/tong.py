"""Tong et al.'s Figures 5(c)-12 and Table I on the bandit-only surrogate (spec §8.4).

Every figure runs `envs.opinion_surrogate` (N = 20, K = 5, clients 1-5 IID with quality 1,
the others non-IID with quality U(0.2, 0.6), sizes of spec A14, accuracy 0.60 at quality 0
and 0.88 at quality 1), not the MNIST training of the paper: the numbers compare the
policies' behaviour, and the accuracy scale is the surrogate's (calibrated so that the
optimal and random sets land near the paper's 88% and 75%). Settings: "calibrated" is
the warm-start surrogate (spec A12's default reading: the model keeps training across
slots; rate 0.13 fits Table I's optimal column, 0.7683 at t = 6 to 0.8515 at t = 19),
"literal" the stationary one (the reward a function of the set alone, Sec. III-C).

Accuracy is reported at the final slot and averaged over the slots (spec A25), gaps in
absolute points; Table I counts, per trial, the first slot at or above each target (T if
never, spec A26). The optimal solution is the set {1..5} (spec A24), which is the
surrogate's exact best set.
"""

from __future__ import annotations

import math
import os

import numpy as np

import bandits
from bandits.super_arms import DENSE_MAX_ARMS
from experiments.reproductions import Figure, Options
from experiments.tong_trials import run_trials
from fedjax_sel import envs
from fedjax_sel.plot import pyplot, save

K = 5
RATE = 0.13  # warm-start step fitted to Table I's optimal column
PAPER_FIRST_SET = (0, 1, 10, 15, 19)  # {1, 2, 11, 16, 20}
TARGETS = (0.75, 0.78, 0.82, 0.85)


def _env(options: Options, n: int = 20, success: float = 1.0):
    return envs.opinion_surrogate(
        n, K, success=success, warm_start=options.setting == "calibrated", rate=RATE
    )


def _quick_init(n: int, horizon: int):
    form = "dense" if math.comb(n, K) <= DENSE_MAX_ARMS else "compressed"
    return bandits.quick_init_ucb(n, K, form=form, horizon=horizon)


def _policies(names, n: int, horizon: int, seed: int) -> dict:
    makers = {
        "optimal": lambda: bandits.fixed(n, range(K)),
        "quick_init_ucb": lambda: _quick_init(n, horizon),
        "bp_ucb": lambda: bandits.bp_ucb(n, K, graph_seed=seed),
        "conventional_ucb": lambda: bandits.super_arm_ucb(n, K),
        "round_robin": lambda: bandits.set_round_robin(n, K, first_set=PAPER_FIRST_SET),
        "random": lambda: bandits.random(n, K),
    }
    return {name: makers[name]() for name in names}


def _run(
    options: Options, names, rounds: int, trials: int, n: int = 20, success=1.0, make_env=None
):
    """Runs the named policies for the figure's default (or the options') rounds and
    trials, each on `make_env(n, success, name)` (the surrogate of the setting if None:
    every policy on the same environment)."""
    rounds = options.num_rounds or rounds
    trials = options.num_trials or trials
    if make_env is None:
        surrogate = _env(options, n, success)
        make_env = lambda n, success, name: surrogate
    return rounds, {
        name: run_trials(
            policy, make_env(n, success, name), rounds, trials, seed=options.seed, targets=TARGETS
        )
        for name, policy in _policies(names, n, rounds, options.seed).items()
    }


def _accuracy(run) -> dict:
    return {"final": float(run.accuracy[-1]), "average": float(run.accuracy.mean())}


def _curves(runs, options: Options, figure: str, paper: str = "tong") -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, run in runs.items():
        ax.plot(np.arange(1, len(run.accuracy) + 1), run.accuracy, label=name)
    ax.set_xlabel("time slot")
    ax.set_ylabel("average prediction accuracy")
    ax.legend()
    path = os.path.join(options.output_dir, f"{paper}_fig{figure}_{options.setting}.png")
    return save(fig, path, dpi=120)


def run_fig5c(options: Options) -> dict:
    """Fig. 5(c): fixed sets; {1..5} best, {16..20} worst (below random)."""
    rounds, runs = _run(options, ("optimal", "random"), 200, 100)
    env = _env(options)
    trials = options.num_trials or 100
    runs["set_1"] = run_trials(bandits.fixed(20, range(15, 20)), env, rounds, trials)
    runs["set_2"] = run_trials(bandits.set_round_robin(20, K, num_sets=1), env, rounds, trials)
    runs["set_4"] = runs.pop("optimal")
    acc = {name: _accuracy(run) for name, run in runs.items()}
    avg = {name: a["average"] for name, a in acc.items()}
    return {
        "accuracy": acc,
        "figure_path": _curves(runs, options, "5c"),
        "holds": {
            "set_4_best": avg["set_4"] == max(avg.values()),
            "set_1_worst_below_random": avg["set_1"] == min(avg.values()),
        },
    }


def run_fig6(
    options: Options, make_env=None, rounds: int = 500, trials: int = 100, paper: str = "tong"
) -> dict:
    """Fig. 6: Quick-Init UCB selects clients 1-5 far more often (228.95 vs 90.34)."""
    rounds, runs = _run(options, ("quick_init_ucb",), rounds, trials, make_env=make_env)
    counts = runs["quick_init_ucb"].counts.mean(0)
    iid, non_iid = float(counts[:K].mean()), float(counts[K:].mean())
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(np.arange(1, 21), counts)
    ax.set_xlabel("client")
    ax.set_ylabel("average number of selections")
    path = save(fig, os.path.join(options.output_dir, f"{paper}_fig6_{options.setting}.png"), 120)
    return {
        "num_rounds": rounds,
        "selections_per_client": counts.tolist(),
        "iid_mean": iid,
        "non_iid_mean": non_iid,
        "paper": {"iid_mean": 228.95, "non_iid_mean": 90.34},
        "figure_path": path,
        "holds": {"iid_selected_more_than_153_percent_more": iid > 2.53 * non_iid},
    }


FA_POLICIES = ("optimal", "quick_init_ucb", "conventional_ucb", "round_robin", "random")
DA_POLICIES = ("optimal", "bp_ucb", "quick_init_ucb", "round_robin", "random")


def run_fig7(options: Options) -> dict:
    """Fig. 7 (FL&FA): Quick-Init 86.57% vs random 76.62%, 1.44% below optimal."""
    return fig7_numbers(options, _run(options, FA_POLICIES, 200, 100)[1], "7")


def _gap_to_optimal(options, runs, learner, claimed, figure, paper) -> tuple[dict, float, dict]:
    """(accuracies, final gap, numbers) of `learner` against "optimal" in `runs`, with the
    paper's `claimed` numbers; plots the curves."""
    acc = {name: _accuracy(run) for name, run in runs.items()}
    gap = acc["optimal"]["final"] - acc[learner]["final"]
    return (
        acc,
        gap,
        {
            "accuracy": acc,
            "gap_final": gap,
            "gap_average": acc["optimal"]["average"] - acc[learner]["average"],
            "paper": claimed,
            "figure_path": _curves(runs, options, figure, paper),
        },
    )


def fig7_numbers(options: Options, runs: dict, figure: str, paper: str = "tong") -> dict:
    """Fig. 7's numbers and claims from the runs of `FA_POLICIES`; plots them."""
    claimed = {"quick_init_ucb": 0.8657, "random": 0.7662, "gap": 0.0144}
    acc, gap, numbers = _gap_to_optimal(options, runs, "quick_init_ucb", claimed, figure, paper)
    return {
        **numbers,
        "holds": {
            "gap_below_1.44_points": gap < 0.0144,
            "order": acc["optimal"]["average"]
            > acc["quick_init_ucb"]["average"]
            > max(acc[p]["average"] for p in ("conventional_ucb", "round_robin", "random")),
        },
    }


def run_fig8(
    options: Options, make_env=None, rounds: int = 200, trials: int = 100, paper: str = "tong"
) -> dict:
    """Fig. 8: the beliefs of clients 1-5 converge in about 10 slots, and differ."""
    _, runs = _run(options, ("bp_ucb",), rounds, trials, make_env=make_env)
    belief = runs["bp_ucb"].belief[:, :K]
    tail = belief[len(belief) // 2 :]
    final = tail.mean(0)
    # Settled: every belief of clients 1-5 stays within its late noise band (4 standard
    # deviations of the per-slot mean over the second half, at least 0.01) from then on.
    band = np.maximum(4.0 * tail.std(0), 0.01)
    inside = np.all(np.abs(belief - final) <= band, axis=1)
    outside = np.flatnonzero(~inside)
    since = int(outside[-1]) + 2 if outside.size else 1
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for c in range(K):
        ax.plot(np.arange(1, len(belief) + 1), belief[:, c], label=f"client {c + 1}")
    ax.set_xlabel("time slot")
    ax.set_ylabel("average belief")
    ax.legend()
    path = save(fig, os.path.join(options.output_dir, f"{paper}_fig8_{options.setting}.png"), 120)
    return {
        "final_beliefs": final.tolist(),
        "settled_from_slot": since,
        "figure_path": path,
        "holds": {"converges_within_about_10_slots": since <= 15},
    }


def run_fig9(options: Options) -> dict:
    """Fig. 9 (FL&DA): BP-UCB 86.28% vs random 72.02%, < 3.12% below optimal."""
    return fig9_numbers(options, _run(options, DA_POLICIES, 200, 100)[1], "9")


def fig9_numbers(options: Options, runs: dict, figure: str, paper: str = "tong") -> dict:
    """Fig. 9's numbers and claims from the runs of `DA_POLICIES`; plots them."""
    claimed = {"bp_ucb": 0.8628, "random": 0.7202, "gap": 0.0312}
    acc, gap, numbers = _gap_to_optimal(options, runs, "bp_ucb", claimed, figure, paper)
    return {
        **numbers,
        "holds": {
            "gap_below_3.12_points": gap < 0.0312,
            "bp_ucb_slightly_below_quick_init": acc["bp_ucb"]["average"]
            <= acc["quick_init_ucb"]["average"],
        },
    }


def run_fig10(options: Options, make_env=None, rounds: int = 200, trials: int = 100) -> dict:
    """Fig. 10: theta in {1, 0.75, 0.5}: Quick-Init > BP-UCB, both fall with theta."""
    out = {}
    for theta in (1.0, 0.75, 0.5):
        names = ("quick_init_ucb", "bp_ucb")
        _, runs = _run(options, names, rounds, trials, success=theta, make_env=make_env)
        out[str(theta)] = {name: _accuracy(run) for name, run in runs.items()}
    qi = [out[s]["quick_init_ucb"]["average"] for s in out]
    bp = [out[s]["bp_ucb"]["average"] for s in out]
    return {
        "accuracy": out,
        "holds": {
            "quick_init_above_bp_ucb": all(a > b for a, b in zip(qi, bp, strict=True)),
            "both_decline_with_theta": bool(np.all(np.diff(qi) < 0) and np.all(np.diff(bp) < 0)),
        },
    }


def _over_n(options: Options, sizes, rounds: int, trials: int = 100, make_env=None) -> dict:
    out = {}
    for n in sizes:
        names = ("quick_init_ucb", "bp_ucb")
        _, runs = _run(options, names, rounds, trials, n=n, make_env=make_env)
        out[str(n)] = {name: _accuracy(run) for name, run in runs.items()}
    qi = [out[s]["quick_init_ucb"]["average"] for s in out]
    bp = [out[s]["bp_ucb"]["average"] for s in out]
    return {
        "accuracy": out,
        "holds": {
            "quick_init_above_bp_ucb": all(a > b for a, b in zip(qi, bp, strict=True)),
            "both_decrease_with_n": bool(np.all(np.diff(qi) < 0) and np.all(np.diff(bp) < 0)),
        },
    }


def run_fig11(options: Options, make_env=None, rounds: int = 200, trials: int = 100) -> dict:
    """Fig. 11: N in {20, 40, 60}, T = 200."""
    return _over_n(options, (20, 40, 60), rounds, trials, make_env)


def run_fig12(options: Options, make_env=None, rounds: int = 500, trials: int = 100) -> dict:
    """Fig. 12: N in {20, ..., 100}, T = 500; Quick-Init at N = 100 by the compressed form."""
    return _over_n(options, (20, 40, 60, 80, 100), rounds, trials, make_env)


PAPER_TABLE1 = {
    "optimal": (6.00, 7.00, 11.00, 19.00),
    "random": (40.24, 391.24, 500.00, 500.00),
    "quick_init_ucb": (9.92, 13.55, 26.42, 111.22),
    "bp_ucb": (14.09, 23.63, 57.95, 131.81),
}


def run_table1(options: Options, make_env=None, rounds: int = 500, trials: int = 100) -> dict:
    """Table I: slots to reach 0.75, 0.78, 0.82, 0.85 (T = 500)."""
    _, runs = _run(options, tuple(PAPER_TABLE1), rounds, trials, make_env=make_env)
    table = {
        name: {
            "slots": run.slots_to_target.mean(0).tolist(),
            "accuracy": run.accuracy_at_target.mean(0).tolist(),
        }
        for name, run in runs.items()
    }
    slots = {name: np.asarray(v["slots"]) for name, v in table.items()}
    return {
        "targets": list(TARGETS),
        "table": table,
        "paper": PAPER_TABLE1,
        "holds": {
            "optimal_then_quick_init_then_bp_ucb_then_random": bool(
                np.all(slots["optimal"] <= slots["quick_init_ucb"])
                and np.all(slots["quick_init_ucb"] <= slots["bp_ucb"])
                and np.all(slots["bp_ucb"] <= slots["random"])
            )
        },
    }


FIGURES = {
    "5c": Figure("Set {1..5} is best and {16..20} worst, below random.", run_fig5c),
    "6": Figure("Quick-Init selects IID clients 1-5 about 2.5x as often.", run_fig6),
    "7": Figure("FL&FA: Quick-Init within 1.44% of optimal, far above random.", run_fig7),
    "8": Figure("BP-UCB beliefs of clients 1-5 converge in about 10 slots.", run_fig8),
    "9": Figure("FL&DA: BP-UCB within 3.12% of optimal, slightly below Quick-Init.", run_fig9),
    "10": Figure("Quick-Init above BP-UCB for every theta; both fall with theta.", run_fig10),
    "11": Figure("Quick-Init above BP-UCB for N in {20,40,60}; both fall with N.", run_fig11),
    "12": Figure("Quick-Init above BP-UCB up to N = 100 (compressed form).", run_fig12),
    "table1": Figure("Time to accuracy: optimal < Quick-Init < BP-UCB << random.", run_table1),
}
