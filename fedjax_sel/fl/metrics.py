"""Training metrics over `Results` curves: rounds and time to an accuracy, time to a loss."""

from __future__ import annotations

import numpy as np

from fedjax_sel import validation
from fedjax_sel.results import Results


def _first_round(results: Results, policy: str, target: float, metric: str = "accuracy"):
    """The first round (1-based) whose mean `metric` reaches `target`: at or above it
    for the accuracy, at or below it for the loss; None if none does. An unknown policy,
    or a target outside [0, 1] (accuracy) or [0, inf) (loss), is a ValueError."""
    if policy not in results.curves:
        raise ValueError(f"unknown policy {policy!r}; the results hold {list(results.curves)}.")
    high = 1.0 if metric == "accuracy" else np.inf
    target = validation.float_in_range("target", target, 0.0, high)
    if metric not in results.curves[policy]:
        raise ValueError(f"policy {policy!r} has no {metric} curve (not a training environment).")
    curve = np.asarray(results.curves[policy][metric]["mean"])
    reached = np.nonzero(curve >= target if metric == "accuracy" else curve <= target)[0]
    return int(reached[0]) + 1 if reached.size else None


def _time_at(results: Results, policy: str, t: int | None) -> float | None:
    """The mean cumulative latency (s) after round t (1-based); None for None."""
    if t is None:
        return None
    return float(results.curves[policy]["cumulative_latency"]["mean"][t - 1])


def rounds_to_accuracy(results: Results, policy: str, target: float) -> int | None:
    """The first round (1-based) whose mean test accuracy over trials reaches `target`.

    Args:
      results: a training environment's results (with an "accuracy" curve).
      policy: the policy's name.
      target: accuracy in [0, 1].

    Returns:
      The round, or None if the mean accuracy never reaches `target`.
    """
    return _first_round(results, policy, target)


def time_to_accuracy(results: Results, policy: str, target: float) -> float | None:
    """Mean cumulative wall-clock latency (s) at the round `rounds_to_accuracy` returns.

    Returns:
      Seconds, or None if the mean accuracy never reaches `target`.
    """
    return _time_at(results, policy, _first_round(results, policy, target))


def time_to_loss(results: Results, policy: str, target: float) -> float | None:
    """Mean cumulative wall-clock latency (s) at the first round whose mean loss over
    trials is at most `target` (`RoundStats.loss`: the test or the training loss).

    Returns:
      Seconds, or None if the mean loss never reaches `target`.
    """
    return _time_at(results, policy, _first_round(results, policy, target, "loss"))
