r"""Hierarchical FL with edge servers, per-server budgets and a deadline: Qu et al.'s network.

Z. Qu, R. Duan, L. Chen, J. Xu, Z. Lu, Y. Liu, "Context-aware Online Client Selection for
Hierarchical Federated Learning", IEEE TPDS 33(12), 2022 (Sec. III, VI-A, Table I).

N clients, M edge servers (ESs). In every edge round t, client n can reach ES m when
:math:`A^t[n, m] = 1`, drawn Bernoulli(`availability`) per pair and round (overlapping,
time-varying coverage; spec §2.7, A15). At the start of the round each client reveals
its computation :math:`y_n^t`; the network operator pays
:math:`c_n^t = \pi_n y_n^t` (:math:`\pi_n \sim U[0.5, 2]` per MHz, drawn per trial) and
each ES has budget B (10b); `pricing="round"` redraws :math:`\pi_n` every round instead
(the spec's §2.3 option). A selected client succeeds (:math:`X_{n,m}^t = 1`) when its
download, local computation and upload fit the deadline (eq. 5):

.. math:: \tau_{n,m} = \frac{s}{b_n\,\log_2(1 + P G h_{DT} / N_0)} + \frac{q}{y_n}
                      + \frac{s}{b_n\,\log_2(1 + P G h_{UT} / N_0)} \le \tau_{dead},

with :math:`G = 10^{-PL/10}`, :math:`PL = 128.1 + 37.6 \log_{10} d + \text{shadowing}`
(d ~ U[0.01, 2] km, shadowing N(0, 8^2) dB), Rayleigh fading powers h ~ Exp(1)
independent per direction, P = 23 dBm, :math:`N_0` = -174 dBm/Hz times the bandwidth
b plus a noise figure. Given everything but the upload fading, the success
probability is exact (spec §2.7):

.. math:: p_{n,m} = \exp\big(-(2^{s/(b\,\text{slack})} - 1) N_0 / (P G)\big),\quad
          \text{slack} = \tau_{dead} - s/r_{DT} - q/y\ (p = 0 \text{ if slack} \le 0).

Reward generators (`generator`):
  - "physical": the latency model above, contexts (D = 2) the download rate
    :math:`r_{DT} = b \log_2(1 + P G h_{DT}/N_0)` and the compute y, min-max scaled to
    [0, 1] with fixed bounds (the rate by its 99th percentile under the model, computed
    once per configuration); D = 4 adds the distance and the download spectral
    efficiency after the bandwidth (Table I's D = 4, spec A1).
  - "synthetic": contexts uniform in :math:`[0, 1]^D` and
    :math:`p_{n,m}(\phi) = a_{n,m} + w_{n,m}^\top \phi` with :math:`a \sim U[0.05, 0.5]`,
    :math:`w \sim U[0, 0.5/D]^D` per trial: Hölder with :math:`\alpha = 1` (Assumption 1),
    for regret-exponent studies.

`RoundInput`: `available` (bool[N], clients that reach some ES), `connectivity`
(f32[N, M], :math:`A^t`), `pair_context` (f32[N, M, D], :math:`\phi_{n,m}^t`) and
`info = {"cost": f32[N]}`. Decisions must carry `assignment` (int32[N], the ES of each
selected client, -1 for none). `Env.feasible` accepts a decision when every selected
client is assigned to one ES (10d) that covers it this round (10c) and every ES's
selected clients cost at most B (10b); the runner refuses the others.

Utility (`utility`): "linear" is the number of successful participants
:math:`\sum_m \sum_{n \in s_m} X_{n,m}`, eq. (8) times M (the paper's absolute numbers,
Fig. 4(f), count successes, spec A13); "sqrt" is eq. (19),
:math:`\sqrt{(1/M) \sum_m \sum_{n \in s_m} X_{n,m}}`, its expectation taken as the
square root of the expected count (a plug-in, for pseudo-regret). Since both are
increasing in the linear count, one argmax serves both (spec §3.5.3).

Oracle (`oracle`): "p" (default, Sec. IV-A, eq. 11) maximises the expected count with
the per-ES knapsack solver on the true :math:`p`; "X" (Sec. VI-B's clairvoyant reading)
selects the most pairs that will succeed this round (cheapest first over
:math:`A \wedge X`); its regret is then measured on realised values (both
`expected_reward` and `oracle_reward` are realised).

What a decision is worth, and the regret's reference: every pair's value (p, or X) is
at least 0, so a decision that leaves budget unused, or selects nobody, is worth the sum
over the pairs it holds and nothing is added for the room it leaves (it can only lose to
a fuller one). P2 with overlapping coverage is NP-hard and both solvers are heuristics
(exact per ES on the cost grid), so an accepted decision can be worth more than the
solver's; `oracle_reward` is therefore the better of the two, per round. The
pseudo-regret so measured is never negative, at least the regret against the solver's
decision and at most the regret against the exact optimum of P2.

Feedback latencies are the clients' times capped at the deadline (the ES stops waiting),
`Feedback.info["uncapped_latency"]` their times tau (eq. 5), which the fastest-Z fallback
of the hierarchical training environment ranks (`fl.aggregate.hierarchical`, eq. 6);
`RoundStats.latency` is the slowest selected client's. `RoundStats.extras`: `successes`
(the count) and `selected` (clients scheduled).
"""

from __future__ import annotations

from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.envs.latency import path_loss_db
from fedjax_sel.ops import assignment as assign_ops
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

GENERATORS = ("physical", "synthetic")
UTILITIES = ("linear", "sqrt")
ORACLES = ("p", "X")
SOLVERS = assign_ops.SOLVERS
CONTEXT_DIMS = (2, 4)
PRICINGS = ("client", "round")
# Table I and Sec. VI-A per data set: update size s (Mbit), workload q (Mcycles),
# deadline (s), budget per ES, bandwidth and compute ranges (MHz), the knapsack grid.
PRESETS = {
    "mnist": dict(
        size_mbit=0.18, workload=2.41, deadline_s=3.0, budget=3.5,
        bandwidth_mhz=(0.3, 1.0), compute_mhz=(2.0, 4.0), cost_step=0.05,
    ),
    "cifar10": dict(
        size_mbit=18.7, workload=28.3, deadline_s=20.0, budget=40.0,
        bandwidth_mhz=(2.0, 4.0), compute_mhz=(8.0, 15.0), cost_step=0.25,
    ),
}  # fmt: skip
_PRICE_PER_MHZ = (0.5, 2.0)  # Table I's pricing function, U[0.5, 2] per MHz
_POWER_DBM = 23.0
_NOISE_DBM_PER_HZ = -174.0
_SHADOWING_DB = 8.0
_DISTANCE_KM = (0.01, 2.0)
_RATE_QUANTILE = 0.99
_BUDGET_RTOL = 1e-5


class HierarchicalParams(NamedTuple):
    """The environment's parameter pytree (`Env.params`).

    The budget and the noise figure are factory arguments instead: they fix the oracle's
    knapsack grid and the contexts' scale, both static.

    Attributes:
      coverage: f32[N], probability that client n reaches each ES in a round.
      deadline_s: f32[], :math:`\\tau_{dead}`.
      size_mbit: f32[], s, the model (update) size.
      workload: f32[], q, Mcycles of local computation.
    """

    coverage: chex.Array
    deadline_s: chex.Array
    size_mbit: chex.Array
    workload: chex.Array


class HierarchicalState(NamedTuple):
    """One trial's state.

    Attributes:
      price: f32[N], :math:`\\pi_n`, the unit price of client n's computation.
      intercept: f32[N, M], the synthetic generator's :math:`a_{n,m}`.
      slope: f32[N, M, D], the synthetic generator's :math:`w_{n,m}`.
      round_key: the key of the hidden per-round draws, folded with t.
    """

    price: chex.Array
    intercept: chex.Array
    slope: chex.Array
    round_key: chex.Array


class _Round(NamedTuple):
    """The round's hidden draws: what `observe` shows and `step` needs."""

    coverage: chex.Array  # bool[N, M]
    context: chex.Array  # f32[N, M, D]
    cost: chex.Array  # f32[N]
    p: chex.Array  # f32[N, M], success probability of each pair
    success: chex.Array  # bool[N, M], X
    latency: chex.Array  # f32[N, M], tau (s), eq. (5); 0 for the synthetic generator


def hierarchical(
    num_clients: int = 50,
    num_selected: int | None = None,
    num_servers: int = 3,
    availability=0.6,
    dataset: str = "mnist",
    generator: str = "physical",
    context_dim: int = 2,
    budget: float | None = None,
    deadline_s: float | None = None,
    noise_figure_db: float = 0.0,
    utility: str = "linear",
    oracle: str = "p",
    solver: str = "knapsack",
    pricing: str = "client",
) -> Env:
    """Qu et al.'s hierarchical network (see the module docstring).

    Args:
      num_clients: N >= 1 (50 in the paper).
      num_selected: validated only, 1 <= k <= N or None (the registry's contract): the
        budgets bound the cohort, so the environment declares no cap.
      num_servers: M >= 1 (3).
      availability: coverage probability per client-ES pair and round, a probability or
        f32[N] per client (0.6, spec A15); not all zero.
      dataset: "mnist" or "cifar10", Table I's constants.
      generator: "physical" or "synthetic" (spec §8.4).
      context_dim: D, 2 (Sec. IV) or 4 (Table I).
      budget: B per ES, None for the data set's (3.5 MNIST, 40 CIFAR-10); at least the
        cheapest possible client's cost (0.5 times the lowest compute).
      deadline_s: :math:`\\tau_{dead}` > 0, None for the data set's (3 s, 20 s).
      noise_figure_db: receiver noise figure in dB, >= 0 (0; a calibration knob).
      utility: "linear" (eq. 8, as a count) or "sqrt" (eq. 19).
      oracle: "p" or "X" (see the module docstring).
      solver: "knapsack" or "greedy", how the "p" oracle solves P2.
      pricing: "client" (the unit price :math:`\\pi_n` drawn once per client and trial,
        spec §2.3's reading) or "round" (redrawn every round, its option).

    Returns:
      An `Env` (see the module docstring for its inputs and statistics).
    """
    n = validation.positive_int("num_clients", num_clients)
    if num_selected is not None:
        validation.num_selected(num_selected, n)
    m = validation.positive_int("num_servers", num_servers)
    coverage = validation.probabilities("availability", availability, n)
    if not np.any(coverage > 0):
        raise ValueError(
            "availability (coverage) must let some client reach an edge server; got all 0."
        )
    preset = PRESETS[validation.choice("dataset", dataset, tuple(PRESETS))]
    validation.choice("generator", generator, GENERATORS)
    d = validation.choice("context_dim", context_dim, CONTEXT_DIMS)
    validation.choice("utility", utility, UTILITIES)
    validation.choice("oracle", oracle, ORACLES)
    validation.choice("solver", solver, SOLVERS)
    validation.choice("pricing", pricing, PRICINGS)
    compute = preset["compute_mhz"]
    b, _ = _budget(preset, budget)
    deadline = preset["deadline_s"] if deadline_s is None else deadline_s
    deadline = validation.positive_float("deadline_s", deadline)
    nf = validation.float_in_range("noise_figure_db", noise_figure_db, 0.0, np.inf)
    cost_step = preset["cost_step"]
    units = assign_ops.grid_capacity(b, cost_step)
    bandwidth = preset["bandwidth_mhz"]
    rate_high, se_high = rate_bounds(preset, nf)
    budgets = jnp.full((m,), b, jnp.float32)
    f32 = jnp.float32
    defaults = HierarchicalParams(
        coverage=jnp.asarray(coverage),
        deadline_s=f32(deadline),
        size_mbit=f32(preset["size_mbit"]),
        workload=f32(preset["workload"]),
    )

    def reset(key, params=None):
        del params
        draw_key, round_key = jax.random.split(key)
        u = jax.random.uniform(draw_key, (2 + d, n, m))
        return HierarchicalState(
            price=_unit_price(u[0, :, 0]),
            intercept=0.05 + 0.45 * u[1],
            slope=(0.5 / d) * jnp.moveaxis(u[2:], 0, -1),
            round_key=round_key,
        )

    def draw(state, t, params):
        """The round's hidden draws, a function of (state.round_key, t) alone.

        One block of uniforms (one random-bits call compiles and runs fastest), turned
        into each variable by its inverse distribution function.
        """
        round_key = jax.random.fold_in(state.round_key, t)
        u = jax.random.uniform(round_key, (7 + d, n, m))
        cover = u[0] < params.coverage[:, None]
        y = compute[0] + (compute[1] - compute[0]) * u[1, :, 0]
        price = state.price
        if pricing == "round":  # its own stream: the other draws are those of "client"
            price = _unit_price(jax.random.uniform(jax.random.fold_in(round_key, 2), (n,)))
        cost = price * y
        if generator == "synthetic":
            context = jnp.moveaxis(u[7:], 0, -1)
            p = jnp.clip(state.intercept + jnp.sum(state.slope * context, -1), 0.0, 1.0)
            return _Round(cover, context, cost, p, u[2] < p, jnp.zeros((n, m), f32))
        bw = bandwidth[0] + (bandwidth[1] - bandwidth[0]) * u[2, :, 0]
        distance = _DISTANCE_KM[0] + (_DISTANCE_KM[1] - _DISTANCE_KM[0]) * u[3]
        shadow = _SHADOWING_DB * jax.scipy.special.ndtri(u[4])
        fading = -jnp.log1p(-u[5:7])  # Exp(1): Rayleigh fading powers, download and upload
        mean_snr = _mean_snr(distance, shadow, bw[:, None], nf)
        se_down = jnp.log2(1.0 + mean_snr * fading[0])
        se_up = jnp.log2(1.0 + mean_snr * fading[1])
        rate = bw[:, None] * se_down  # Mbit/s
        compute_s = params.workload / y
        latency = (
            params.size_mbit / rate + compute_s[:, None] + params.size_mbit / (bw[:, None] * se_up)
        )
        slack = params.deadline_s - params.size_mbit / rate - compute_s[:, None]
        threshold = jnp.exp2(params.size_mbit / (bw[:, None] * jnp.maximum(slack, 1e-30))) - 1.0
        p = jnp.where(slack > 0, jnp.exp(-threshold / mean_snr), 0.0)
        features = [rate / rate_high, (y[:, None] - compute[0]) / (compute[1] - compute[0])]
        if d == 4:
            features = [
                (bw[:, None] - bandwidth[0]) / (bandwidth[1] - bandwidth[0]),
                features[1],
                (distance - _DISTANCE_KM[0]) / (_DISTANCE_KM[1] - _DISTANCE_KM[0]),
                se_down / se_high,
            ]
        shape = (n, m)
        context = jnp.clip(jnp.stack([jnp.broadcast_to(f, shape) for f in features], -1), 0, 1)
        return _Round(cover, context, cost, p, latency <= params.deadline_s, latency)

    def observe(state, t, key, params=None):
        del key  # the round is a function of (round_key, t), so that `step` sees it too
        params = defaults if params is None else params
        r = draw(state, t, params)
        return RoundInput(
            t=jnp.asarray(t, jnp.int32),
            available=jnp.any(r.coverage, axis=1),
            connectivity=r.coverage.astype(f32),
            pair_context=r.context,
            info={"cost": r.cost},
        )

    def best(state, t, r, params):
        if oracle == "X":
            tie_key = jax.random.fold_in(jax.random.fold_in(state.round_key, t), 1)
            selected, _ = assign_ops.max_cardinality(
                r.cost, r.coverage & r.success, budgets, tie_key
            )
            return selected
        # A fixed order of the servers: the oracle is a function of the round alone.
        return assign_ops.solve(
            solver, r.p, r.cost, r.coverage, budgets,
            jax.random.PRNGKey(0), cost_step, units,
        )  # fmt: skip

    def oracle_fn(state, inp, params=None):
        params = defaults if params is None else params
        selected = best(state, inp.t, draw(state, inp.t, params), params)
        return Decision(jnp.any(selected, 1), assign_ops.assignment_of(selected))

    def value(count):
        return count if utility == "linear" else jnp.sqrt(count / m)

    def held_pairs(decision):
        """bool[N, M]: the (client, ES) pairs a decision holds, one per selected client."""
        if decision.assignment is None:
            raise ValueError(
                "envs.hierarchical needs Decision.assignment (the edge server of each "
                "selected client); use a hierarchical policy (bandits.cocs, ...)."
            )
        return assign_ops.pairs_of(decision.assignment, m) & decision.selected[:, None]

    def feasible(state, inp, decision, params=None):
        del state, params
        pairs = held_pairs(decision)
        assigned = jnp.any(pairs, axis=1) | ~decision.selected  # (10d), a server in [0, M)
        covered = ~jnp.any(pairs & (inp.connectivity == 0), axis=1)  # (10c)
        load = jnp.sum(jnp.where(pairs, inp.info["cost"][:, None], 0.0), axis=0)
        # (10b), up to f32 rounding of a sum that a solver may have formed in another order.
        within = load <= budgets * (1.0 + _BUDGET_RTOL)
        return jnp.all(assigned) & jnp.all(covered) & jnp.all(within)

    def step(state, inp, decision, key, params=None):
        del key
        params = defaults if params is None else params
        r = draw(state, inp.t, params)
        # Pairs outside the coverage never succeed (the runner refuses such decisions).
        pairs = held_pairs(decision) & r.coverage
        chosen = best(state, inp.t, r, params)
        won = pairs & r.success
        count = jnp.sum(won).astype(f32)
        if oracle == "X":
            expected, solved = count, jnp.sum(chosen & r.success).astype(f32)
        else:
            expected = jnp.sum(jnp.where(pairs, r.p, 0.0))
            solved = jnp.sum(jnp.where(chosen, r.p, 0.0))
        reference = jnp.maximum(solved, expected)  # the solver is a heuristic (docstring)
        client_success = jnp.any(won, axis=1)
        selected = decision.selected
        time = jnp.sum(jnp.where(pairs, r.latency, 0.0), axis=1)
        # The ES stops waiting at the deadline: a late update's time is reported as that.
        latency = jnp.minimum(time, params.deadline_s)
        feedback = Feedback(
            observed=selected,
            reward=client_success.astype(f32),
            latency=latency,
            success=client_success,
            info={"uncapped_latency": time},
        )
        stats = RoundStats(
            expected_reward=value(expected),
            oracle_reward=value(reference),
            reward=value(count),
            latency=jnp.max(jnp.where(selected, latency, 0.0)),
            num_failed=jnp.sum(selected & ~client_success).astype(f32),
            extras={"successes": count, "selected": jnp.sum(selected).astype(f32)},
        )
        return feedback, state, stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle_fn,
        num_clients=n,
        params=defaults,
        num_selected=None,
        feasible=feasible,
    )


def _unit_price(u):
    """Table I's pricing function: U[0.5, 2] per MHz from uniforms u in [0, 1)."""
    return _PRICE_PER_MHZ[0] + (_PRICE_PER_MHZ[1] - _PRICE_PER_MHZ[0]) * u


def _budget(preset: dict, budget: float | None) -> tuple[float, float]:
    """(B, the cheapest possible client's cost) for `preset`; B = None takes its budget.

    Raises:
      ValueError: B is not positive or below the cheapest cost (no client could be paid).
    """
    compute = preset["compute_mhz"]
    cheapest = _PRICE_PER_MHZ[0] * compute[0]
    b = preset["budget"] if budget is None else validation.positive_float("budget", budget)
    if b < cheapest:
        raise ValueError(
            f"budget must be at least the cheapest possible client's cost "
            f"({_PRICE_PER_MHZ[0]} x {compute[0]} MHz = {cheapest}), got {budget!r}."
        )
    return b, cheapest


def max_cohort(dataset: str, budget: float | None, num_servers: int) -> int:
    """The most clients the budgets can pay for in a round: M floor(B / cheapest cost).

    No client costs less than the lowest unit price times the lowest compute of
    `dataset` (Table I), so no feasible decision selects more (a training environment
    sized by it trains every selected client).

    Args:
      dataset: "mnist" or "cifar10".
      budget: B per ES, None for the data set's.
      num_servers: M >= 1.
    """
    preset = PRESETS[validation.choice("dataset", dataset, tuple(PRESETS))]
    m = validation.positive_int("num_servers", num_servers)
    b, cheapest = _budget(preset, budget)
    # Within the feasibility check's tolerance of the budget (`Env.feasible`).
    return m * int(np.floor(b * (1.0 + _BUDGET_RTOL) / cheapest))


def _mean_snr(distance, shadow_db, bandwidth_mhz, noise_figure_db):
    """P G / N0 of each pair: 23 dBm over the path loss and the noise in the bandwidth.

    JAX arrays in, JAX out (traced too); NumPy otherwise.
    """
    xp = jnp if isinstance(distance, jax.Array) else np
    gain_db = -(path_loss_db(distance) + shadow_db)
    noise_dbm = _NOISE_DBM_PER_HZ + 10.0 * xp.log10(bandwidth_mhz * 1e6) + noise_figure_db
    return 10.0 ** ((_POWER_DBM + gain_db - noise_dbm) / 10.0)


def rate_bounds(preset, noise_figure_db: float) -> tuple[float, float]:
    """99th percentiles of the download rate (Mbit/s) and spectral efficiency, fixed seed."""
    rng = np.random.default_rng(0)
    size = 200_000
    distance = rng.uniform(*_DISTANCE_KM, size)
    shadow = _SHADOWING_DB * rng.standard_normal(size)
    bw = rng.uniform(*preset["bandwidth_mhz"], size)
    snr = _mean_snr(distance, shadow, bw, noise_figure_db) * rng.exponential(size=size)
    se = np.log2(1.0 + snr)
    return float(np.quantile(bw * se, _RATE_QUANTILE)), float(np.quantile(se, _RATE_QUANTILE))
