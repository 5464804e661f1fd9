"""Stationary arms: each client's reward is i.i.d. over rounds around a fixed mean.

The environments of bandit theory, for unit tests and the regret theorems. Client `i`
has mean reward `mu_i`; a round's value is the sum of the selected clients' rewards, so
the oracle picks the k available clients of largest `mu_i` and the pseudo-regret of a
round is `sum_{oracle} mu_i - sum_{selected} mu_i` (combinatorial semi-bandit, Chen,
Wang and Yuan, ICML 2013). Latency is not modelled (zero).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.ops import top_k_mask
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats


class StationaryState(NamedTuple):
    """One trial's instance.

    Attributes:
      means: f32[N], expected reward of each client.
      availability: f32[N], probability that each client is available in a round.
      full_oracle_reward: f32[], expected reward of the k best clients, the oracle's
        value of every round when all clients are always available.
    """

    means: chex.Array
    availability: chex.Array
    full_oracle_reward: chex.Array


def _stationary_env(
    num_clients: int,
    num_selected: int,
    means: chex.Array | None,
    means_range: tuple[float, float],
    availability,
    sample: Callable[[chex.PRNGKey, chex.Array], chex.Array],
    bounds: tuple[float, float],
) -> Env:
    """Builds a stationary environment from a per-client reward sampler.

    `bounds` is the range a mean may take for this reward family.
    """
    n = validation.positive_int("num_clients", num_clients)
    k = validation.num_selected(num_selected, n)
    avail = jnp.asarray(validation.probabilities("availability", availability, n))
    low, high = means_range
    if means is not None:
        fixed_means = jnp.asarray(validation.array_in_range("means", means, (n,), *bounds))
    elif not low <= high:
        raise ValueError(f"means_range must satisfy low <= high, got {means_range}.")

    # With every client always available the oracle's cohort is fixed per trial: it is
    # computed once at reset instead of by a top-k every round.
    always_available = bool(np.all(np.asarray(avail) == 1.0))

    def oracle_value(mu, available):
        return jnp.sum(jnp.where(top_k_mask(mu, available, k), mu, 0.0))

    def reset(key):
        if means is not None:
            mu = fixed_means
        else:
            mu = jax.random.uniform(key, (n,), minval=low, maxval=high)
        return StationaryState(mu, avail, oracle_value(mu, jnp.ones((n,), bool)))

    def observe(state, t, key):
        if always_available:
            available = jnp.ones((n,), bool)
        else:
            available = jax.random.uniform(key, (n,)) < state.availability
        return RoundInput(t=jnp.asarray(t, jnp.int32), available=available)

    def oracle(state, round_input):
        return Decision(selected=top_k_mask(state.means, round_input.available, k))

    def step(state, round_input, decision, key):
        reward = sample(key, state.means)
        selected = decision.selected
        if always_available:
            oracle_reward = state.full_oracle_reward
        else:
            oracle_reward = oracle_value(state.means, round_input.available)
        feedback = Feedback(
            observed=selected,
            reward=reward,
            latency=jnp.zeros((n,), jnp.float32),
            success=selected,
        )
        stats = RoundStats(
            expected_reward=jnp.sum(jnp.where(selected, state.means, 0.0)),
            oracle_reward=oracle_reward,
            reward=jnp.sum(jnp.where(selected, reward, 0.0)),
            latency=jnp.float32(0.0),
            num_failed=jnp.float32(0.0),
        )
        return feedback, state, stats

    return Env(reset=reset, observe=observe, step=step, oracle=oracle, num_clients=n)


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
      availability: probability in [0, 1] (or f32[N]) that a client is available.
      means_range: (low, high) for means drawn per trial.
    """
    validation.float_in_range("means_range[0]", means_range[0], 0.0, 1.0)
    validation.float_in_range("means_range[1]", means_range[1], 0.0, 1.0)
    sample = lambda key, mu: (jax.random.uniform(key, mu.shape) < mu).astype(jnp.float32)
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
      availability: probability in [0, 1] (or f32[N]) that a client is available.
      means_range: (low, high) for means drawn per trial.
    """
    sd = validation.positive_float("stddev", stddev)
    sample = lambda key, mu: mu + sd * jax.random.normal(key, mu.shape)
    return _stationary_env(
        num_clients, num_selected, means, means_range, availability, sample, (-1e30, 1e30)
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
      availability: probability in [0, 1] (or f32[N]) that a client is available.
      means_range: (low, high) inside (0, 1) for means drawn per trial.
    """
    c = validation.positive_float("concentration", concentration)
    validation.float_in_range("means_range[0]", means_range[0], 0.0, 1.0, low_open=True)
    validation.float_in_range("means_range[1]", means_range[1], 0.0, 1.0)
    sample = lambda key, mu: jax.random.beta(key, c * mu, c * (1.0 - mu))
    return _stationary_env(
        num_clients, num_selected, means, means_range, availability, sample, (1e-6, 1 - 1e-6)
    )
