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
from jax import lax

from fedjax_sel.ops import count_true, double
from fedjax_sel.ops import places as places_lib
from fedjax_sel.types import Decision, RoundStats


def jain_index(counts: chex.Array) -> chex.Array:
    """Jain's fairness index (sum c)^2 / (N sum c^2) of f32[..., N]; 1 when all are 0."""
    n = counts.shape[-1]
    return _jain(jnp.sum(counts, axis=-1), jnp.sum(counts * counts, axis=-1), n)


def _jain(total: chex.Array, squares: chex.Array, n: int) -> chex.Array:
    """Jain's index of N counts from their sum and the sum of their squares."""
    return jnp.where(squares > 0, total * total / (n * jnp.maximum(squares, 1e-30)), 1.0)


class Selections(NamedTuple):
    """How often each client of a trial has been selected, after a round.

    Jain's index needs the sum of the counts and of their squares every round; they are
    kept as running sums, advanced by the round's cohort alone (a client selected for
    the c-th time adds 2c - 1 to the squares), so that a decision that carries
    its clients' places (`Decision.indices`) is counted with no pass over the N
    clients. The increments are integers below 2^25 (counts are exact in f32 up to 2^24
    rounds), summed exactly in fields (`ops.double.sum_int27`: a round's sum reaches
    2^31 once k (2c - 1) does, 20,000 clients selected 53,700 times), and the running
    sums are double-f32 numbers, exact below 2^48: the same bits however the round was
    counted.

    Attributes:
      cohort: f32[], the clients selected in the round.
      counts: f32[N], the rounds each client was selected in, this one's included.
      total: f32[2], the sum of `counts`, double-f32.
      squares: f32[2], the sum of the squares of `counts`, double-f32.
    """

    cohort: chex.Array
    counts: chex.Array
    total: chex.Array
    squares: chex.Array

    @property
    def jain_index(self) -> chex.Array:
        """f32[], Jain's index of `counts` (`jain_index`), from the running sums."""
        return _jain(self.total[..., 0], self.squares[..., 0], self.counts.shape[-1])


def count_selections(
    selections: Selections, decision: Decision, t: chex.Array | None = None
) -> Selections:
    """`selections` after one more round, in which `decision` was taken: from its
    places (`Decision.indices`, O(k)) where it carries them, else from its mask.

    `t` (int32[], the same for every trial: the round, which no count exceeds after it)
    lets the round's squared-count increments, each at most 2t - 1, be summed in one
    int32 sum while that cannot overflow (m (2t - 1) < 2^29 for m terms: 10^4 clients
    for 2.7 x 10^4 rounds), in exact fields after (`ops.double.sum_int27`, three sums);
    None takes the fields always."""
    if decision.indices is None:
        selected = decision.selected
        cohort = count_true(selected)
        counts = selections.counts + selected.astype(jnp.float32)
        # A client selected for the c-th time adds c^2 - (c - 1)^2 = 2c - 1.
        squares = jnp.where(selected, 2.0 * counts - 1.0, 0.0)
    else:
        places = decision.indices
        cohort = count_true(places < selections.counts.shape[-1])
        counts = places_lib.add(selections.counts, places, 1.0)
        # Read after the update (each place is taken once), which leaves XLA free to
        # update the counts in place: a read before it would need a copy of them.
        squares = 2.0 * places_lib.take(counts, places, 0.5) - 1.0
    return Selections(
        cohort.astype(jnp.float32),
        counts,
        double.add(selections.total, double.from_int32(cohort)),
        double.add(selections.squares, _sum_increments(squares.astype(jnp.int32), t)),
    )


def _sum_increments(terms: chex.Array, t: chex.Array | None) -> chex.Array:
    """f32[2]: the exact sum of int32[m] `terms` in [0, 2t - 1], as double-f32."""
    if terms.shape[-1] * 2**25 < 2**29:  # fewer than 16 terms of at most 2^25 (t <= 2^24)
        return double.from_int32(jnp.sum(terms))
    if t is None:
        return double.sum_int27(terms)
    fits = terms.shape[-1] * (2.0 * jnp.asarray(t, jnp.float32) - 1.0) < 2.0**29
    return lax.cond(fits, lambda x: double.from_int32(jnp.sum(x)), double.sum_int27, terms)


class Metric(NamedTuple):
    """One metric of every run.

    Attributes:
      name: the per-round curve's name, or the per-trial total's when there is no curve.
      per_round: `(stats, selections) -> f32[]`, the round's value for one trial from
        its `RoundStats` and its `Selections` after the round; None for a per-trial
        total only.
      cumulative: whether a running sum over the rounds is kept (of a metric with
        `per_round`): the curve `cumulative_<name>`, whose last value is the per-trial
        total of that name.
      final: `(selections, num_rounds) -> f32[]`, a per-trial total named `name` from
        the `Selections` after the last round; None for no such total.
      needs_oracle: whether the value reads `RoundStats.oracle_reward`.
      in_table: whether the metric's per-trial total is a default column of
        `Results.table`.
    """

    name: str
    per_round: Callable[[RoundStats, Selections], chex.Array] | None
    cumulative: bool = False
    final: Callable[[Selections, chex.Array], chex.Array] | None = None
    needs_oracle: bool = False
    in_table: bool = True


METRICS = (
    # Pseudo-regret: the oracle's expected value minus the decision's.
    Metric(
        "regret",
        lambda stats, selections: stats.oracle_reward - stats.expected_reward,
        cumulative=True,
        needs_oracle=True,
    ),
    # Realized regret: the oracle's expected value minus the decision's realized value.
    Metric(
        "realized_regret",
        lambda stats, selections: stats.oracle_reward - stats.reward,
        cumulative=True,
        needs_oracle=True,
        in_table=False,
    ),
    Metric("reward", lambda stats, selections: stats.reward, cumulative=True),
    Metric("latency", lambda stats, selections: stats.latency, cumulative=True),
    Metric("failed", lambda stats, selections: stats.num_failed, cumulative=True),
    Metric("num_selected", lambda stats, selections: selections.cohort, in_table=False),
    Metric(
        "jain_index",
        lambda stats, selections: selections.jain_index,
        final=lambda selections, num_rounds: selections.jain_index,
    ),
    Metric(
        "min_selection_fraction",
        None,
        final=lambda selections, num_rounds: jnp.min(selections.counts / num_rounds, axis=-1),
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
      selections: the `Selections` after the last round.
      largest_cohort: f32[], the most clients selected in one round.
      invalid_rounds: f32[], rounds whose decision the environment does not accept
        (`decision_violations`).
    """

    sums: tuple[chex.Array, ...]
    selections: Selections
    largest_cohort: chex.Array
    invalid_rounds: chex.Array


def init_running(metric_layout: Layout, num_clients: int) -> Running:
    zero, none = jnp.float32(0.0), jnp.zeros((2,), jnp.float32)
    selections = Selections(zero, jnp.zeros((num_clients,), jnp.float32), none, none)
    return Running((none,) * metric_layout.num_running_sums, selections, zero, zero)


def decision_violations(
    decision: Decision, available: chex.Array, num_selected: int | None
) -> chex.Array:
    """Whether a decision is one no environment accepts, bool[]: it schedules an
    unavailable client, or more than `num_selected` clients (None: no cohort bound).
    A decision that carries its clients' places (`Decision.indices`) is checked at
    them alone."""
    if decision.indices is None:
        wrong = jnp.any(decision.selected & ~available)
        if num_selected is not None:
            wrong |= count_true(decision.selected) > num_selected
        return wrong
    places = decision.indices
    taken = places < available.shape[-1]
    wrong = jnp.any(taken & ~places_lib.take(available, places, True))
    if num_selected is not None and places.shape[-1] > num_selected:
        wrong |= count_true(taken) > num_selected
    return wrong


def round_values(
    metric_layout: Layout,
    running: Running,
    stats: RoundStats,
    decision: Decision,
    invalid: chex.Array,
    t: chex.Array | None = None,
) -> tuple[Running, chex.Array]:
    """Adds one round to the running totals of a trial; returns them and the round's
    values of the curves as double-f32 numbers, f32[len(metric_layout.curves), 2] (the
    running sums carry a low part; the others have lo = 0). `invalid` (bool[]) counts the
    round as one whose decision the environment does not accept; `t` is the round
    (`count_selections`)."""
    selections = count_selections(running.selections, decision, t)
    values, sums, new_sums = [], iter(running.sums), []
    for m in metric_layout.metrics:
        if m.per_round is None:
            continue
        value = jnp.asarray(m.per_round(stats, selections), jnp.float32)
        values.append(double.from_f32(value))
        if m.cumulative:
            new_sums.append(double.add(next(sums), values[-1]))
            values.append(new_sums[-1])
    values += [double.from_f32(getattr(stats, name)) for name in metric_layout.optional]
    values += [double.from_f32(stats.extras[name]) for name in metric_layout.extras]
    running = Running(
        tuple(new_sums),
        selections,
        jnp.maximum(running.largest_cohort, selections.cohort),
        running.invalid_rounds + invalid.astype(jnp.float32),
    )
    return running, jnp.stack([jnp.asarray(v, jnp.float32) for v in values])


def trial_totals(metric_layout: Layout, running: Running, num_rounds: chex.Array) -> chex.Array:
    """The per-trial totals after the last round as double-f32 numbers,
    f32[..., len(metric_layout.totals), 2], of running totals with any leading (trial)
    axes."""
    finals = [
        double.from_f32(m.final(running.selections, num_rounds))
        for m in metric_layout.metrics
        if m.final
    ]
    return jnp.stack(list(running.sums) + finals, -2)
