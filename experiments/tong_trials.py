"""Monte Carlo trials for Tong et al.'s figures: the metrics the runner does not keep.

`run_trials` plays a policy against an environment like `fedjax_sel.simulate` (a
`lax.scan` over slots of a `vmap` over trials, the environment's randomness from its own
key stream, so that every policy faces the same draws), and reduces on the device what
Tong et al.'s figures and Table I read: the per-slot means over trials of the accuracy,
the set reward and its expectation, the oracle's expectation and each client's belief
(Fig. 8, where the policy keeps one), the per-trial selection counts (Fig. 6), and, per
accuracy target, each trial's first slot at or above it and the accuracy there (Table I,
spec A26: a trial that never reaches it counts T slots and its last accuracy).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.types import Env, Selector


class TrialResults(NamedTuple):
    """Per-slot means over trials (f32[T]) and per-trial values (leading axis M).

    Attributes:
      accuracy: f32[T], the slot's accuracy (`RoundStats.accuracy`, else the reward).
      reward: f32[T], the realised set reward (mean opinion, eq. 8).
      expected: f32[T], its expectation.
      oracle: f32[T], the oracle's expectation (the expectation where there is none).
      belief: f32[T, N], the mean belief of each client, or None.
      counts: f32[M, N], each trial's selections per client.
      slots_to_target: f32[M, G], each trial's first slot with accuracy >= target g.
      accuracy_at_target: f32[M, G], its accuracy there.
      final_state: the policies' states after the last slot (leading axis M).
    """

    accuracy: np.ndarray
    reward: np.ndarray
    expected: np.ndarray
    oracle: np.ndarray
    belief: np.ndarray | None
    counts: np.ndarray
    slots_to_target: np.ndarray
    accuracy_at_target: np.ndarray
    final_state: Any


def run_trials(
    selector: Selector,
    env: Env,
    num_rounds: int,
    num_trials: int,
    seed: int = 0,
    targets: tuple[float, ...] = (),
) -> TrialResults:
    """Runs `num_trials` trials of `num_rounds` slots (see the module docstring)."""
    return _program(selector, env, num_rounds, num_trials, tuple(targets))(jax.random.PRNGKey(seed))


@functools.lru_cache(maxsize=16)
def _program(selector, env, num_rounds, num_trials, targets):
    goals = jnp.asarray(targets, jnp.float32).reshape(-1)
    n = env.num_clients

    @jax.jit
    def program(key):
        env_key, policy_key = jax.random.split(key)
        trials = jnp.arange(num_trials)
        env_keys = jax.vmap(lambda m: jax.random.fold_in(env_key, m))(trials)
        policy_keys = jax.vmap(lambda m: jax.random.fold_in(policy_key, m))(trials)
        env_state = jax.vmap(lambda k: env.reset(jax.random.fold_in(k, 0)))(env_keys)
        state = jax.vmap(lambda k: selector.init(jax.random.fold_in(k, 0)))(policy_keys)

        def one(env_state, state, env_key, policy_key, t):
            obs_key, step_key = jax.random.split(jax.random.fold_in(env_key, t))
            inp = env.observe(env_state, t, obs_key)
            if selector.privileged:
                inp = inp._replace(oracle=env.oracle(env_state, inp))
            decision, state = selector.select(state, inp, jax.random.fold_in(policy_key, t))
            feedback, env_state, stats = env.step(env_state, inp, decision, step_key)
            state = selector.update(state, decision, feedback)
            accuracy = stats.reward if stats.accuracy is None else stats.accuracy
            oracle = stats.expected_reward if stats.oracle_reward is None else stats.oracle_reward
            belief = getattr(state, "belief", None)
            out = (accuracy, stats.reward, stats.expected_reward, oracle, belief)
            return env_state, state, decision.selected, out

        def body(carry, t):
            env_state, state, counts, hit, at_hit = carry
            env_state, state, selected, out = jax.vmap(one, in_axes=(0, 0, 0, 0, None))(
                env_state, state, env_keys, policy_keys, t
            )
            accuracy = out[0]
            first = (hit == 0) & (accuracy[:, None] >= goals)
            hit = jnp.where(first, t, hit)
            at_hit = jnp.where(first, accuracy[:, None], at_hit)
            last = t == num_rounds
            at_hit = jnp.where(last & (hit == 0), accuracy[:, None], at_hit)
            hit = jnp.where(last & (hit == 0), num_rounds, hit)
            means = jax.tree.map(lambda x: jnp.mean(x, axis=0), out)
            return (env_state, state, counts + selected, hit, at_hit), means

        zeros = jnp.zeros((num_trials, goals.shape[0]))
        carry = (env_state, state, jnp.zeros((num_trials, n)), zeros.astype(jnp.int32), zeros)
        carry, means = jax.lax.scan(body, carry, jnp.arange(1, num_rounds + 1, dtype=jnp.int32))
        return carry, means

    def run(key):
        (_, state, counts, hit, at_hit), means = program(key)
        accuracy, reward, expected, oracle, belief = jax.device_get(means)
        return TrialResults(
            accuracy=accuracy,
            reward=reward,
            expected=expected,
            oracle=oracle,
            belief=belief,
            counts=np.asarray(counts),
            slots_to_target=np.asarray(hit, np.float32),
            accuracy_at_target=np.asarray(at_hit),
            final_state=state,
        )

    return run
