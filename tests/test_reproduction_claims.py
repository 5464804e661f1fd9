"""Figure claims evaluated on hand-made curves (the reproductions' simulation replaced):
each part of a figure's claim takes part in its `holds` (Qu et al. Figs. 3 and 4(b), Xia
et al. Fig. 2 with training)."""

import numpy as np
import pytest

from experiments.reproductions import Options, qu, xia_training
from fedjax_sel.results import Results

T, M = 400, 4


def _results(per_round: dict[str, float], regret: dict[str, np.ndarray]) -> Results:
    """Trials with the same constant utility a round per policy, and the given mean
    cumulative regret curves."""
    t = np.arange(1, T + 1, dtype=np.float64)
    curves, totals = {}, {}
    for p, u in per_round.items():
        curves[p] = {
            "cumulative_reward": {"mean": u * t, "std": np.zeros(T)},
            "cumulative_regret": {"mean": regret[p], "std": np.zeros(T)},
            "reward": {"mean": np.full(T, u), "std": np.zeros(T)},
        }
        totals[p] = {
            "cumulative_reward": u * T + np.arange(M) * 1e-3,
            "cumulative_regret": regret[p][-1] + np.zeros(M),
        }
    return Results({"num_trials": M, "num_rounds": T}, curves, totals, {})


UTILITY = {"oracle": 5.0, "cocs": 4.5, "linucb": 4.0, "cucb": 3.0, "random": 2.0}


def _regrets(cocs: np.ndarray) -> dict[str, np.ndarray]:
    t = np.arange(1, T + 1, dtype=np.float64)
    regret = {p: (5.0 - u) * t for p, u in UTILITY.items()}
    regret["cocs"] = cocs
    return regret


@pytest.mark.parametrize(
    "utility, cocs_regret, holds",
    [
        (UTILITY, 30.0 * np.sqrt(np.arange(1, T + 1)), True),
        # A linear regret with an offset: its log-log slope over the second half is 0.27,
        # which the earlier test (slope < 1) called sub-linear.
        (UTILITY, 400.0 + 0.5 * np.arange(1, T + 1), False),
        # The oracle below COCS: the claim's first part fails.
        ({**UTILITY, "oracle": 4.2}, 30.0 * np.sqrt(np.arange(1, T + 1)), False),
    ],
)
def test_fig3_holds_needs_the_oracle_highest_and_a_sublinear_regret(
    utility, cocs_regret, holds, tmp_path, monkeypatch
):
    res = _results(utility, _regrets(cocs_regret))
    monkeypatch.setattr(qu, "_run", lambda *a, **k: res)
    numbers = qu.run_fig3(Options(setting="calibrated", output_dir=str(tmp_path)))
    assert numbers["holds"] is holds, numbers


@pytest.mark.parametrize("random_late, holds", [(2.0, True), (3.5, False)])
def test_fig4b_holds_needs_random_lowest(random_late, holds, tmp_path, monkeypatch):
    res = _results(UTILITY, _regrets(np.zeros(T)))
    res.curves["random"]["reward"]["mean"] = np.full(T, random_late)  # above CUCB's 3.0
    res.curves["cocs"]["reward"]["mean"] = np.linspace(4.0, 4.6, T)  # rises
    monkeypatch.setattr(qu, "_run", lambda *a, **k: res)
    numbers = qu.run_fig4b(Options(setting="calibrated", output_dir=str(tmp_path)))
    assert numbers["holds"] is holds, numbers


@pytest.mark.parametrize("local_final, holds", [(0.88, True), (0.60, False)])
def test_xia_fig2_holds_compares_cs_ucb_with_local_accuracy_too(
    local_final, holds, tmp_path, monkeypatch
):
    # "CS-UCB converges in rounds like random, round robin and local-accuracy scheduling":
    # a local-accuracy curve far below CS-UCB's fails it (the check left it out).
    rounds = 300
    t = np.arange(1, rounds + 1, dtype=np.float64)
    ends = {"cs_ucb": 0.9, "random": 0.9, "round_robin": 0.9, "local_accuracy": local_final}
    seconds = {"cs_ucb": 0.3, "random": 0.5, "round_robin": 0.45, "local_accuracy": 0.6}
    curves = {
        p: {
            "accuracy": {"mean": end * (1 - np.exp(-t / 30)), "std": np.zeros(rounds)},
            "cumulative_latency": {"mean": seconds[p] * t, "std": np.zeros(rounds)},
        }
        for p, end in ends.items()
    }
    res = Results({"num_trials": 4, "num_rounds": rounds}, curves, {}, {})
    monkeypatch.setattr(xia_training, "load_data", lambda *a, **k: None)
    monkeypatch.setattr(xia_training, "_digits_env", lambda *a, **k: None)
    monkeypatch.setattr(xia_training, "run_policies", lambda *a, **k: res)
    numbers = xia_training.fig2(Options(setting="calibrated", output_dir=str(tmp_path)))
    assert numbers["holds"] is holds, numbers
