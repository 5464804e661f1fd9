"""The compiled programs of one policy: initial carry, rounds, per-trial totals.

Randomness (common random numbers). From `seed` come four independent streams:
  - instance: trial m's environment is `env.reset(fold_in(k_reset, m))`;
  - environment: round t of trial m uses `fold_in(fold_in(k_env, m), t)`;
  - policy init: `selector.init(fold_in(k_init, m))`;
  - policy: round t of trial m uses `fold_in(fold_in(k_policy, m), t)`.
None depends on which policy runs, so every policy faces the same instances, channels
and availability, and two copies of one policy give identical numbers.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import sys
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_sel import metrics
from fedjax_sel.ops import double
from fedjax_sel.runner.reduction import tree_sum
from fedjax_sel.types import Decision, Env, Selector


class Keys(NamedTuple):
    reset: chex.PRNGKey
    env: chex.PRNGKey
    init: chex.PRNGKey
    policy: chex.PRNGKey


def keys(seed: int) -> Keys:
    return Keys(*jax.random.split(jax.random.PRNGKey(seed), 4))


def metric_layout(env: Env, run_keys: Keys) -> metrics.Layout:
    """The metrics `env` reports (`metrics.layout` of its `RoundStats`), from shapes."""
    state = jax.eval_shape(env.reset, run_keys.reset)
    inp = jax.eval_shape(env.observe, state, 1, run_keys.env)
    dec = jax.eval_shape(env.oracle, state, inp) if env.oracle is not None else None
    if dec is None:
        dec = Decision(jax.ShapeDtypeStruct((env.num_clients,), jnp.bool_))
    _, _, stats = jax.eval_shape(env.step, state, inp, dec, run_keys.env)
    return metrics.layout(stats)


# XLA options of the runner's programs per platform, passed to `jax.jit` for these
# programs only (nothing else in the process sees them). On CPU, loops are vectorised
# with 512-bit registers where the processor has them (AVX-512; elsewhere LLVM keeps the
# widest the target supports): on an AVX-512 Xeon this made `ucb` rounds 19-26% faster
# (README, "Speed"). Every chunk and device of a run compiles with the same options,
# so results stay independent of chunking and device count; against programs compiled
# without them, a sum of non-integer values over the clients of a trial can round
# differently in its last bit (XLA's reduction loops add in vector-width order).
COMPILER_OPTIONS = {"cpu": {"xla_cpu_prefer_vector_width": 512}}


def compiler_options(platform: str) -> tuple[tuple[str, Any], ...]:
    """`COMPILER_OPTIONS` of `platform` as sorted (name, value) pairs, a cache key."""
    return tuple(sorted(COMPILER_OPTIONS.get(platform, {}).items()))


def checked_programs(name, run_keys, num_trials, num_rounds, env, selector, layout, options, mesh):
    """The policy's programs (`programs(env, selector, layout, options, mesh)`), traced
    once on abstract inputs of `num_trials` trials and `num_rounds` rounds, so that a
    policy that does not fit the environment, or has a bug, fails before anything
    compiles or runs.

    The inputs are laid out as the first chunk's calls lay them out (`compile_programs`),
    so that compiling `run_rounds` for `num_rounds` rounds finds this trace in JAX's
    cache instead of tracing the policy again.

    The exception raised while tracing propagates as it is, with its own type and
    traceback; on Python >= 3.11 it carries a note naming the policy.
    """
    program = programs(env, selector, layout, options, mesh)
    init_carry, run_rounds, _ = program
    split = NamedSharding(mesh, PartitionSpec("trials"))
    ids = jax.ShapeDtypeStruct((num_trials,), jnp.int32, sharding=split)
    valid = jax.ShapeDtypeStruct((num_trials,), jnp.bool_, sharding=split)
    with naming_policy(name):
        carry = _carry_shapes(init_carry, run_keys, env.params, ids)
        rounds = jax.ShapeDtypeStruct((num_rounds,), jnp.int32)
        jax.eval_shape(run_rounds, carry, run_keys, env.params, ids, valid, rounds)
    return program


def _carry_shapes(init_carry, run_keys, params, trial_ids):
    """The carry's shapes as `init_carry` returns it, split like `trial_ids`."""
    return jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=trial_ids.sharding),
        jax.eval_shape(init_carry, run_keys, params, trial_ids),
    )


def compile_programs(programs_, run_keys, params, trial_ids, valid, lengths, num_rounds) -> None:
    """Compiles a policy's programs (`build_programs`) for the arguments of a chunk's calls,
    at once: `init_carry`, `run_rounds` for each number of rounds in `lengths` (a set of
    ints), and `finish`, so that the calls find their executables in JAX's caches.

    The programs are traced and lowered in turn (Python, holding the GIL), then compiled
    each on a thread of its own (XLA releases the GIL): `run_rounds`'s compilation keeps
    about 1.4 of 2 cores busy, and the others' fill the rest (docs/benchmarks.md,
    "Compilation"). The carry's shapes come from `init_carry`'s trace, laid out as its
    calls return it (split over the mesh's "trials" axis), so that each lowering is the
    one its calls would make.
    """
    init_carry, run_rounds, finish = programs_
    carry = _carry_shapes(init_carry, run_keys, params, trial_ids)
    rounds = [jnp.arange(1, 1 + length, dtype=jnp.int32) for length in sorted(lengths)]
    lowered = [
        *(run_rounds.lower(carry, run_keys, params, trial_ids, valid, r) for r in rounds),
        init_carry.lower(run_keys, params, trial_ids),
        finish.lower(carry, valid, jnp.float32(num_rounds)),
    ]
    with concurrent.futures.ThreadPoolExecutor(len(lowered)) as pool:
        for compiled in [pool.submit(program.compile) for program in lowered]:
            compiled.result()


@contextlib.contextmanager
def naming_policy(name: str):
    """Lets an exception raised while tracing policy `name` propagate as it is, with its
    own type and traceback, and on Python >= 3.11 a note naming the policy."""
    try:
        yield
    except Exception as e:
        if sys.version_info >= (3, 11):
            e.add_note(f"raised while tracing policy {name!r} on this environment")
        raise


def check_decision(decision, num_clients: int) -> None:
    """Raises ValueError unless `decision` (traced) is a `Decision` with `selected` bool[N],
    `assignment` None or an integer [N], `probe` None or a float [N] and `indices` None or
    an integer [m]: the checks that
    need only shapes, made while the programs are traced (`checked_programs`), before
    anything runs."""
    if not isinstance(decision, Decision):
        raise ValueError(
            f"select must return a fedjax_sel.Decision, got {type(decision).__name__}."
        )
    fields = (
        ("selected", jnp.bool_, f"bool[{num_clients}] (one flag per client)", False),
        (
            "assignment",
            jnp.integer,
            f"int32[{num_clients}] (a server per client, -1 for none)",
            True,
        ),
        (
            "probe",
            jnp.floating,
            f"f32[{num_clients}] (examples each client evaluated, 0 for none)",
            True,
        ),
    )
    for name, kind, wanted, optional in fields:
        value = getattr(decision, name)
        if optional and value is None:
            continue
        if getattr(value, "shape", None) != (num_clients,) or not jnp.issubdtype(value.dtype, kind):
            raise ValueError(
                f"Decision.{name} must be {'None or ' if optional else ''}{wanted}, got "
                f"{getattr(value, 'dtype', type(value).__name__)}"
                f"{list(getattr(value, 'shape', ()))}."
            )
    indices = decision.indices
    if indices is not None and (
        getattr(indices, "ndim", None) != 1 or not jnp.issubdtype(indices.dtype, jnp.integer)
    ):
        raise ValueError(
            f"Decision.indices must be None or int32[m] (the selected clients' places, the "
            f"rest {num_clients}), got {getattr(indices, 'dtype', type(indices).__name__)}"
            f"{list(getattr(indices, 'shape', ()))}."
        )


def programs(env: Env, selector: Selector, *settings):
    """`build_programs(env, selector, *settings)`, cached when the env and selector are
    hashable (they normally are: tuples of functions), so that a second `simulate` of the
    same objects reuses the compiled executables instead of tracing and compiling again.

    The programs take the environment's parameters as an argument (`env.params`), so the
    cache ignores them: an environment with other parameter values of the same shapes
    (`env._replace(params=...)`) runs on the programs already compiled.
    """
    env = env._replace(params=None)
    try:
        hash((env, selector))
    except TypeError:
        return build_programs.__wrapped__(env, selector, *settings)
    return build_programs(env, selector, *settings)


@functools.lru_cache(maxsize=16)
def build_programs(
    env: Env,
    selector: Selector,
    metric_layout: metrics.Layout,
    options: tuple,
    mesh: Mesh,
):
    """Returns jitted (init_carry, run_rounds, finish) for one policy, measuring the
    metrics of `metric_layout`, compiled with the XLA `options` ((name, value) pairs,
    `compiler_options`), over the `mesh` of devices whose one axis, "trials", splits the
    trials into `device_block`s.

    Each device reduces its own block: the per-round sums and the selection counts come
    back with a leading axis of one entry per device, for the host to join (`tree_sum`).
    No value crosses devices inside a chunk (between CPU devices, an all-reduce in every
    round cost more than the round: docs/benchmarks.md).
    """
    n = env.num_clients
    jit = functools.partial(jax.jit, compiler_options=dict(options) or None)
    # No collectives: the check of which values vary across devices has nothing to find.
    per_device = functools.partial(jax.shard_map, mesh=mesh, check_vma=False)
    split, whole = PartitionSpec("trials"), PartitionSpec()

    def init_trial(run_keys, params, m):
        env_state = env.reset(jax.random.fold_in(run_keys.reset, m), params)
        policy_state = selector.init(jax.random.fold_in(run_keys.init, m))
        return env_state, policy_state, metrics.init_running(metric_layout, n)

    def trial_round(run_keys, params, carry, t, m):
        env_state, policy_state, running = carry
        round_key = jax.random.fold_in(jax.random.fold_in(run_keys.env, m), t)
        obs_key, step_key = jax.random.split(round_key)
        policy_key = jax.random.fold_in(jax.random.fold_in(run_keys.policy, m), t)
        inp = env.observe(env_state, t, obs_key, params)
        if selector.privileged:
            inp = inp._replace(oracle=env.oracle(env_state, inp, params))
        decision, policy_state = selector.select(policy_state, inp, policy_key)
        check_decision(decision, n)
        invalid = metrics.decision_violations(decision, inp.available, env.num_selected)
        if env.feasible is not None:
            invalid |= ~env.feasible(env_state, inp, decision, params)
        feedback, env_state, stats = env.step(env_state, inp, decision, step_key, params)
        policy_state = selector.update(policy_state, decision, feedback)
        running, values = metrics.round_values(metric_layout, running, stats, decision, invalid, t)
        return (env_state, policy_state, running), values

    # Per device too, so that the carry comes out as `run_rounds` returns it: a carry
    # sharded otherwise would compile `run_rounds` a second time.
    @jit
    @functools.partial(per_device, in_specs=(whole, whole, split), out_specs=split)
    def init_carry(run_keys, params, trial_ids):
        return jax.vmap(init_trial, in_axes=(None, None, 0))(run_keys, params, trial_ids)

    # The carry is donated: chunk after chunk reuses its buffers instead of copying them.
    @functools.partial(jit, donate_argnums=0)
    @functools.partial(
        per_device, in_specs=(split, whole, whole, split, split, whole), out_specs=(split, split)
    )
    def run_rounds(carry, run_keys, params, trial_ids, valid, rounds):
        def body(carry, t):
            carry, values = jax.vmap(trial_round, in_axes=(None, None, 0, None, 0))(
                run_keys, params, carry, t, trial_ids
            )
            values = jnp.where(valid[:, None, None], values, 0.0)
            return carry, tree_sum(double.moments(values), double.add)

        carry, sums = lax.scan(body, carry, rounds)
        return carry, sums[None]

    @jit
    @functools.partial(per_device, in_specs=(split, split, whole), out_specs=(split, split, split))
    def finish(carry, valid, num_rounds):
        """Per-trial totals f32[trials, totals, 2] (double-f32), the per-device sums of
        the selection counts f32[1, N], and each trial's largest cohort and number of
        invalid rounds, f32[trials, 2]."""
        running = carry[2]
        per_trial = metrics.trial_totals(metric_layout, running, num_rounds)
        # Integer-valued counts sum exactly; the host divides by T * M.
        counts = tree_sum(jnp.where(valid[:, None], running.selections.counts, 0.0))[None]
        return per_trial, counts, jnp.stack([running.largest_cohort, running.invalid_rounds], -1)

    return init_carry, run_rounds, finish
