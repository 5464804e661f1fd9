"""Monte Carlo trials for Tong et al.'s figures: the metrics the runner does not keep.

`run_trials` plays a policy against an environment like `fedjax_sel.simulate` (a
`lax.scan` over slots of a `vmap` over trials, the environment's randomness from its own
key stream, so that every policy faces the same draws), and reduces on the device what
Tong et al.'s figures and Table I read: the per-slot means over trials of the accuracy,
the set reward and its expectation, the oracle's expectation and each client's belief
(Fig. 8, where the policy keeps one), the per-trial selection counts (Fig. 6), and, per
accuracy target, each trial's first slot at or above it and the accuracy there (Table I,
spec A26: a trial that never reaches it counts T slots and its last accuracy).

The trials run in chunks, each split over the devices (one per core under
`fedjax_sel.configure_cpu`), chosen as `fedjax_sel.simulate` chooses them: on CPU, so
that a device's arrays stay in its cache through the slots
(`runner.cpu_trials_per_chunk`; the super-arm policies keep 15,504 or more entries per
trial). The per-slot sums over trials follow the runner's fixed dyadic tree
(`fedjax_sel.runner.tree_sum`), so the results are the same bit for bit whatever the
chunking or the number of devices (a device's block is two trials at least).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from fedjax_sel import runner, validation
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
    trials_per_chunk: int | None = None,
    devices=None,
) -> TrialResults:
    """Runs `num_trials` trials of `num_rounds` slots (see the module docstring).

    Args:
      selector, env: the policy and its environment.
      num_rounds: T >= 1 slots.
      num_trials: M >= 1 trials.
      seed: the run's seed; trial m's draws depend on it and m alone.
      targets: the accuracy targets of `slots_to_target`.
      trials_per_chunk: trials per program call over all the devices, a power of two;
        by default as `fedjax_sel.simulate` chooses (`runner.choose_trials_per_chunk`).
      devices: the devices that split each chunk, by default this process's
        (`jax.local_devices()`).
    """
    num_rounds = validation.positive_int("num_rounds", num_rounds)
    num_trials = validation.positive_int("num_trials", num_trials)
    runner.check_rounds({"policy": selector}, num_rounds)
    devices = tuple(jax.local_devices() if devices is None else devices)
    trials_per_chunk = runner.choose_trials_per_chunk(
        {"policy": selector},
        env,
        num_rounds,
        num_trials,
        trials_per_chunk,
        None,
        len(devices),
        devices[0].platform,
    ) or (1 << (num_trials - 1).bit_length())
    # A block of one trial would compile without its batch axis, and XLA may round the
    # policy's reductions differently there (by an ulp): blocks of two at least.
    block = max(2, runner.device_block(trials_per_chunk, len(devices)))
    program = _program(selector, env, num_rounds, tuple(targets), devices, block)
    key = jax.random.PRNGKey(seed)
    # Every chunk is dispatched before any result is read: the devices run them in turn.
    step = block * len(devices)
    chunks = [program(key, first, num_trials) for first in range(0, num_trials, step)]
    sums, per_trial, state = (
        [jax.device_get(chunk[part]) for chunk in chunks] for part in range(3)
    )
    means = jax.tree.map(
        lambda *x: runner.tree_sum(np.concatenate(x)) / np.float32(num_trials), *sums
    )
    counts, hit, at_hit = (np.concatenate(x)[:num_trials] for x in zip(*per_trial, strict=True))
    accuracy, reward, expected, oracle, belief = means
    return TrialResults(
        accuracy=accuracy,
        reward=reward,
        expected=expected,
        oracle=oracle,
        belief=belief,
        counts=counts,
        slots_to_target=hit.astype(np.float32),
        accuracy_at_target=at_hit,
        final_state=jax.tree.map(lambda *x: np.concatenate(x)[:num_trials], *state),
    )


@functools.lru_cache(maxsize=16)
def _program(selector, env, num_rounds, targets, devices, block):
    """The jitted call `(key, first, num_trials) -> (sums, per_trial, final_state)` of
    trials `first`, ..., `first + block * len(devices) - 1`, a block of `block` on each
    device: the per-slot tree sums over each block's trials below `num_trials` (traced,
    so that another number of trials compiles nothing; leading axis: one per device),
    and each trial's counts, hits and final state."""
    goals = jnp.asarray(targets, jnp.float32).reshape(-1)
    n = env.num_clients
    mesh = Mesh(np.asarray(devices), ("trials",))
    split = PartitionSpec("trials")

    # No collectives (as the runner's programs): no varying values to check.
    @functools.partial(
        jax.shard_map,
        mesh=mesh,
        in_specs=(PartitionSpec(), split, PartitionSpec()),
        out_specs=split,
        check_vma=False,
    )
    def blocks(key, trials, num_trials):
        env_key, policy_key = jax.random.split(key)
        valid = trials < num_trials
        env_keys = jax.vmap(lambda m: jax.random.fold_in(env_key, m))(trials)
        policy_keys = jax.vmap(lambda m: jax.random.fold_in(policy_key, m))(trials)
        env_state = jax.vmap(lambda k: env.reset(jax.random.fold_in(k, 0)))(env_keys)
        state = jax.vmap(lambda k: selector.init(jax.random.fold_in(k, 0)))(policy_keys)

        def valid_sum(x):
            """The tree sum over the block's trials below `num_trials`."""
            return runner.tree_sum(
                jnp.where(valid.reshape(valid.shape + (1,) * (x.ndim - 1)), x, 0)
            )

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
            return (env_state, state, counts + selected, hit, at_hit), jax.tree.map(valid_sum, out)

        zeros = jnp.zeros((trials.shape[0], goals.shape[0]))
        carry = (env_state, state, jnp.zeros((trials.shape[0], n)), zeros.astype(jnp.int32), zeros)
        carry, sums = jax.lax.scan(body, carry, jnp.arange(1, num_rounds + 1, dtype=jnp.int32))
        _, state, counts, hit, at_hit = carry
        return jax.tree.map(lambda x: x[None], sums), (counts, hit, at_hit), state

    @jax.jit
    def program(key, first, num_trials):
        trials = first + jnp.arange(block * len(devices), dtype=jnp.int32)
        return blocks(key, trials, num_trials)

    return program
