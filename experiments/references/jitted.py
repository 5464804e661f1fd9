"""The jitted side of a paper reference: one `simulate` program, built once, called again.

`run_means` is what each paper module's `jax_run_<policy>` returns: a call that runs the
whole jitted program (`fedjax_sel.simulate`, scan over rounds, vmap over trials), blocks
until its results are on the host, and returns the mean over trials of the metrics the
NumPy reference reports. `simulate` keeps the compiled program of a (selector,
environment, sizes) it has seen, so a second call compiles nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import fedjax_sel
from fedjax_sel.types import Env, Selector


def run_means(
    selector: Selector,
    env: Env,
    num_trials: int,
    num_rounds: int,
    seed: int,
    totals: tuple[str, ...],
    last_round: tuple[str, ...] = (),
) -> Callable[[], dict[str, float]]:
    """A call running `selector` on `env` for `num_trials` x `num_rounds`.

    Args:
      selector: the jitted policy, built once.
      env: its environment, built once.
      num_trials: M >= 1.
      num_rounds: T >= 1.
      seed: the run's seed.
      totals: per-trial totals of `Results.totals` ("cumulative_latency", ...) whose mean
        over trials the call returns.
      last_round: per-round curves ("loss") whose mean over trials at round T it returns.

    Returns:
      `() -> {metric: mean over trials}`.
    """

    def call() -> dict[str, float]:
        res = fedjax_sel.simulate(selector, env, num_rounds, num_trials, seed, progress=None)
        means = {name: res.final("policy", name)[0] for name in totals}
        for name in last_round:
            means[name] = float(res.curves["policy"][name]["mean"][-1])
        return means

    return call
