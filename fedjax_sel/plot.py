"""Figures of `Results`: metric curves with 95% confidence bands (matplotlib).

`plot` draws one metric for several policies on one axes, against the round or against
another per-round metric (the cumulative wall-clock latency, for time-to-accuracy
figures); `pyplot` and `save` are what every figure of the project opens and writes with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from fedjax_sel.results import Results


def pyplot():
    """matplotlib.pyplot, imported when a figure is drawn (on matplotlib's own choice of
    backend: a notebook's inline one, Agg without a display)."""
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str, dpi: float | None = None) -> str:
    """Lays out `fig`, writes it to `path` (its directory made if needed), closes it."""
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def _label(metric: str) -> str:
    return metric.removeprefix("extra/").replace("_", " ")


def plot(
    results: Results,
    metric: str = "cumulative_regret",
    policies: Sequence[str] | None = None,
    ax=None,
    path: str | None = None,
    title: str | None = None,
    *,
    x: str = "round",
    bands: bool = True,
    scale: float = 1.0,
    per_round: bool = False,
    xlabel: str | None = None,
    ylabel: str | None = None,
    linestyle: str | None = None,
    legend: bool = True,
):
    """Plots the mean of `metric` over trials per round, with its 95% confidence band.

    Args:
      results: what `fedjax_sel.simulate` returned (or `Results.load`).
      metric: a per-round metric name (see `Results.curves`).
      policies: which policies, in order; all by default.
      ax: a matplotlib Axes to draw on; a new figure when None.
      path: if given, the figure is saved there (PNG, PDF, ... by extension; its
        directory made if needed).
      title: the axes title; None for the metric and the number of trials, "" for none.
      x: "round", or a per-round metric whose mean is the x axis of each policy
        (`"cumulative_latency"`: accuracy against wall-clock time).
      bands: draw the 95% confidence band of `metric` around each mean.
      scale: a factor of the curve and its band (a unit: seconds per regret unit).
      per_round: divide the curve at round t by t (a time average: theta(t) = Theta(t)/t).
      xlabel: the x-axis label; by default the round or `x`'s name.
      ylabel: the y-axis label; by default `metric`'s name.
      linestyle: a matplotlib line style for every curve ("--" for references).
      legend: draw the legend.

    Returns:
      The matplotlib Figure.
    """
    policies = list(policies or results.policies)
    unknown = [p for p in policies if p not in results.curves]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; results hold {results.policies}.")
    for name in (metric, x):
        if name != "round" and name not in results.curves[policies[0]]:
            raise ValueError(
                f"unknown metric {name!r}; choose one of {sorted(results.curves[policies[0]])}."
            )
    if ax is None:
        fig, ax = pyplot().subplots(figsize=(6, 4))
    else:
        fig = ax.figure
    for policy in policies:
        mean, half = results.curve(policy, metric)
        rounds = np.arange(1, len(mean) + 1)
        factor = scale / rounds if per_round else scale
        mean, half = mean * factor, half * factor
        xs = rounds if x == "round" else results.curve(policy, x)[0]
        (line,) = ax.plot(xs, mean, label=policy, **({"linestyle": linestyle} if linestyle else {}))
        if bands:
            ax.fill_between(xs, mean - half, mean + half, color=line.get_color(), alpha=0.2)
    ax.set_xlabel(xlabel or ("round" if x == "round" else _label(x)))
    ax.set_ylabel(ylabel or _label(metric))
    if title is None:
        title = f"{_label(metric)} ({results.num_trials} trials, 95% CI)"
    ax.set_title(title)
    if legend:
        ax.legend()
    fig.tight_layout()
    if path:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        fig.savefig(path)
    return fig
