"""The two protocols of the simulator, `Selector` and `Env`, and the arrays between them.

Modelled on optax's `GradientTransformation` and gymnax's `Environment`: pure
functions, states as pytrees, every array of a fixed shape. Shapes below are for a
single Monte Carlo trial; the runner adds a leading trial axis with `jax.vmap`.

`N` is the number of clients, `M` the number of edge servers (hierarchical settings),
`d` a context dimension.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex

PRNGKey = chex.PRNGKey
PolicyState = Any
EnvState = Any


class RoundInput(NamedTuple):
    """What the server knows before it chooses the cohort of round `t`.

    Attributes:
      t: int32[], the round, 1-based.
      available: bool[N], clients that can be scheduled this round.
      context: f32[N, d] or None, per-client context (features of the round).
      connectivity: f32[N, M] or None, client to edge-server connectivity.
      pair_context: f32[N, M, d] or None, per client-server pair contexts.
      oracle: the environment's best `Decision` given expectations, filled by the runner
        for privileged selectors only (`bandits.oracle`); None otherwise.
      info: environment-specific extras a policy may read (a pytree), or None.
    """

    t: chex.Array
    available: chex.Array
    context: chex.Array | None = None
    connectivity: chex.Array | None = None
    pair_context: chex.Array | None = None
    oracle: Decision | None = None
    info: Any = None


class Decision(NamedTuple):
    """The cohort chosen for a round.

    Attributes:
      selected: bool[N], the scheduled clients. Cohort sizes are static; a policy that
        can schedule fewer (availability) leaves slots empty, never changes shapes.
      assignment: int32[N] or None, edge server of each client in hierarchical
        settings, -1 for none.
      probe: f32[N] or None, the examples on which each client evaluated the current
        model at the server's request before the cohort was chosen (Power-of-Choice's
        candidates report their loss; 0 for clients not asked), None for none. An
        environment that models costs charges the probes (`envs.devices`: the download
        and the forward passes, before the round); the others ignore it.
      indices: int32[m] or None, the places of the clients of `selected`, each once, in
        any order, the other entries N: what a policy knows without searching the mask
        (round robin's block, the oracle's cohort). The runner counts the round at them
        (checks, selection counts, Jain's index: O(m), no pass over the N clients), and
        the stationary environments draw and value the cohort at them
        (`envs.bernoulli`, `envs.gaussian`); the other environments read `selected`.
        None where the policy has the mask only.
    """

    selected: chex.Array
    assignment: chex.Array | None = None
    probe: chex.Array | None = None
    indices: chex.Array | None = None


class Feedback(NamedTuple):
    """What the server observes after the round.

    Values of clients outside `observed` are undefined and must be ignored.

    Attributes:
      observed: bool[N], clients whose outcome is observed (normally the selected).
      reward: f32[N], higher is better; each environment documents what it is.
      latency: f32[N], seconds.
      success: bool[N], whether the client finished within the round's deadline.
      context: f32[N, d] or None, contexts revealed after the round.
      info: environment-specific extras (test opinions of all clients, ...), or None.
    """

    observed: chex.Array
    reward: chex.Array
    latency: chex.Array
    success: chex.Array
    context: chex.Array | None = None
    info: Any = None


class RoundStats(NamedTuple):
    """What the metrics need and the policy must not see, for one round of one trial.

    Attributes:
      expected_reward: f32[], expected value of the decision given the round's input.
      oracle_reward: f32[], expected value of the oracle's decision; the difference is
        the round's pseudo-regret. None where the environment has no oracle (regret is
        undefined there, not zero).
      reward: f32[], realized value of the decision.
      latency: f32[], round latency in seconds (the slowest selected client).
      num_failed: f32[], selected clients that failed (missed the deadline).
      loss: f32[] or None, global-model loss in training-backed environments.
      accuracy: f32[] or None, global-model accuracy in training-backed environments.
      extras: dict of f32[] scalars, further environment metrics, reduced like the rest.
    """

    expected_reward: chex.Array
    oracle_reward: chex.Array | None
    reward: chex.Array
    latency: chex.Array
    num_failed: chex.Array
    loss: chex.Array | None = None
    accuracy: chex.Array | None = None
    extras: dict[str, chex.Array] | None = None


class Selector(NamedTuple):
    """A client-selection policy as three pure functions.

    Attributes:
      init: `key -> state`.
      select: `(state, round_input, key) -> (decision, state)`.
      update: `(state, decision, feedback) -> state`.
      privileged: True for selectors that read `RoundInput.oracle` (oracles); the
        runner fills that field for them alone.
      max_rounds: the most rounds the policy is defined for, where its state has a
        capacity fixed at construction (the compressed Quick-Init UCB's `horizon`), or
        None; the runners refuse longer runs (`runner.check_rounds`).
    """

    init: Callable[[PRNGKey], PolicyState]
    select: Callable[[PolicyState, RoundInput, PRNGKey], tuple[Decision, PolicyState]]
    update: Callable[[PolicyState, Decision, Feedback], PolicyState]
    privileged: bool = False
    max_rounds: int | None = None


class Env(NamedTuple):
    """A gymnax-style environment of clients: pure functions over an explicit state.

    Parameters are a pytree separate from the state (gymnax's `EnvParams`): every
    function takes them LAST, optional, `params=None` meaning `Env.params`. So
    `env.reset(key)` uses the defaults, and a sweep maps over parameter values without a
    new compile per value, `jax.vmap(env.reset, in_axes=(None, 0))(key, batched_params)`.
    Shapes and sizes (N, k, static options) stay arguments of the factory.

    Attributes:
      reset: `(key, params) -> env_state`, draws one trial's instance (means, geometry,
        the availability process's start).
      observe: `(env_state, t, key, params) -> RoundInput`, what the server sees first.
      step: `(env_state, round_input, decision, key, params) -> (feedback, env_state,
        stats)`. It reads the availability from `round_input.available` (what the server
        saw), never from a second draw, so that any availability process composes.
      oracle: `(env_state, round_input, params) -> Decision`, the best decision given
        expectations and `round_input.available`, or None where the environment has no
        tractable oracle (its `RoundStats.oracle_reward` is then None: regret undefined).
      num_clients: N, static.
      params: the default parameters, a NamedTuple pytree of arrays (numeric, non-shape
        arguments: availability, ranges, deadlines, noise, ...); each environment
        documents its own.
      num_selected: the largest cohort a decision may select (k), or None where any
        number is accepted; the runner refuses decisions above it.
      feasible: `(env_state, round_input, decision, params) -> bool[]`, whether the
        environment accepts the decision beyond the checks every environment makes (no
        unavailable client, at most `num_selected`): per-server cohorts or budgets, say;
        None where there are no further constraints. The runner refuses policies whose
        decisions are not accepted. Whatever a decision it accepts, the environment
        makes its expected reward at most the oracle's: each environment documents what
        a cohort smaller than it could schedule is worth.
    """

    reset: Callable[..., EnvState]
    observe: Callable[..., RoundInput]
    step: Callable[..., tuple[Feedback, EnvState, RoundStats]]
    oracle: Callable[..., Decision] | None
    num_clients: int
    params: Any = None
    num_selected: int | None = None
    feasible: Callable[..., Any] | None = None

    # Hashable (program caches key on the environment) although `params` holds arrays:
    # by the functions and sizes, `params` by identity.
    def _key(self) -> tuple:
        return (
            self.reset,
            self.observe,
            self.step,
            self.oracle,
            self.num_clients,
            self.num_selected,
            self.feasible,
            id(self.params),
        )

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, Env) and self._key() == other._key()

    def __ne__(self, other) -> bool:
        return not self == other
