"""Stationary arms: each client's reward is i.i.d. over rounds around a fixed mean.

The environments of bandit theory, for unit tests and the regret theorems. Client `i`
has mean reward `mu_i`; a round's value is the sum of the selected clients' rewards, so
the oracle picks the k available clients of largest `mu_i` and the pseudo-regret of a
round is `sum_{oracle} mu_i - sum_{selected} mu_i` (combinatorial semi-bandit, Chen,
Wang and Yuan, ICML 2013), among the clients of `RoundInput.available`. Latency is not
modelled (zero). Parameters: `StationaryParams`.

A round's rewards are observed for the selected clients only. Where the cohort is a
small part of the clients (k <= N / `OBSERVED_ONLY_RATIO`), the Bernoulli and Gaussian
environments draw the selected clients' rewards alone (`ops.true_indices`, then
`ops.sampling.uniform_at` / `normal_at`); otherwise they draw all N and read the
selected. A decision that carries its clients' places (`Decision.indices`: round
robin's, the oracle's) has them drawn alone whatever k, with no search. Either way
client i's reward in round t is entry i of the same draw over N (counter-based: it does
not depend on which other clients were selected), so these give the same rewards bit
for bit; which is faster is measured (docs/benchmarks.md): finding the k selected costs
about as much as drawing all N at k = N / 10 on CPU.

A round's statistics are sums over the cohort. Those of a decision with places are
taken at its places (O(k)), and so is the oracle's value they are compared with; those
of a mask are taken over the mask, and so is the oracle's value: each decision and its
oracle are summed alike, so that a decision equal to the oracle's has a regret of
exactly 0 either way, and the two forms agree up to the order of the f32 additions.

A cohort smaller than min(k, |A(t)|) adds nothing for its empty slots where no mean can
be negative (Bernoulli, Beta); where one can (Gaussian), each empty slot is worth the
lowest mean if that is negative, so that leaving out a client never beats the oracle
(`envs.cohort`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp

from fedjax_sel import validation
from fedjax_sel.envs import availability as availability_lib
from fedjax_sel.envs import cohort
from fedjax_sel.ops import count_true, sampling, top_k_mask, true_indices, where_needed
from fedjax_sel.ops import places as places_lib
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats

# Cohorts of at most N / OBSERVED_ONLY_RATIO clients have their rewards drawn alone.
OBSERVED_ONLY_RATIO = 32


def cohort_value(values: chex.Array, places: chex.Array) -> chex.Array:
    """f32[]: the sum of `values` (f32[N]) at `places` (int32[m], entries N for none)."""
    return jnp.sum(places_lib.take(values, places, 0.0))


class StationaryParams(NamedTuple):
    """The parameters of a stationary environment (a pytree; `vmap` may run over it).

    Attributes:
      means: f32[N] fixed means, or None to draw them per trial in the range below.
      means_low: f32[], low end of the uniform range of means drawn per trial.
      means_high: f32[], high end of that range.
      scale: f32[], the reward law's spread (Gaussian `stddev`, Beta `concentration`),
        or None (Bernoulli).
      availability: the parameters of the availability process.
    """

    means: chex.Array | None
    means_low: chex.Array
    means_high: chex.Array
    scale: chex.Array | None
    availability: Any


class StationaryState(NamedTuple):
    """One trial's instance.

    Attributes:
      means: f32[N], expected reward of each client.
      availability: the availability process's state (None for Bernoulli availability).
      full_oracle: bool[N], the k clients of largest mean, the oracle's decision in a
        round in which every client is available.
      full_oracle_indices: int32[k], their places in increasing order.
      full_oracle_reward: f32[], the sum of their means, the oracle's value of such a
        round.
    """

    means: chex.Array
    availability: Any
    full_oracle: chex.Array
    full_oracle_indices: chex.Array
    full_oracle_reward: chex.Array


def _stationary_env(
    num_clients: int,
    num_selected: int,
    means: chex.Array | None,
    means_range: tuple[float, float],
    availability,
    sample: Callable[..., chex.Array],
    bounds: tuple[float, float],
    scale: float | None = None,
    at_positions: bool = True,
) -> Env:
    """Builds a stationary environment from a per-client reward sampler.

    `sample(key, means, scale, index)` draws the rewards of all N clients (f32[N]) when
    `index` is None, or, if `at_positions`, those of the clients `index` (int32[k]),
    the same entries of the same draw over N; `bounds` is the range a mean may take for
    this reward family.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    process = availability_lib.resolve(availability, n)
    low, high = validation.real_interval("means_range", means_range, *bounds)
    if means is not None:
        means = jnp.asarray(validation.array_in_range("means", means, (n,), *bounds))
    defaults = StationaryParams(
        means=means,
        means_low=jnp.float32(low),
        means_high=jnp.float32(high),
        scale=None if scale is None else jnp.float32(scale),
        availability=process.params,
    )

    def empty_slots_value(mu, chosen, available):
        """The value of the slots a cohort of `chosen` clients leaves empty (module
        docstring)."""
        if bounds[0] >= 0.0:  # no mean can be negative: an empty slot is worth 0
            return 0.0
        return cohort.missing(chosen, available, k) * jnp.minimum(jnp.min(mu), 0.0)

    def oracle_value(mu, available):
        return jnp.sum(jnp.where(top_k_mask(mu, available, k), mu, 0.0))

    def oracle_value_at(mu, available):
        return cohort_value(mu, true_indices(top_k_mask(mu, available, k), k))

    def when_unavailable(available, compute, full, *operands):
        """`compute(*operands)` if a client is unavailable, else `full` (arrays computed at
        reset, a pytree)."""
        leaves, tree = jax.tree.flatten(full)
        split = len(leaves)
        return where_needed(
            ~jnp.all(available),
            lambda *x: compute(*x[split:]),
            lambda *x: jax.tree.unflatten(tree, x[:split]),
            *leaves,
            *operands,
        )

    def reset(key, params=None):
        params = defaults if params is None else params
        if params.means is not None:
            mu = params.means
        else:
            mu = jax.random.uniform(key, (n,), minval=params.means_low, maxval=params.means_high)
        best = top_k_mask(mu, jnp.ones((n,), bool), k)
        full = jnp.sum(jnp.where(best, mu, 0.0))
        avail_state = process.init(key, params.availability)
        return StationaryState(mu, avail_state, best, true_indices(best, k), full)

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        available = process.sample(state.availability, t, key, params.availability)
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available)

    def oracle(state, round_input, params=None):
        del params
        available = round_input.available

        def best(mu, available):
            selected = top_k_mask(mu, available, k)
            return selected, true_indices(selected, k)

        full = (state.full_oracle, state.full_oracle_indices)
        selected, indices = when_unavailable(available, best, full, state.means, available)
        return Decision(selected, indices=indices)

    def draw(key, means, scale, decision):
        """The round's rewards: (places, f32[m]), those of the clients `places`
        (int32[m]) alone, or (None, f32[N]), every client's (module docstring)."""
        places = decision.indices
        if not at_positions or (places is None and k * OBSERVED_ONLY_RATIO > n):
            return None, sample(key, means, scale, None)
        if places is None:
            places = true_indices(decision.selected, k)
        return places, sample(key, means, scale, places)

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        selected, available = decision.selected, round_input.available
        places, drawn = draw(key, state.means, params.scale, decision)
        if places is None:
            reward = drawn
        else:
            reward = places_lib.put(jnp.zeros(n), places, drawn)
        if decision.indices is None:
            chosen = count_true(selected)
            value = jnp.sum(jnp.where(selected, state.means, 0.0))
            realized = jnp.sum(jnp.where(selected, reward, 0.0))
            # The k best means, computed at reset, unless a client is unavailable.
            best = when_unavailable(
                available, oracle_value, state.full_oracle_reward, state.means, available
            )
        else:
            # A decision that carries its clients' places is valued at them alone, and
            # so is the oracle's, summed in the same way: the oracle's own decision
            # has a regret of exactly 0.
            at = decision.indices
            chosen = count_true(at < n)
            value = cohort_value(state.means, at)
            if places is None:
                realized = cohort_value(drawn, at)
            else:
                realized = jnp.sum(jnp.where(at < n, drawn, 0.0))
            full = cohort_value(state.means, state.full_oracle_indices)
            best = when_unavailable(available, oracle_value_at, full, state.means, available)
        empty = empty_slots_value(state.means, chosen, available)
        feedback = Feedback(
            observed=selected,
            reward=reward,
            latency=jnp.zeros((n,), jnp.float32),
            success=selected,
        )
        stats = RoundStats(
            expected_reward=value + empty,
            oracle_reward=best,
            reward=realized + empty,
            latency=jnp.float32(0.0),
            num_failed=jnp.float32(0.0),
        )
        avail_state = process.update(state.availability, available, params.availability)
        return feedback, state._replace(availability=avail_state), stats

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle,
        num_clients=n,
        params=defaults,
        num_selected=k,
    )


def bernoulli(
    num_clients: int,
    num_selected: int,
    means: chex.Array | None = None,
    availability=1.0,
    means_range: tuple[float, float] = (0.0, 1.0),
) -> Env:
    """Bernoulli rewards: client `i` succeeds (reward 1) with probability `mu_i`.

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N (the oracle's cohort).
      means: f32[N] in [0, 1], fixed for every trial; None draws them per trial,
        uniformly in `means_range`.
      availability: probability in [0, 1] (or f32[N]) that a client is available, or an
        availability process (`envs.availability`).
      means_range: (low, high) for means drawn per trial.
    """

    def sample(key, mu, scale, index):
        del scale
        if index is None:
            return (jax.random.uniform(key, mu.shape) < mu).astype(jnp.float32)
        return (
            sampling.uniform_at(key, index, mu.shape[0]) < places_lib.take(mu, index, 0.0)
        ).astype(jnp.float32)

    return _stationary_env(
        num_clients, num_selected, means, means_range, availability, sample, (0.0, 1.0)
    )


def gaussian(
    num_clients: int,
    num_selected: int,
    means: chex.Array | None = None,
    stddev: float = 1.0,
    availability=1.0,
    means_range: tuple[float, float] = (0.0, 1.0),
) -> Env:
    """Gaussian rewards `N(mu_i, stddev^2)`.

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      means: f32[N], fixed for every trial; None draws them per trial in `means_range`.
      stddev: reward standard deviation, > 0.
      availability: probability in [0, 1] (or f32[N]) that a client is available, or an
        availability process (`envs.availability`).
      means_range: (low, high) for means drawn per trial.
    """
    sd = validation.positive_float("stddev", stddev)

    def sample(key, mu, scale, index):
        if index is None:
            return mu + scale * jax.random.normal(key, mu.shape)
        return places_lib.take(mu, index, 0.0) + scale * sampling.normal_at(key, index, mu.shape[0])

    return _stationary_env(
        num_clients, num_selected, means, means_range, availability, sample, (-1e30, 1e30), sd
    )


def beta(
    num_clients: int,
    num_selected: int,
    means: chex.Array | None = None,
    concentration: float = 10.0,
    availability=1.0,
    means_range: tuple[float, float] = (0.05, 0.95),
) -> Env:
    """Beta rewards with mean `mu_i` and concentration `a + b = concentration`.

    Args:
      num_clients: N >= 1.
      num_selected: cohort size k, 1 <= k <= N.
      means: f32[N] in (0, 1), fixed for every trial; None draws them per trial.
      concentration: a + b of each client's Beta(a, b), > 0.
      availability: probability in [0, 1] (or f32[N]) that a client is available, or an
        availability process (`envs.availability`).
      means_range: (low, high) inside (0, 1) for means drawn per trial.
    """
    c = validation.positive_float("concentration", concentration)
    validation.real_interval("means_range", means_range, 0.0, 1.0, low_open=True)

    def sample(key, mu, scale, index):
        del index  # always None: jax.random.beta's rejection sampler draws all N
        return jax.random.beta(key, scale * mu, scale * (1.0 - mu))

    return _stationary_env(
        num_clients,
        num_selected,
        means,
        means_range,
        availability,
        sample,
        (1e-6, 1 - 1e-6),
        c,
        at_positions=False,
    )
