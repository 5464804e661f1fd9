r"""Availability processes: which clients can be scheduled in a round, as reusable parts.

A process is a NamedTuple of pure functions and a parameter pytree, like an environment:

- `init(key, params) -> state`, the process's state before round 1, from the
  environment's reset key (a process that draws folds a constant of its own into it, so
  its draws stay apart from the environment's; one that does not ignores it, even None);
- `sample(state, t, key, params) -> bool[N]`, round t's availability, drawn by an
  environment's `observe` before the choice;
- `update(state, available, params) -> state`, called by the environment's `step` with
  the availability the server saw (`RoundInput.available`), so a process with memory
  moves on from what was observed (`Env.observe` returns no state).

Every environment takes `availability=` as a probability, an f32[N] of probabilities
(`bernoulli`) or any process, and `envs.with_availability` puts a process on any
environment. Environments read `RoundInput.available` in `step` and `oracle`, so the
oracle stays exact whatever process produced it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.types import Env

# Folded into a round's key for a wrapper's process, apart from the environment's draws.
_SALT = 0x617661


class Availability(NamedTuple):
    """An availability process over N clients.

    Attributes:
      init: `(key, params) -> state`.
      sample: `(state, t, key, params) -> bool[N]`, the clients available in round t.
      update: `(state, available bool[N], params) -> state`, after the round.
      params: the default parameters (a pytree; `vmap` may run over it).
      num_clients: N, static.
    """

    init: Callable[[chex.PRNGKey, Any], Any]
    sample: Callable[[Any, Any, chex.PRNGKey, Any], chex.Array]
    update: Callable[[Any, chex.Array, Any], Any]
    params: Any
    num_clients: int


class AlwaysParams(NamedTuple):
    """No parameters: every client is available in every round."""


class BernoulliParams(NamedTuple):
    """Attributes: probability: f32[N], chance that each client is available."""

    probability: chex.Array


class MarkovParams(NamedTuple):
    """Attributes:
    turn_on: f32[N], P(available in round t | unavailable in round t - 1).
    turn_off: f32[N], P(unavailable in round t | available in round t - 1).
    """

    turn_on: chex.Array
    turn_off: chex.Array


class TraceParams(NamedTuple):
    """Attributes: trace: bool[T', N], a recorded availability, row t - 1 in round t."""

    trace: chex.Array


def always(num_clients: int) -> Availability:
    """Every client available in every round, with nothing drawn.

    What an availability of 1 means (`resolve` makes it of one): the environment's
    `observe` returns a constant, which XLA folds into everything that reads it (a
    masked top-k, the stationary oracle's check for unavailable clients), where a
    Bernoulli draw with probability 1 gives the same clients at the cost of N random
    numbers and of those folds. It has no parameters to sweep: a sweep over availability
    starts from `bernoulli`.

    Args:
      num_clients: N >= 1.
    """
    n = validation.positive_int("num_clients", num_clients)

    def init(key, params):
        del key, params

    def sample(state, t, key, params):
        del state, t, key, params
        return jnp.ones((n,), bool)

    def update(state, available, params):
        del available, params
        return state

    return Availability(init, sample, update, AlwaysParams(), n)


def bernoulli(probability, num_clients: int | None = None) -> Availability:
    """Each client available independently with its probability, every round.

    Draws `uniform(key, (N,)) < p` with the environment's key, as the environments did
    before processes were parts, so results are unchanged.

    Args:
      probability: a probability in [0, 1] or f32[N] of them.
      num_clients: N >= 1; None takes N from an f32[N] `probability`.
    """
    n = _size(num_clients, probability=probability)
    p = validation.probabilities("availability", probability, n)

    def init(key, params):
        del key, params

    def sample(state, t, key, params):
        del state, t
        return jax.random.uniform(key, (n,)) < params.probability

    def update(state, available, params):
        del available, params
        return state

    return Availability(init, sample, update, BernoulliParams(p), n)


def markov(turn_on, turn_off, num_clients: int | None = None) -> Availability:
    r"""A two-state on/off Markov chain per client (Gilbert-Elliott), started stationary.

    Client i switches on with probability `turn_on_i` and off with `turn_off_i` between
    rounds; its stationary availability is :math:`a_i / (a_i + b_i)` (1 where both are
    0), from which round 1 is drawn, so every round's marginal is stationary.

    Args:
      turn_on: P(off -> on), in [0, 1], a scalar or f32[N].
      turn_off: P(on -> off), in [0, 1], a scalar or f32[N].
      num_clients: N >= 1; None takes N from an f32[N] `turn_on` or `turn_off`.
    """
    n = _size(num_clients, turn_on=turn_on, turn_off=turn_off)
    on = validation.probabilities("turn_on", turn_on, n)
    off = validation.probabilities("turn_off", turn_off, n)

    def init(key, params):
        rate = params.turn_on + params.turn_off
        stationary = jnp.where(rate > 0, params.turn_on / jnp.where(rate > 0, rate, 1.0), 1.0)
        # The state is the previous round's availability; round 1 moves from a stationary draw.
        return jax.random.uniform(jax.random.fold_in(key, _SALT), (n,)) < stationary

    def sample(state, t, key, params):
        del t
        u = jax.random.uniform(key, (n,))
        return jnp.where(state, u >= params.turn_off, u < params.turn_on)

    def update(state, available, params):
        del state, params
        return available

    return Availability(init, sample, update, MarkovParams(on, off), n)


def trace(recorded) -> Availability:
    """Replays a recorded availability trace, cycling: round t reads row (t - 1) mod T'.

    Args:
      recorded: bool[T', N] with T' >= 1, the availability of each recorded round.
    """
    arr = np.asarray(recorded)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1 or arr.dtype != np.bool_:
        raise ValueError(
            f"trace must be a bool[T', N] array with T', N >= 1, got {arr.dtype}{list(arr.shape)}."
        )
    n = arr.shape[1]

    def init(key, params):
        del key, params

    def sample(state, t, key, params):
        del state, key
        rows = params.trace.shape[0]
        return jnp.asarray(params.trace)[(jnp.asarray(t, jnp.int32) - 1) % rows]

    def update(state, available, params):
        del available, params
        return state

    return Availability(init, sample, update, TraceParams(arr), n)


def resolve(availability, num_clients: int) -> Availability:
    """`availability` as a process: an `Availability` as is (checked), `always` for a
    probability of 1 for every client, else `bernoulli`."""
    if isinstance(availability, Availability):
        if availability.num_clients != num_clients:
            raise ValueError(
                f"availability must be a process over the {num_clients} clients, got one over "
                f"{availability.num_clients}."
            )
        return availability
    process = bernoulli(availability, num_clients)
    if np.all(process.params.probability == 1.0):
        return always(num_clients)
    return process


def _size(num_clients, **probabilities) -> int:
    """N: `num_clients` if given, else the length of the first 1-D of `probabilities`
    (by name: a scalar or f32[N] each)."""
    for name, p in probabilities.items():
        if np.ndim(p) > 1:
            raise ValueError(
                f"{name} must be a probability or an f32[N] of them, got shape {np.shape(p)}."
            )
    if num_clients is not None:
        return validation.positive_int("num_clients", num_clients)
    for p in probabilities.values():
        if np.ndim(p) == 1:
            return validation.positive_int("num_clients", len(p))
    raise ValueError("num_clients is required when every probability is a scalar.")


class WithAvailabilityParams(NamedTuple):
    """Attributes: env: the wrapped environment's parameters; availability: the process's."""

    env: Any
    availability: Any


class WithAvailabilityState(NamedTuple):
    """Attributes: env: the wrapped environment's state; availability: the process's."""

    env: Any
    availability: Any


def with_availability(env: Env, process) -> Env:
    """`env` with its availability replaced by `process`.

    Round t's `RoundInput.available` is the process's draw (from a key folded off the
    round's key, so the environment's own draws are unchanged), and the environment's
    `step` and `oracle` see it, so regret stays exact. The environment's own availability
    is overridden; build it with `availability=1.0`, where it has one, to avoid the draw.

    Args:
      env: any `Env`.
      process: an `Availability` over `env.num_clients` clients, or a probability
        (scalar or f32[N]) for `bernoulli`.

    Returns:
      An `Env` whose params are `WithAvailabilityParams(env.params, process.params)`.
    """
    if not isinstance(env, Env):
        raise ValueError(f"env must be an Env, got {type(env).__name__}.")
    process = resolve(process, env.num_clients)
    defaults = WithAvailabilityParams(env.params, process.params)

    def reset(key, params=None):
        params = defaults if params is None else params
        own = process.init(key, params.availability)
        return WithAvailabilityState(env.reset(key, params.env), own)

    def observe(state, t, key, params=None):
        params = defaults if params is None else params
        round_input = env.observe(state.env, t, key, params.env)
        available = process.sample(
            state.availability, t, jax.random.fold_in(key, _SALT), params.availability
        )
        return round_input._replace(available=available)

    def step(state, round_input, decision, key, params=None):
        params = defaults if params is None else params
        feedback, env_state, stats = env.step(state.env, round_input, decision, key, params.env)
        own = process.update(state.availability, round_input.available, params.availability)
        return feedback, WithAvailabilityState(env_state, own), stats

    oracle = None
    if env.oracle is not None:

        def oracle(state, round_input, params=None):
            params = defaults if params is None else params
            return env.oracle(state.env, round_input, params.env)

    feasible = None
    if env.feasible is not None:

        def feasible(state, round_input, decision, params=None):
            params = defaults if params is None else params
            return env.feasible(state.env, round_input, decision, params.env)

    return Env(
        reset=reset,
        observe=observe,
        step=step,
        oracle=oracle,
        num_clients=env.num_clients,
        params=defaults,
        num_selected=env.num_selected,
        feasible=feasible,
    )
