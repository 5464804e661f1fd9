"""The Monte Carlo runner: `lax.scan` over rounds, `vmap` over trials, chunked and resumable.

Randomness (common random numbers). From `seed` come four independent streams:
  - instance: trial m's environment is `env.reset(fold_in(k_reset, m))`;
  - environment: round t of trial m uses `fold_in(fold_in(k_env, m), t)`;
  - policy init: `selector.init(fold_in(k_init, m))`;
  - policy: round t of trial m uses `fold_in(fold_in(k_policy, m), t)`.
None depends on which policy runs, so every policy faces the same instances, channels
and availability, and two copies of one policy give identical numbers.

Reduction over trials. Each round's per-trial metrics are summed (and their squares)
over trials on device, inside the scan. Floating-point sums depend on their order, so
the order is fixed: a dyadic tree over the global trial index (pairs of adjacent
trials, then pairs of pairs, ...), built from elementwise adds that XLA never
reorders. A chunk of `trials_per_chunk` trials (a power of two) is one subtree; the host
joins the chunks' roots with the same tree. The numbers are therefore the same, bit for
bit on one backend, whatever the chunking or the number of devices.

Memory is O(T * metrics + M * N): per-trial totals are kept, per-round curves only as
sums over trials.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_sel import validation
from fedjax_sel.ops import count_true
from fedjax_sel.results import Results
from fedjax_sel.types import Decision, Env, Selector

# Per-round metrics every environment provides, in the order of the stacked sums.
BASE_METRICS = (
    "regret",
    "cumulative_regret",
    "realized_regret",
    "cumulative_realized_regret",
    "reward",
    "cumulative_reward",
    "latency",
    "cumulative_latency",
    "failed",
    "cumulative_failed",
    "num_selected",
    "jain_index",
)
# Per-trial totals kept for every trial (values after the last round).
TOTALS = (
    "cumulative_regret",
    "cumulative_realized_regret",
    "cumulative_reward",
    "cumulative_latency",
    "cumulative_failed",
    "jain_index",
    "min_selection_fraction",
)


class _Totals(NamedTuple):
    """Running per-trial totals (f32[] each, `counts` f32[N])."""

    regret: chex.Array
    realized_regret: chex.Array
    reward: chex.Array
    latency: chex.Array
    failed: chex.Array
    counts: chex.Array


class _Keys(NamedTuple):
    reset: chex.PRNGKey
    env: chex.PRNGKey
    init: chex.PRNGKey
    policy: chex.PRNGKey


def _keys(seed: int) -> _Keys:
    return _Keys(*jax.random.split(jax.random.PRNGKey(seed), 4))


def jain_index(counts: chex.Array) -> chex.Array:
    """Jain's fairness index (sum c)^2 / (N sum c^2) of f32[..., N]; 1 when all are 0."""
    n = counts.shape[-1]
    sq = jnp.sum(counts * counts, axis=-1)
    total = jnp.sum(counts, axis=-1)
    return jnp.where(sq > 0, total * total / (n * jnp.maximum(sq, 1e-30)), 1.0)


def tree_sum(x: chex.Array) -> chex.Array:
    """Sums over the leading axis along a fixed dyadic tree of elementwise adds.

    Zero-pads the axis to a power of two, then adds adjacent pairs until one row is
    left. The result depends only on the values and their positions, not on how XLA
    lowers a reduction, and a sum over an aligned power-of-two block is a subtree of
    the sum over a larger block. A NumPy array is summed on the host, with the same
    f32 adds (the host joins the sums of chunks and devices).
    """
    xp = np if isinstance(x, np.ndarray) else jnp
    n = x.shape[0]
    size = 1 << max(n - 1, 0).bit_length()
    x = xp.concatenate([x, xp.zeros((size - n,) + x.shape[1:], x.dtype)])
    while x.shape[0] > 1:
        x = x[0::2] + x[1::2]
    return x[0]


def _exact_square(x: chex.Array) -> chex.Array:
    """x * x of x rounded to 12 significant bits, so that every square is exact in f32.

    XLA may contract `a * a + b` into a fused multiply-add for some shapes and not for
    others; with exact squares both round alike, keeping second moments independent of
    the chunking. The rounding changes a variance by a relative 2^-11 at most.
    """
    x = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=11)
    return x * x


def _metric_names(env: Env, keys: _Keys) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Names of the optional per-round metrics (loss, accuracy, extras) this env reports."""
    state = jax.eval_shape(env.reset, keys.reset)
    inp = jax.eval_shape(env.observe, state, 1, keys.env)
    dec = jax.eval_shape(env.oracle, state, inp) if env.oracle is not None else None
    if dec is None:
        dec = Decision(jax.ShapeDtypeStruct((env.num_clients,), jnp.bool_))
    _, _, stats = jax.eval_shape(env.step, state, inp, dec, keys.env)
    optional = tuple(name for name in ("loss", "accuracy") if getattr(stats, name) is not None)
    extras = tuple(sorted(stats.extras)) if stats.extras else ()
    return optional, extras


def _checked_program(name, keys, num_trials, env, selector, *settings):
    """The policy's programs (`_program(env, selector, *settings)`), traced once on
    abstract inputs of `num_trials` trials so that a policy that does not fit the
    environment (a missing context, a dimension mismatch) fails before anything
    compiles or runs, with the policy's name in the message."""
    program = _program(env, selector, *settings)
    init_carry, run_rounds, _ = program
    ids = jax.ShapeDtypeStruct((num_trials,), jnp.int32)
    try:
        carry = jax.eval_shape(init_carry, keys, ids)
        jax.eval_shape(
            run_rounds,
            carry,
            keys,
            ids,
            jax.ShapeDtypeStruct((num_trials,), jnp.bool_),
            jax.ShapeDtypeStruct((1,), jnp.int32),
        )
    except (ValueError, TypeError, AttributeError, IndexError) as e:
        raise ValueError(f"policy {name!r} does not fit this environment: {e}") from e
    return program


def _program(env: Env, selector: Selector, *settings):
    """`_build_program(env, selector, *settings)`, cached when the env and selector are
    hashable (they normally are: tuples of functions), so that a second `simulate` of the
    same objects reuses the compiled executables instead of tracing and compiling again."""
    try:
        hash((env, selector))
    except TypeError:
        return _build_program.__wrapped__(env, selector, *settings)
    return _build_program(env, selector, *settings)


# XLA options of the runner's programs per platform. On CPU, loops are vectorised with
# 512-bit registers where the processor has them (AVX-512; elsewhere LLVM keeps the
# widest the target supports): on an AVX-512 Xeon this made `ucb` rounds 19-26% faster
# (docs/benchmarks.md). Every chunk and device of a run compiles with the same options,
# so results stay independent of chunking and device count; against programs compiled
# without them, a sum of non-integer values over the clients of a trial can round
# differently in its last bit (XLA's reduction loops add in vector-width order).
COMPILER_OPTIONS = {"cpu": {"xla_cpu_prefer_vector_width": 512}}


def _compiler_options(platform: str) -> tuple[tuple[str, Any], ...]:
    """`COMPILER_OPTIONS` of `platform` as sorted (name, value) pairs, a cache key."""
    return tuple(sorted(COMPILER_OPTIONS.get(platform, {}).items()))


@functools.lru_cache(maxsize=16)
def _build_program(
    env: Env,
    selector: Selector,
    names: tuple[str, ...],
    extras: tuple[str, ...],
    options: tuple,
    mesh: Mesh,
):
    """Returns jitted (init_carry, run_rounds, finish) for one policy, compiled with the
    XLA `options` ((name, value) pairs, `_compiler_options`), over the `mesh` of devices
    whose one axis, "trials", splits the trials into `device_block`s.

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

    def init_trial(keys, m):
        env_state = env.reset(jax.random.fold_in(keys.reset, m))
        policy_state = selector.init(jax.random.fold_in(keys.init, m))
        zero = jnp.float32(0.0)
        totals = _Totals(zero, zero, zero, zero, zero, jnp.zeros((n,), jnp.float32))
        return env_state, policy_state, totals

    def trial_round(keys, carry, t, m):
        env_state, policy_state, tot = carry
        obs_key, step_key = jax.random.split(jax.random.fold_in(jax.random.fold_in(keys.env, m), t))
        policy_key = jax.random.fold_in(jax.random.fold_in(keys.policy, m), t)
        inp = env.observe(env_state, t, obs_key)
        if selector.privileged:
            inp = inp._replace(oracle=env.oracle(env_state, inp))
        decision, policy_state = selector.select(policy_state, inp, policy_key)
        feedback, env_state, stats = env.step(env_state, inp, decision, step_key)
        policy_state = selector.update(policy_state, decision, feedback)
        regret = stats.oracle_reward - stats.expected_reward
        realized = stats.oracle_reward - stats.reward
        selected = decision.selected.astype(jnp.float32)
        tot = _Totals(
            regret=tot.regret + regret,
            realized_regret=tot.realized_regret + realized,
            reward=tot.reward + stats.reward,
            latency=tot.latency + stats.latency,
            failed=tot.failed + stats.num_failed,
            counts=tot.counts + selected,
        )
        values = [
            regret,
            tot.regret,
            realized,
            tot.realized_regret,
            stats.reward,
            tot.reward,
            stats.latency,
            tot.latency,
            stats.num_failed,
            tot.failed,
            # Exact, like a sum of the f32 selection below 2^24 clients, and cheaper: the
            # copy that XLA writes for YNNPACK's sum is half the size (docs/benchmarks.md).
            count_true(decision.selected),
            jain_index(tot.counts),
        ]
        values += [getattr(stats, name) for name in names]
        values += [stats.extras[name] for name in extras]
        return (env_state, policy_state, tot), jnp.stack(
            [jnp.asarray(v, jnp.float32) for v in values]
        )

    # Per device too, so that the carry comes out as `run_rounds` returns it: a carry
    # sharded otherwise would compile `run_rounds` a second time.
    @jit
    @functools.partial(per_device, in_specs=(whole, split), out_specs=split)
    def init_carry(keys, trial_ids):
        return jax.vmap(init_trial, in_axes=(None, 0))(keys, trial_ids)

    # The carry is donated: chunk after chunk reuses its buffers instead of copying them.
    @functools.partial(jit, donate_argnums=0)
    @functools.partial(
        per_device, in_specs=(split, whole, split, split, whole), out_specs=(split, split)
    )
    def run_rounds(carry, keys, trial_ids, valid, rounds):
        def body(carry, t):
            carry, values = jax.vmap(trial_round, in_axes=(None, 0, None, 0))(
                keys, carry, t, trial_ids
            )
            values = jnp.where(valid[:, None], values, 0.0)
            return carry, jnp.stack([tree_sum(values), tree_sum(_exact_square(values))], -1)

        carry, sums = lax.scan(body, carry, rounds)
        return carry, sums[None]

    @jit
    @functools.partial(per_device, in_specs=(split, split, whole), out_specs=(split, split))
    def finish(carry, valid, num_rounds):
        tot = carry[2]
        fractions = tot.counts / num_rounds
        per_trial = jnp.stack(
            [
                tot.regret,
                tot.realized_regret,
                tot.reward,
                tot.latency,
                tot.failed,
                jain_index(tot.counts),
                jnp.min(fractions, axis=-1),
            ],
            -1,
        )
        # Integer-valued counts sum exactly; the host divides by T * M.
        return per_trial, tree_sum(jnp.where(valid[:, None], tot.counts, 0.0))[None]

    return init_carry, run_rounds, finish


def _nbytes(tree) -> int:
    """Bytes of the arrays (or shape structs) of a pytree; PRNG keys count as their data."""
    total = 0
    for x in jax.tree.leaves(tree):
        dtype = x.dtype
        if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
            total += math.prod(x.shape) * math.prod(jax.random.key_impl(x).key_shape) * 4
            continue
        total += math.prod(x.shape) * np.dtype(dtype).itemsize
    return total


def trial_memory_bytes(env: Env, selector: Selector) -> int:
    """Estimated device memory one running trial of `selector` on `env` needs, in bytes.

    From shapes alone (`jax.eval_shape`, nothing runs): a round holds the trial's carry
    (environment state, policy state, running totals) as input and output of the scan,
    so twice, and materialises the round's input, decision, feedback, statistics and new
    states; those are counted twice to cover the temporaries that XLA keeps
    between kernels (random bits, masks, top-k buffers, each of about the size of a
    client-indexed array). The factor was checked against the peak resident memory of
    CPU runs (docs/benchmarks.md); it errs on the large side.
    """
    keys = jax.eval_shape(_keys, 0)
    env_state = jax.eval_shape(env.reset, keys.reset)
    policy_state = jax.eval_shape(selector.init, keys.init)
    inp = jax.eval_shape(env.observe, env_state, 1, keys.env)
    if selector.privileged:
        inp = inp._replace(oracle=jax.eval_shape(env.oracle, env_state, inp))
    decision, new_policy_state = jax.eval_shape(selector.select, policy_state, inp, keys.policy)
    step = jax.eval_shape(env.step, env_state, inp, decision, keys.env)
    counts = jax.ShapeDtypeStruct((env.num_clients,), jnp.float32)
    carry = _nbytes((env_state, policy_state, counts)) + 5 * 4
    round_arrays = _nbytes((inp, decision, new_policy_state, step))
    return 2 * carry + 2 * round_arrays


# The fixed cost of running one more chunk (dispatch, host transfers, a second program
# for a shorter chunk of rounds), in trials of work; used to choose a chunk size.
CHUNK_COST_TRIALS = 64


def trials_per_chunk_for_budget(
    policies: Mapping[str, Selector],
    env: Env,
    num_rounds: int,
    num_trials: int,
    memory_budget_bytes: int,
    num_devices: int = 1,
) -> int:
    """The power-of-two trial chunk that fits the budget and pads the trials least.

    The estimate is `chunk * max over policies of trial_memory_bytes` plus what the run
    keeps whatever the chunking (per-round sums f32[T, metrics, 2] and per-trial totals).
    The chunk never exceeds the smallest power of two >= num_trials. Every chunk runs
    in full (the last one padded), so the largest chunk that fits can waste much of the
    work: 10,000 trials in chunks of 8,192 simulate 16,384. Among the powers of two that
    fit, the chunk minimising `ceil(num_trials / chunk) * (chunk + CHUNK_COST_TRIALS)`
    (`num_trials + CHUNK_COST_TRIALS` for a chunk that covers every trial), the work done
    plus a fixed cost per chunk counted in trials, is chosen (the larger on ties):
    10,000 trials that fit 8,192 run in chunks of 2,048 (10,240 simulated). On several
    devices the trials simulated are those of `device_block`, over all devices together.

    Raises:
      ValueError: if not even one trial fits.
    """
    per_trial = max(trial_memory_bytes(env, selector) for selector in policies.values())
    optional, extras = _metric_names(env, _keys(0))
    num_metrics = len(BASE_METRICS) + len(optional) + len(extras)
    fixed = num_rounds * num_metrics * 2 * 4 + num_trials * len(TOTALS) * 4
    fitting = (memory_budget_bytes - fixed) // per_trial
    if fitting < 1:
        raise ValueError(
            f"memory_budget_bytes must be at least {fixed + per_trial} for this environment "
            f"and these policies (one trial needs about {per_trial} bytes), got "
            f"{memory_budget_bytes}."
        )
    return _least_padded_chunk(int(fitting), num_trials, num_devices)


def device_block(chunk: int, num_devices: int) -> int:
    """Trials each of `num_devices` devices runs of a chunk of `chunk` trials: all of them
    on one device, else the power of two >= chunk / num_devices.

    Each device sums its block's metrics along its own subtree of `tree_sum`, and the
    host joins the devices' sums along the same tree (`tree_sum` of NumPy arrays); a
    block that is an aligned power of two is such a subtree, so the numbers are those
    of one device.
    """
    if num_devices == 1:
        return chunk
    return 1 << (-(-chunk // num_devices) - 1).bit_length()


def _simulated_trials(chunk: int, num_devices: int) -> int:
    """Trials a chunk of `chunk` trials simulates on `num_devices` devices, padding
    included: one `device_block` on each."""
    return num_devices * device_block(chunk, num_devices)


def _least_padded_chunk(bound: int, num_trials: int, num_devices: int = 1) -> int:
    """The power of two <= `bound` (and <= the smallest power of two >= num_trials) that
    minimises the trials simulated plus `CHUNK_COST_TRIALS` per chunk, the larger on
    ties. A chunk of c < M trials simulates c trials however few are left; one of
    c >= M simulates the M trials; either is rounded up to `num_devices` blocks of a
    power of two (`device_block`), which must fit `bound` too unless one trial does not."""
    largest = min(1 << (bound.bit_length() - 1), 1 << max(num_trials - 1, 0).bit_length())
    simulated = lambda c: _simulated_trials(min(c, num_trials), num_devices)
    chunks = [
        c for c in (largest >> i for i in range(largest.bit_length())) if simulated(c) <= bound
    ]
    cost = lambda c: -(-num_trials // c) * (simulated(c) + CHUNK_COST_TRIALS)
    return min(chunks or [1], key=lambda c: (cost(c), -c))


# On CPU, the per-client arrays of a chunk stay in cache up to about this many
# client-trials per device; beyond it, each of a round's many passes over them streams
# from memory. A single device spreads each operation over every core, and larger
# operations pay for that better (docs/benchmarks.md: `ucb` at N=1,000 ran 10,000 trials
# 37% faster in chunks of 1,024 than at once); a device per core (`use_all_cpu_cores`)
# runs best with its block in the core's own cache (on a 2-core Xeon at N=1,000 and
# 10,000, blocks of 128 and 16 trials ran 1.3x and 1.1x as fast as the blocks of 512
# and 128 that 2^21 client-trials per device would give).
CPU_CHUNK_CLIENT_TRIALS = 2**21
CPU_CORE_CHUNK_CLIENT_TRIALS = 5 * 2**15


def cpu_trials_per_chunk(num_clients: int, num_trials: int, num_devices: int = 1) -> int:
    """The trial chunk of a CPU run: at most `CPU_CHUNK_CLIENT_TRIALS / num_clients`
    trials on one device, `CPU_CORE_CHUNK_CLIENT_TRIALS / num_clients` per device on
    several, a power of two, the one that pads the trials least
    (`trials_per_chunk_for_budget`)."""
    per_device = CPU_CHUNK_CLIENT_TRIALS if num_devices == 1 else CPU_CORE_CHUNK_CLIENT_TRIALS
    bound = max(1, per_device * num_devices // num_clients)
    return _least_padded_chunk(bound, num_trials, num_devices)


def use_all_cpu_cores(num_devices: int | None = None) -> None:
    """Asks JAX for one CPU device per core, on which `simulate` runs a block of trials each.

    JAX makes a single CPU device unless told otherwise, and spreads each operation of
    its programs over the cores. A round of `simulate` is a chain of many small
    operations, for which handing work between cores costs more than it saves; one
    device per core, each running its own trials with nothing exchanged until the chunk
    ends, is faster (docs/benchmarks.md: on a 2-core Xeon, `ucb` with 1,000 trials ran
    2.0x faster at N=100 and 1.5x to 1.6x at N=1,000). Results do not depend on the
    number of devices. The launch scripts call this first.

    JAX fixes the number when it starts, so call this before any JAX computation
    (importing `fedjax_sel` and `bandits` computes nothing); later, it logs a warning
    and changes nothing. A number chosen already wins over the default: the
    `JAX_NUM_CPU_DEVICES` variable, the `jax_num_cpu_devices` option, or XLA's
    `--xla_force_host_platform_device_count`.

    Args:
      num_devices: CPU devices to make, >= 1; None for the cores this process may run
        on, unless a number was chosen already.
    """
    if num_devices is not None:
        num_devices = validation.positive_int("num_devices", num_devices)
    elif (
        jax.config.jax_num_cpu_devices >= 0
        or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    ):
        return
    elif hasattr(os, "sched_getaffinity"):
        num_devices = len(os.sched_getaffinity(0))
    else:
        num_devices = os.cpu_count() or 1
    try:
        jax.config.update("jax_num_cpu_devices", num_devices)
    except RuntimeError:
        logging.warning(
            "JAX has started already; it keeps its %d CPU device(s). Call "
            "use_all_cpu_cores() before any JAX computation.",
            jax.local_device_count("cpu"),
        )


class _DyadicStack:
    """Joins equal-size chunk sums along the dyadic tree of `tree_sum` (host side)."""

    def __init__(self, levels=(), items=()):
        self.levels = list(levels)
        self.items = list(items)

    def push(self, item):
        self.levels.append(0)
        self.items.append(item)
        while len(self.levels) > 1 and self.levels[-1] == self.levels[-2]:
            right, left = self.items.pop(), self.items.pop()
            level = self.levels.pop()
            self.levels[-1] = level + 1
            self.items.append(jax.tree.map(np.add, left, right))

    def total(self):
        # Missing right subtrees are zeros, and x + 0 == x: join from the right.
        acc = self.items[-1]
        for item in reversed(self.items[:-1]):
            acc = jax.tree.map(np.add, item, acc)
        return acc


@dataclasses.dataclass
class _Progress:
    """Where a policy's run stands, as saved in a checkpoint."""

    chunk: int = 0
    next_round: int = 1
    curve: np.ndarray | None = None  # f32[T, metrics, 2], current trial chunk
    per_trial: list = dataclasses.field(default_factory=list)
    stack: _DyadicStack = dataclasses.field(default_factory=_DyadicStack)
    carry_leaves: list | None = None


def _atomic_save(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _save_progress(path: str, p: _Progress) -> None:
    arrays = {
        "chunk": np.int64(p.chunk),
        "next_round": np.int64(p.next_round),
        "curve": p.curve,
        "levels": np.asarray(p.stack.levels, np.int64),
        "num_per_trial": np.int64(len(p.per_trial)),
        "num_carry": np.int64(len(p.carry_leaves or [])),
    }
    for i, (curve, fractions) in enumerate(p.stack.items):
        arrays[f"stack_curve_{i}"] = curve
        arrays[f"stack_counts_{i}"] = fractions
    for i, x in enumerate(p.per_trial):
        arrays[f"per_trial_{i}"] = x
    for i, x in enumerate(p.carry_leaves or []):
        arrays[f"carry_{i}"] = x
    _atomic_save(path, arrays)


def _load_progress(path: str) -> _Progress:
    with np.load(path) as f:
        levels = [int(v) for v in f["levels"]]
        items = [(f[f"stack_curve_{i}"], f[f"stack_counts_{i}"]) for i in range(len(levels))]
        return _Progress(
            chunk=int(f["chunk"]),
            next_round=int(f["next_round"]),
            curve=f["curve"],
            per_trial=[f[f"per_trial_{i}"] for i in range(int(f["num_per_trial"]))],
            stack=_DyadicStack(levels, items),
            carry_leaves=[f[f"carry_{i}"] for i in range(int(f["num_carry"]))] or None,
        )


def _check_checkpoint_config(checkpoint_dir: str, config: dict) -> None:
    path = os.path.join(checkpoint_dir, "config.json")
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        if saved != config:
            diff = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
            raise ValueError(
                f"checkpoint_dir {checkpoint_dir!r} holds a run of a different configuration "
                f"(differs in {', '.join(diff)}); use a fresh directory or the same settings."
            )
    else:
        os.makedirs(checkpoint_dir, exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(config, f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)


def _log_progress(policy: str, done: int, total: int) -> None:
    logging.info("%s: %d/%d trial-rounds (%.0f%%)", policy, done, total, 100.0 * done / total)


def simulate(
    policies: Selector | Mapping[str, Selector],
    env: Env,
    num_rounds: int,
    num_trials: int,
    seed: int = 0,
    trials_per_chunk: int | None = None,
    rounds_per_chunk: int | None = None,
    checkpoint_dir: str | None = None,
    config: Mapping[str, Any] | None = None,
    progress: Callable[[str, int, int], None] | None = _log_progress,
    devices: list | None = None,
    memory_budget_bytes: int | None = None,
) -> Results:
    """Runs `num_trials` independent trials of each policy for `num_rounds` rounds.

    Args:
      policies: a `Selector`, or a mapping from names to selectors, compared on the
        same environment draws (common random numbers).
      env: the environment.
      num_rounds: T >= 1.
      num_trials: M >= 1.
      seed: the seed of every random stream (see the module docstring).
      trials_per_chunk: trials run at once, a power of two (memory bound); None runs
        all M at once on one accelerator, the chunk that pads least on several
        (`_least_padded_chunk`), and on CPU devices chunks that stay in cache
        (`cpu_trials_per_chunk`). On several devices, each runs a power-of-two block of
        the chunk (`device_block`). The size used is recorded as `trials_per_chunk` in
        the results' config. Results do not depend on it.
      rounds_per_chunk: rounds per compiled call (progress, checkpoints); None runs all
        T at once. Results do not depend on it.
      checkpoint_dir: where progress is saved after every chunk and resumed from; a
        directory written by a different configuration, or on another number of
        devices, is refused.
      config: JSON-serialisable description of the run (env and policy parameters),
        kept in the results and compared on resume.
      progress: called as `progress(policy, trial_rounds_done, trial_rounds_total)`
        after every chunk; None for silence.
      devices: devices to shard the trial axis over, at most one per trial; None uses
        all of `jax.devices()`. Results do not depend on them. JAX makes one CPU device
        unless told otherwise; one per core runs faster (`use_all_cpu_cores`).
      memory_budget_bytes: if given (and `trials_per_chunk` is not), the trials run in
        chunks of a power of two whose estimated memory (over all `devices` together)
        fits this many bytes (see `trials_per_chunk_for_budget`), and no larger than the
        CPU chunk on CPU devices. Results do not depend on it.

    Returns:
      `Results` with per-round curves (mean and std over trials) and per-trial totals.
    """
    if isinstance(policies, Selector):
        policies = {"policy": policies}
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError("policies must be a Selector or a non-empty mapping name -> Selector.")
    for name, sel in policies.items():
        if not isinstance(name, str) or not isinstance(sel, Selector):
            raise ValueError(f"policies must map names (str) to Selectors; got {name!r}: {sel!r}.")
        if sel.privileged and env.oracle is None:
            raise ValueError(f"policy {name!r} needs env.oracle, which this environment lacks.")
    if not isinstance(env, Env):
        raise ValueError(f"env must be a fedjax_sel.Env, got {type(env).__name__}.")
    num_rounds = validation.positive_int("num_rounds", num_rounds)
    num_trials = validation.positive_int("num_trials", num_trials)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}.")
    if trials_per_chunk is not None:
        trials_per_chunk = validation.positive_int("trials_per_chunk", trials_per_chunk)
        if trials_per_chunk & (trials_per_chunk - 1):
            raise ValueError(
                f"trials_per_chunk must be a power of two (it keeps results independent of "
                f"chunking), got {trials_per_chunk}."
            )
    automatic_chunk = trials_per_chunk is None
    # A device with no trial of its own would only compute padding.
    devices = list(devices or jax.devices())[:num_trials]
    num_devices = len(devices)
    if memory_budget_bytes is not None:
        if trials_per_chunk is not None:
            raise ValueError("give trials_per_chunk or memory_budget_bytes, not both.")
        memory_budget_bytes = validation.positive_int("memory_budget_bytes", memory_budget_bytes)
        trials_per_chunk = trials_per_chunk_for_budget(
            policies, env, num_rounds, num_trials, memory_budget_bytes, num_devices
        )
    rounds_per_chunk = validation.int_in_range(
        "rounds_per_chunk", rounds_per_chunk or num_rounds, 1, num_rounds
    )
    if automatic_chunk and all(device.platform == "cpu" for device in devices):
        cpu_chunk = cpu_trials_per_chunk(env.num_clients, num_trials, num_devices)
        trials_per_chunk = min(trials_per_chunk or cpu_chunk, cpu_chunk)
    elif trials_per_chunk is None and num_devices > 1:
        # Devices run power-of-two blocks: chunks that pad least, with no memory bound.
        everything = _simulated_trials(num_trials, num_devices)
        trials_per_chunk = _least_padded_chunk(everything, num_trials, num_devices)
    config = dict(config or {})
    try:
        json.dumps(config)
    except TypeError as e:
        raise ValueError(f"config must be JSON-serialisable: {e}") from None

    keys = _keys(int(seed))
    optional, extras = _metric_names(env, keys)
    names = BASE_METRICS + optional + tuple(f"extra/{e}" for e in extras)

    run_config = {
        "policies": list(policies),
        "num_clients": env.num_clients,
        "num_rounds": num_rounds,
        "num_trials": num_trials,
        "seed": int(seed),
        "trials_per_chunk": trials_per_chunk,
        "metrics": list(names),
        "config": config,
    }
    if checkpoint_dir is not None:
        # A chunk's saved state holds the trials of its devices' blocks.
        _check_checkpoint_config(checkpoint_dir, {**run_config, "num_devices": num_devices})

    chunk = min(trials_per_chunk or num_trials, num_trials)
    num_chunks = -(-num_trials // chunk)
    sim_size = _simulated_trials(chunk, num_devices)
    mesh = Mesh(np.asarray(devices), ("trials",))
    sharded = NamedSharding(mesh, PartitionSpec("trials"))
    replicated = NamedSharding(mesh, PartitionSpec())
    keys = jax.device_put(keys, replicated)
    options = _compiler_options(devices[0].platform)

    programs = {
        name: _checked_program(name, keys, sim_size, env, sel, optional, extras, options, mesh)
        for name, sel in policies.items()
    }

    curves, totals, fractions = {}, {}, {}
    for policy_name, (init_carry, run_rounds, finish) in programs.items():
        path = checkpoint_dir and os.path.join(checkpoint_dir, f"policy_{policy_name}.npz")
        state = _load_progress(path) if path and os.path.exists(path) else _Progress()
        total_work = num_trials * num_rounds
        while state.chunk < num_chunks:
            start = state.chunk * chunk
            ids = np.arange(start, start + sim_size)
            trial_ids = jax.device_put(ids.astype(np.int32), sharded)
            valid = jax.device_put(ids < min(start + chunk, num_trials), sharded)
            if state.carry_leaves is not None:
                treedef = jax.tree.structure(jax.eval_shape(init_carry, keys, trial_ids))
                carry = jax.device_put(jax.tree.unflatten(treedef, state.carry_leaves), sharded)
            else:
                carry = init_carry(keys, trial_ids)
                state.curve = np.zeros((num_rounds, len(names), 2), np.float32)
            while state.next_round <= num_rounds:
                t0 = state.next_round
                length = min(rounds_per_chunk, num_rounds - t0 + 1)
                rounds = jnp.arange(t0, t0 + length, dtype=jnp.int32)
                carry, sums = run_rounds(carry, keys, trial_ids, valid, rounds)
                state.curve[t0 - 1 : t0 - 1 + length] = tree_sum(np.asarray(sums))
                state.next_round = t0 + length
                if path and state.next_round <= num_rounds:
                    state.carry_leaves = [np.asarray(x) for x in jax.tree.leaves(carry)]
                    _save_progress(path, state)
                if progress is not None:
                    in_chunk = min(chunk, num_trials - start)
                    done = start * num_rounds + in_chunk * (state.next_round - 1)
                    progress(policy_name, done, total_work)
            per_trial, chunk_counts = finish(carry, valid, jnp.float32(num_rounds))
            state.per_trial.append(np.asarray(per_trial)[np.asarray(valid)])
            state.stack.push((state.curve, tree_sum(np.asarray(chunk_counts))))
            state.chunk += 1
            state.next_round = 1
            state.carry_leaves = None
            if path:
                _save_progress(path, state)
        curve_sums, count_sums = state.stack.total()
        mean = curve_sums[..., 0].astype(np.float64) / num_trials
        second = curve_sums[..., 1].astype(np.float64) / num_trials
        std = np.sqrt(np.maximum(second - mean * mean, 0.0))
        curves[policy_name] = {
            name: {"mean": mean[:, i], "std": std[:, i]} for i, name in enumerate(names)
        }
        per_trial = np.concatenate(state.per_trial)
        totals[policy_name] = {name: per_trial[:, i] for i, name in enumerate(TOTALS)}
        fractions[policy_name] = count_sums.astype(np.float64) / (num_trials * num_rounds)

    return Results(
        config=run_config,
        curves=curves,
        totals=totals,
        selection_fraction=fractions,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )
