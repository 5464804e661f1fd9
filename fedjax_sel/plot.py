"""Figures of `Results`: metric curves with 95% confidence bands (matplotlib)."""

from __future__ import annotations

from collections.abc import Sequence

from fedjax_sel.results import Results


def plot(
    results: Results,
    metric: str = "cumulative_regret",
    policies: Sequence[str] | None = None,
    ax=None,
    path: str | None = None,
    title: str | None = None,
):
    """Plots the mean of `metric` over trials per round, with its 95% confidence band.

    Args:
      results: what `fedjax_sel.simulate` returned (or `Results.load`).
      metric: a per-round metric name (see `Results.curves`).
      policies: which policies, in order; all by default.
      ax: a matplotlib Axes to draw on; a new figure when None.
      path: if given, the figure is saved there (PNG, PDF, ... by extension).
      title: the axes title.

    Returns:
      The matplotlib Figure.
    """
    import matplotlib.pyplot as plt

    policies = list(policies or results.policies)
    unknown = [p for p in policies if p not in results.curves]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; results hold {results.policies}.")
    if metric not in results.curves[policies[0]]:
        raise ValueError(
            f"unknown metric {metric!r}; choose one of {sorted(results.curves[policies[0]])}."
        )
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 4))
    else:
        fig = ax.figure
    for policy in policies:
        mean, half = results.curve(policy, metric)
        rounds = range(1, len(mean) + 1)
        (line,) = ax.plot(rounds, mean, label=policy)
        ax.fill_between(rounds, mean - half, mean + half, color=line.get_color(), alpha=0.2)
    ax.set_xlabel("round")
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(title or f"{metric.replace('_', ' ')} ({results.num_trials} trials, 95% CI)")
    ax.legend()
    fig.tight_layout()
    if path:
        fig.savefig(path)
    return fig
