"""The metrics of a simulation, declared once.

`METRICS` lists what the runner measures in every environment. From it come the
per-round curves (a metric's per-round value, and its running sum `cumulative_<name>`
where one is kept), the per-trial totals (values after the last round), the names in
`Results`, and the default columns of `Results.table`. A metric that needs the oracle's
expected reward (`RoundStats.oracle_reward`) is left out of a run whose environment has
none (training, say) instead of reported as garbage.

Optional metrics come after these, in this order: `loss` and `accuracy` where the
environment's `RoundStats` carries them, then `extra/<name>` for each entry of its
`extras` (sorted by name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax.numpy as jnp

from fedjax_sel.ops import count_true, double
from fedjax_sel.types import Decision, RoundStats


def jain_index(counts: chex.Array) -> chex.Array:
    """Jain's fairness index (sum c)^2 / (N sum c^2) of f32[..., N]; 1 when all are 0."""
    n = counts.shape[-1]
    sq = jnp.sum(counts * counts, axis=-1)
    total = jnp.sum(counts, axis=-1)
    return jnp.where(sq > 0, total * total / (n * jnp.maximum(sq, 1e-30)), 1.0)


class Metric(NamedTuple):
    """One metric of every run.

    Attributes:
      name: the per-round curve's name, or the per-trial total's when there is no curve.
      per_round: `(stats, decision, counts) -> f32[]`, the round's value for one trial
        from its `RoundStats`, its `Decision` and the selections of each client so far,
        this round's included (`counts`, f32[N]); None for a per-trial total only.
      cumulative: whether a running sum over the rounds is kept (of a metric with
        `per_round`): the curve `cumulative_<name>`, whose last value is the per-trial
        total of that name.
      final: `(counts, num_rounds) -> f32[]`, a per-trial total named `name` from the
        selection counts after the last round (f32[N]); None for no such total.
      needs_oracle: whether the value reads `RoundStats.oracle_reward`.
      in_table: whether the metric's per-trial total is a default column of
        `Results.table`.
    """

    name: str
    per_round: Callable[[RoundStats, Decision, chex.Array], chex.Array] | None
    cumulative: bool = False
    final: Callable[[chex.Array, chex.Array], chex.Array] | None = None
    needs_oracle: bool = False
    in_table: bool = True


METRICS = (
    # Pseudo-regret: the oracle's expected value minus the decision's.
    Metric(
        "regret",
        lambda stats, decision, counts: stats.oracle_reward - stats.expected_reward,
        cumulative=True,
        needs_oracle=True,
    ),
    # Realized regret: the oracle's expected value minus the decision's realized value.
    Metric(
        "realized_regret",
        lambda stats, decision, counts: stats.oracle_reward - stats.reward,
        cumulative=True,
        needs_oracle=True,
        in_table=False,
    ),
    Metric("reward", lambda stats, decision, counts: stats.reward, cumulative=True),
    Metric("latency", lambda stats, decision, counts: stats.latency, cumulative=True),
    Metric("failed", lambda stats, decision, counts: stats.num_failed, cumulative=True),
    # Exact, like a sum of the f32 selection below 2^24 clients, and cheaper: the copy
    # that XLA writes for YNNPACK's sum is half the size (docs/benchmarks.md).
    Metric(
        "num_selected",
        lambda stats, decision, counts: count_true(decision.selected),
        in_table=False,
    ),
    Metric(
        "jain_index",
        lambda stats, decision, counts: jain_index(counts),
        final=lambda counts, num_rounds: jain_index(counts),
    ),
    Metric(
        "min_selection_fraction",
        None,
        final=lambda counts, num_rounds: jnp.min(counts / num_rounds, axis=-1),
    ),
)


# The per-trial totals `Results.table` shows unless told otherwise (those a run has).
class Layout(NamedTuple):
    """The metrics of one run: which of `METRICS`, and the optional ones.

    Attributes:
      metrics: the entries of `METRICS` the environment supports, in their order.
      optional: names of the `RoundStats` fields reported ("loss", "accuracy").
      extras: keys of `RoundStats.extras`, sorted.
    """

    metrics: tuple[Metric, ...]
    optional: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()

    @property
    def curves(self) -> tuple[str, ...]:
        """Names of the per-round curves, in the order of `round_values`."""
        names = []
        for m in self.metrics:
            if m.per_round is not None:
                names += [m.name] + [f"cumulative_{m.name}"] * m.cumulative
        return tuple(names) + self.optional + tuple(f"extra/{e}" for e in self.extras)

    @property
    def totals(self) -> tuple[str, ...]:
        """Names of the per-trial totals, in the order of `trial_totals`."""
        return tuple(f"cumulative_{m.name}" for m in self.metrics if m.cumulative) + tuple(
            m.name for m in self.metrics if m.final is not None
        )

    @property
    def num_running_sums(self) -> int:
        return sum(m.cumulative for m in self.metrics)


# The per-trial totals `Results.table` shows unless told otherwise (those a run has).
TABLE_TOTALS = Layout(tuple(m for m in METRICS if m.in_table)).totals


def layout(stats: RoundStats) -> Layout:
    """The metrics of an environment whose rounds give `stats` (a `RoundStats` of arrays
    or of shapes, from `jax.eval_shape`)."""
    metrics = tuple(m for m in METRICS if stats.oracle_reward is not None or not m.needs_oracle)
    optional = tuple(name for name in ("loss", "accuracy") if getattr(stats, name) is not None)
    extras = tuple(sorted(stats.extras)) if stats.extras else ()
    return Layout(metrics, optional, extras)


class Running(NamedTuple):
    """Running per-trial totals of one trial.

    Attributes:
      sums: f32[2] each, the running sums of the `cumulative` metrics, in their order, as
        double-f32 numbers (hi, lo) summed without rounding error
        (`ops.double.add`): an f32 sum of 1e5 rounds drifts by about 1e-4.
      counts: f32[N], how many rounds each client was selected in.
      largest_cohort: f32[], the most clients selected in one round.
      invalid_rounds: f32[], rounds whose decision the environment does not accept
        (`decision_violations`).
    """

    sums: tuple[chex.Array, ...]
    counts: chex.Array
    largest_cohort: chex.Array
    invalid_rounds: chex.Array


def init_running(metric_layout: Layout, num_clients: int) -> Running:
    zero = jnp.float32(0.0)
    return Running(
        (jnp.zeros((2,), jnp.float32),) * metric_layout.num_running_sums,
        jnp.zeros((num_clients,), jnp.float32),
        zero,
        zero,
    )


def decision_violations(
    decision: Decision, available: chex.Array, num_selected: int | None
) -> chex.Array:
    """Whether a decision is one no environment accepts, bool[]: it schedules an
    unavailable client, or more than `num_selected` clients (None: no cohort bound)."""
    wrong = jnp.any(decision.selected & ~available)
    if num_selected is not None:
        wrong |= count_true(decision.selected) > num_selected
    return wrong


def round_values(
    metric_layout: Layout,
    running: Running,
    stats: RoundStats,
    decision: Decision,
    invalid: chex.Array,
) -> tuple[Running, chex.Array]:
    """Adds one round to the running totals of a trial; returns them and the round's
    values of the curves as double-f32 numbers, f32[len(metric_layout.curves), 2] (the
    running sums carry a low part; the others have lo = 0). `invalid` (bool[]) counts the
    round as one whose decision the environment does not accept."""
    counts = running.counts + decision.selected.astype(jnp.float32)
    values, sums, new_sums = [], iter(running.sums), []
    for m in metric_layout.metrics:
        if m.per_round is None:
            continue
        value = jnp.asarray(m.per_round(stats, decision, counts), jnp.float32)
        values.append(double.from_f32(value))
        if m.cumulative:
            new_sums.append(double.add(next(sums), values[-1]))
            values.append(new_sums[-1])
    values += [double.from_f32(getattr(stats, name)) for name in metric_layout.optional]
    values += [double.from_f32(stats.extras[name]) for name in metric_layout.extras]
    running = Running(
        tuple(new_sums),
        counts,
        jnp.maximum(running.largest_cohort, count_true(decision.selected).astype(jnp.float32)),
        running.invalid_rounds + invalid.astype(jnp.float32),
    )
    return running, jnp.stack([jnp.asarray(v, jnp.float32) for v in values])


def trial_totals(metric_layout: Layout, running: Running, num_rounds: chex.Array) -> chex.Array:
    """The per-trial totals after the last round as double-f32 numbers,
    f32[..., len(metric_layout.totals), 2], of running totals with any leading (trial)
    axes."""
    finals = [
        double.from_f32(m.final(running.counts, num_rounds))
        for m in metric_layout.metrics
        if m.final
    ]
    return jnp.stack(list(running.sums) + finals, -2)
