"""How many trials run at once: memory estimates, budgets, CPU cache sizes, padding.

Devices run power-of-two blocks of trials (`device_block`, which keeps the sums over
trials on the fixed tree of `reduction.tree_sum`), so a chunk of trials is padded up to
whole blocks; among the chunks that fit a bound, the runner takes the one that pads
least (`least_padded_chunk`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping

import jax
import numpy as np

from fedjax_sel import metrics
from fedjax_sel.runner import programs
from fedjax_sel.types import Env, Selector


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


@functools.lru_cache(maxsize=64)
def trial_memory_bytes(env: Env, selector: Selector) -> int:
    """Estimated device memory one running trial of `selector` on `env` needs, in bytes.

    From shapes alone (`jax.eval_shape`, nothing runs): a round holds the trial's carry
    (environment state, policy state, running totals) as input and output of the scan,
    so twice, and materialises the round's input, decision, feedback, statistics and new
    states; those are counted twice to cover the temporaries that XLA keeps
    between kernels (random bits, masks, top-k buffers, each of about the size of a
    client-indexed array). The factor was checked against the peak resident memory of
    CPU runs (docs/benchmarks.md); it errs on the large side. Cached per environment
    and selector (it traces them).
    """
    keys = jax.eval_shape(programs.keys, 0)
    env_state = jax.eval_shape(env.reset, keys.reset)
    policy_state = jax.eval_shape(selector.init, keys.init)
    inp = jax.eval_shape(env.observe, env_state, 1, keys.env)
    if selector.privileged:
        inp = inp._replace(oracle=jax.eval_shape(env.oracle, env_state, inp))
    decision, new_policy_state = jax.eval_shape(selector.select, policy_state, inp, keys.policy)
    programs.check_decision(decision, env.num_clients)
    step = jax.eval_shape(env.step, env_state, inp, decision, keys.env)
    layout = metrics.layout(step[2])
    running = jax.eval_shape(lambda: metrics.init_running(layout, env.num_clients))
    carry = _nbytes((env_state, policy_state, running))
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
    keeps whatever the chunking (per-round double-f32 sums of x and x^2,
    f32[T, metrics, 2, 2], and per-trial double-f32 totals f32[M, totals, 2]).
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
    layout = programs.metric_layout(env, programs.keys(0))
    fixed = num_rounds * len(layout.curves) * 2 * 2 * 4 + num_trials * len(layout.totals) * 2 * 4
    fitting = (memory_budget_bytes - fixed) // per_trial
    if fitting < 1:
        raise ValueError(
            f"memory_budget_bytes must be at least {fixed + per_trial} for this environment "
            f"and these policies (one trial needs about {per_trial} bytes), got "
            f"{memory_budget_bytes}."
        )
    return least_padded_chunk(int(fitting), num_trials, num_devices)


# On an accelerator, the chunk `simulate` runs by default is the one whose estimated
# memory (`trials_per_chunk_for_budget`) fits this share of the devices' memory; the rest
# is left to XLA's workspace and the compiled programs' own buffers.
ACCELERATOR_MEMORY_SHARE = 0.5


def device_memory_bytes(devices, num_processes: int = 1) -> int | None:
    """The memory of `devices` (this process's) and of as many on each of `num_processes`
    processes, in bytes: the least device's (`memory_stats()["bytes_limit"]`) times
    their number; None where a device reports no limit (CPU devices report none)."""
    limits = [(device.memory_stats() or {}).get("bytes_limit") for device in devices]
    if not limits or None in limits:
        return None
    return int(min(limits)) * len(limits) * num_processes


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


def simulated_trials(chunk: int, num_devices: int) -> int:
    """Trials a chunk of `chunk` trials simulates on `num_devices` devices, padding
    included: one `device_block` on each."""
    return num_devices * device_block(chunk, num_devices)


def least_padded_chunk(bound: int, num_trials: int, num_devices: int = 1) -> int:
    """The power of two <= `bound` (and <= the smallest power of two >= num_trials) that
    minimises the trials simulated plus `CHUNK_COST_TRIALS` per chunk, the larger on
    ties. A chunk of c < M trials simulates c trials however few are left; one of
    c >= M simulates the M trials; either is rounded up to `num_devices` blocks of a
    power of two (`device_block`), which must fit `bound` too unless one trial does not."""
    largest = min(1 << (bound.bit_length() - 1), 1 << max(num_trials - 1, 0).bit_length())
    simulated = lambda c: simulated_trials(min(c, num_trials), num_devices)
    chunks = [
        c for c in (largest >> i for i in range(largest.bit_length())) if simulated(c) <= bound
    ]
    cost = lambda c: -(-num_trials // c) * (simulated(c) + CHUNK_COST_TRIALS)
    return min(chunks or [1], key=lambda c: (cost(c), -c))


# On CPU, the per-client arrays of a chunk stay in cache up to about this many
# client-trials per device; beyond it, each of a round's many passes over them streams
# from memory. A single device spreads each operation over every core, and larger
# operations pay for that better (`ucb` at N=1,000 ran 10,000 trials
# 37% faster in chunks of 1,024 than at once); a device per core (`configure_cpu`)
# runs best with its block in the core's own cache (on a 2-core Xeon at N=1,000 and
# 10,000, blocks of 128 and 16 trials ran 1.3x and 1.1x as fast as the blocks of 512
# and 128 that 2^21 client-trials per device would give).
CPU_CHUNK_CLIENT_TRIALS = 2**21
CPU_CORE_CHUNK_CLIENT_TRIALS = 5 * 2**15
# A trial's arrays can outgrow its clients': the dense super-arm policies keep three f32
# per super-arm (15,504 of them at N = 20, 747 kB a trial by `trial_memory_bytes`), and
# 8,192 trials a device by the count of clients streamed through memory every slot (on a
# 2-core Xeon, 1,000 trials x 100 slots of dense Quick-Init UCB, then with two f32 an
# arm, took 1.64 and 1.94 s at 512 trials a device, 1.40 and 1.58 s at the 32 this bound
# gave). So a chunk is bounded in `trial_memory_bytes` too, as generously as gives `ucb`
# (84 bytes a client) the same chunks as the count of clients.
CPU_CHUNK_BYTES = 2**28
CPU_CORE_CHUNK_BYTES = 2**24


def cpu_trials_per_chunk(
    num_clients: int, num_trials: int, num_devices: int = 1, trial_bytes: int = 0
) -> int:
    """The trial chunk of a CPU run: at most `CPU_CHUNK_CLIENT_TRIALS / num_clients`
    trials and `CPU_CHUNK_BYTES / trial_bytes` (`trial_memory_bytes`, if given) on one
    device, `CPU_CORE_CHUNK_CLIENT_TRIALS / num_clients` and `CPU_CORE_CHUNK_BYTES /
    trial_bytes` per device on several, but at least one trial per device (a chunk of
    fewer would pad every device block), a power of two, the one that pads the trials
    least (`trials_per_chunk_for_budget`)."""
    one = num_devices == 1
    per_device = CPU_CHUNK_CLIENT_TRIALS if one else CPU_CORE_CHUNK_CLIENT_TRIALS
    bound = per_device * num_devices // num_clients
    if trial_bytes:
        per_device_bytes = CPU_CHUNK_BYTES if one else CPU_CORE_CHUNK_BYTES
        bound = min(bound, per_device_bytes * num_devices // trial_bytes)
    return least_padded_chunk(max(num_devices, bound), num_trials, num_devices)
