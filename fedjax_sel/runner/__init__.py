"""The Monte Carlo runner: `lax.scan` over rounds, `vmap` over trials, chunked and resumable.

`simulate` checks its arguments, chooses how many trials run at once
(`chunking`), builds and checks each policy's compiled programs (`programs`, where the
random streams are documented), then runs them chunk after chunk, summing the metrics
of `fedjax_sel.metrics` over trials in a fixed order (`reduction`: results do not
depend on chunking or on the number of devices), saving progress between chunks
(`checkpoints`), over every process of a `jax.distributed` job (`processes`).

Memory is O(T * metrics + M * N): per-trial totals are kept, per-round curves only as
sums over trials.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_sel import metrics, validation
from fedjax_sel.ops import double
from fedjax_sel.results import Results
from fedjax_sel.runner import checkpoints, chunking, fingerprint, processes, programs, reduction
from fedjax_sel.runner.chunking import (
    ACCELERATOR_MEMORY_SHARE,
    CHUNK_COST_TRIALS,
    CPU_CHUNK_BYTES,
    CPU_CHUNK_CLIENT_TRIALS,
    CPU_CORE_CHUNK_BYTES,
    CPU_CORE_CHUNK_CLIENT_TRIALS,
    cpu_trials_per_chunk,
    device_block,
    device_memory_bytes,
    trial_memory_bytes,
    trials_per_chunk_for_budget,
)
from fedjax_sel.runner.programs import COMPILER_OPTIONS
from fedjax_sel.runner.reduction import tree_sum
from fedjax_sel.types import Env, Selector

__all__ = [
    "ACCELERATOR_MEMORY_SHARE",
    "CHUNK_COST_TRIALS",
    "COMPILER_OPTIONS",
    "CPU_CHUNK_BYTES",
    "CPU_CHUNK_CLIENT_TRIALS",
    "CPU_CORE_CHUNK_BYTES",
    "CPU_CORE_CHUNK_CLIENT_TRIALS",
    "check_rounds",
    "choose_trials_per_chunk",
    "cpu_trials_per_chunk",
    "device_block",
    "device_memory_bytes",
    "simulate",
    "tree_sum",
    "trial_memory_bytes",
    "trials_per_chunk_for_budget",
]


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
      num_rounds: T in [1, 2^24] (the selection counts are f32).
      num_trials: M >= 1.
      seed: the seed of every random stream, an integer in [0, 2^32) (see
        `runner.programs`).
      trials_per_chunk: trials run at once, a power of two (memory bound); None runs,
        on accelerators, the chunk whose estimated memory fits
        `ACCELERATOR_MEMORY_SHARE` of theirs (`device_memory_bytes`,
        `trials_per_chunk_for_budget`; one trial a device where not even one fits), or,
        where a device reports no memory limit, all M at once on one and the chunk
        that pads least on several (`chunking.least_padded_chunk`); on CPU devices,
        chunks that stay in cache (`cpu_trials_per_chunk`). On several devices, each
        runs a power-of-two block of the chunk (`device_block`). The size used is
        recorded as `trials_per_chunk` in the results' config. Results do not depend
        on it.
      rounds_per_chunk: rounds per compiled call (progress, checkpoints), in [1, T]; None
        runs all T at once. Results do not depend on it.
      checkpoint_dir: where progress is saved after every chunk (one file per policy)
        and resumed from. A file is resumed only by the same run: the same policy and
        environment (compared by fingerprint: arguments, arrays, code), seed, sizes,
        chunking, number of devices, `config` and versions; otherwise, or if it cannot be
        read, `simulate` raises before anything runs, naming the file and what differs
        (`runner.checkpoints`). Policies added to or removed from the mapping do not
        disturb the others' files.
      config: JSON-serialisable description of the run (env and policy parameters),
        kept in the results as JSON reads it back (tuples as lists, keys as strings)
        and compared on resume.
      progress: called as `progress(policy, trial_rounds_done, trial_rounds_total)`
        after every chunk; None for silence.
      devices: devices to shard the trial axis over, at most one per trial; None uses
        all of `jax.devices()`. Results do not depend on them. JAX makes one CPU device
        unless told otherwise; one per core runs faster (`fedjax_sel.configure_cpu`).
        In a `jax.distributed` job of several processes, this process's own devices
        (None: `jax.local_devices()`), the same power-of-two number on every process:
        every process calls `simulate` with the same arguments, runs its blocks of each
        chunk, and returns the same `Results`, bit for bit those of one process
        (`runner.processes`, docs/scale.md). Checkpoints are then one file per policy and
        process.
      memory_budget_bytes: if given (and `trials_per_chunk` is not), the trials run in
        chunks of a power of two whose estimated memory (over all `devices` together)
        fits this many bytes (see `trials_per_chunk_for_budget`), and no larger than the
        CPU chunk on CPU devices. Results do not depend on it.

    Returns:
      `Results` with per-round curves (mean and std over trials) and per-trial totals,
      named as in `fedjax_sel.metrics`.

    Raises:
      ValueError: on bad arguments; when a policy selects more clients in a round than
        the environment's cohort (`env.num_selected`, where the environment has one); in
        a job of several processes, on every process when the processes were called
        with other arguments or have unequal or non-power-of-two numbers of devices, or
        when one of them refuses its checkpoint files.
      Whatever a policy raises while it is traced, before anything runs, with its own
      type and traceback (and, on Python >= 3.11, a note naming the policy).
    """
    policies = _checked_policies(policies, env)
    # Selection counts are f32, exact up to 2^24 (metrics.Selections).
    num_rounds = validation.int_in_range("num_rounds", num_rounds, 1, 2**24)
    check_rounds(policies, num_rounds)
    num_trials = validation.positive_int("num_trials", num_trials)
    seed = validation.seed("seed", seed)
    if rounds_per_chunk is not None:
        rounds_per_chunk = validation.int_in_range(
            "rounds_per_chunk", rounds_per_chunk, 1, num_rounds
        )
    rounds_per_chunk = rounds_per_chunk or num_rounds
    if checkpoint_dir is not None:
        checkpoint_dir = validation.output_dir("checkpoint_dir", checkpoint_dir)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}.")
    if devices is not None and (
        isinstance(devices, (str, bytes))
        or not devices
        or not all(isinstance(d, jax.Device) for d in devices)
        or len(set(devices)) != len(devices)
    ):
        raise ValueError(
            f"devices must be a non-empty list of distinct jax devices (e.g. jax.devices()), "
            f"got {devices!r}."
        )
    if config is not None and not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping (a dict) or None, got {config!r}.")
    try:
        # As a checkpoint stores it (tuples as lists, keys as strings), so that the same
        # run's config compares equal on resume.
        config = json.loads(json.dumps(dict(config or {}), allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"config must be JSON-serialisable, without NaN or inf: {e}") from None
    group = processes.current()
    devices = _local_devices(devices, num_trials, group)
    # A chunk spans the devices of every process.
    num_devices = len(devices) * group.count
    trials_per_chunk = choose_trials_per_chunk(
        policies,
        env,
        num_rounds,
        num_trials,
        trials_per_chunk,
        memory_budget_bytes,
        num_devices,
        devices[0].platform,
        device_memory_bytes(devices, group.count),
    )

    keys = programs.keys(int(seed))
    layout = programs.metric_layout(env, keys)
    run_config = {
        "policies": list(policies),
        "num_clients": env.num_clients,
        "num_rounds": num_rounds,
        "num_trials": num_trials,
        "seed": int(seed),
        "trials_per_chunk": trials_per_chunk,
        "metrics": list(layout.curves),
        "config": config,
    }
    # What a checkpoint and the processes compare: the environment's and each policy's.
    prints = None
    if group.count > 1 or checkpoint_dir is not None:
        prints = {"environment": fingerprint.environment(env, keys)}
        prints["policies"] = {n: fingerprint.policy(s, env, keys) for n, s in policies.items()}
    if group.count > 1:
        description = json.dumps(
            {**run_config, "rounds_per_chunk": rounds_per_chunk, **prints}, sort_keys=True
        )
        group.check_same_run(description, len(devices))

    mesh = Mesh(np.asarray(devices), ("trials",))
    keys = jax.device_put(keys, NamedSharding(mesh, PartitionSpec()))
    chunk = min(trials_per_chunk or num_trials, num_trials)
    plan = _Plan(
        env,
        keys,
        mesh,
        layout,
        num_rounds,
        num_trials,
        chunk,
        rounds_per_chunk,
        group,
        len(devices) * chunking.device_block(chunk, num_devices),
    )
    options = programs.compiler_options(devices[0].platform)
    compiled = {
        name: programs.checked_programs(
            name, keys, plan.local_trials, _call_rounds(plan, 1), env, sel, layout, options, mesh
        )
        for name, sel in policies.items()
    }

    files = {}
    if checkpoint_dir is not None:
        error = None
        try:
            files = _checkpoint_files(checkpoint_dir, prints, run_config, len(devices), group)
        except ValueError as e:
            error = str(e)
        group.agree(error)

    curves, totals, fractions = {}, {}, {}
    for name, policy_programs in compiled.items():
        state = _run_policy(name, policy_programs, plan, files.get(name), progress)
        curve_sums, count_sums = state.stack.total()
        mean, std = reduction.mean_and_std(curve_sums, num_trials)
        curves[name] = {
            metric: {"mean": mean[:, i], "std": std[:, i]} for i, metric in enumerate(layout.curves)
        }
        per_trial = double.to_float64(np.concatenate(state.per_trial))
        totals[name] = {total: per_trial[:, i] for i, total in enumerate(layout.totals)}
        fractions[name] = count_sums.astype(np.float64) / (num_trials * num_rounds)

    return Results(
        config=run_config,
        curves=curves,
        totals=totals,
        selection_fraction=fractions,
        created=time.strftime("%Y-%m-%dT%H:%M:%S"),
    )


def _checked_policies(policies, env: Env) -> dict[str, Selector]:
    """`policies` as a mapping name -> Selector, checked against `env`."""
    if not isinstance(env, Env):
        raise ValueError(f"env must be a fedjax_sel.Env, got {type(env).__name__}.")
    if isinstance(policies, Selector):
        policies = {"policy": policies}
    if not isinstance(policies, Mapping) or not policies:
        raise ValueError("policies must be a Selector or a non-empty mapping name -> Selector.")
    for name, sel in policies.items():
        if not isinstance(name, str) or not isinstance(sel, Selector):
            raise ValueError(f"policies must map names (str) to Selectors; got {name!r}: {sel!r}.")
        if sel.privileged and env.oracle is None:
            raise ValueError(f"policy {name!r} needs env.oracle, which this environment lacks.")
    return dict(policies)


def check_rounds(policies: Mapping[str, Selector], num_rounds: int) -> None:
    """Raises a ValueError naming the first policy defined for fewer than `num_rounds`
    rounds (`Selector.max_rounds`)."""
    for name, sel in policies.items():
        if sel.max_rounds is not None and num_rounds > sel.max_rounds:
            raise ValueError(
                f"num_rounds={num_rounds} is more than policy {name!r} is defined for "
                f"(max_rounds={sel.max_rounds}, e.g. its horizon); build it for {num_rounds}."
            )


def _local_devices(devices, num_trials: int, group: processes.Group) -> list:
    """The devices this process runs its blocks of trials on (`simulate`'s `devices`)."""
    if group.count == 1:
        # A device with no trial of its own would only compute padding.
        return list(devices or jax.devices())[:num_trials]
    devices = list(devices or jax.local_devices())
    foreign = [d for d in devices if d.process_index != group.index]
    if foreign:
        raise ValueError(
            f"devices must be this process's own devices (jax.local_devices()) in a "
            f"jax.distributed run of {group.count} processes; {foreign} belong to others."
        )
    return devices


def choose_trials_per_chunk(
    policies: Mapping[str, Selector],
    env: Env,
    num_rounds: int,
    num_trials: int,
    trials_per_chunk: int | None,
    memory_budget_bytes: int | None,
    num_devices: int,
    platform: str,
    memory_bytes: int | None = None,
) -> int | None:
    """The trial chunk `simulate` runs (its docstring says how it is chosen, from its
    `trials_per_chunk` and `memory_budget_bytes`) on `num_devices` devices of `platform`
    with `memory_bytes` of memory in all (`device_memory_bytes`, None where unknown);
    None for all trials at once."""
    if trials_per_chunk is not None:
        trials_per_chunk = validation.positive_int("trials_per_chunk", trials_per_chunk)
        if trials_per_chunk & (trials_per_chunk - 1):
            raise ValueError(
                f"trials_per_chunk must be a power of two (it keeps results independent of "
                f"chunking), got {trials_per_chunk}."
            )
        if memory_budget_bytes is not None:
            raise ValueError("give trials_per_chunk or memory_budget_bytes, not both.")
        return trials_per_chunk
    if memory_budget_bytes is not None:
        memory_budget_bytes = validation.positive_int("memory_budget_bytes", memory_budget_bytes)
        trials_per_chunk = trials_per_chunk_for_budget(
            policies, env, num_rounds, num_trials, memory_budget_bytes, num_devices
        )
    if platform == "cpu":
        trial_bytes = 0
        for name, selector in policies.items():
            with programs.naming_policy(name):
                trial_bytes = max(trial_bytes, trial_memory_bytes(env, selector))
        cpu_chunk = cpu_trials_per_chunk(env.num_clients, num_trials, num_devices, trial_bytes)
        return min(trials_per_chunk or cpu_chunk, cpu_chunk)
    if trials_per_chunk is None and memory_bytes is not None:
        budget = int(ACCELERATOR_MEMORY_SHARE * memory_bytes)
        try:
            return trials_per_chunk_for_budget(
                policies, env, num_rounds, num_trials, budget, num_devices
            )
        except ValueError:  # not even one trial fits the share: one trial a device
            return chunking.least_padded_chunk(num_devices, num_trials, num_devices)
    if trials_per_chunk is None and num_devices > 1:
        # Devices run power-of-two blocks: chunks that pad least, with no memory bound.
        everything = chunking.simulated_trials(num_trials, num_devices)
        return chunking.least_padded_chunk(everything, num_trials, num_devices)
    return trials_per_chunk


class _Plan(NamedTuple):
    """What every policy's run shares."""

    env: Env
    keys: programs.Keys  # replicated over the mesh
    mesh: Mesh  # this process's devices
    layout: metrics.Layout
    num_rounds: int
    num_trials: int
    chunk: int  # trials per chunk, padding excluded
    rounds_per_chunk: int
    group: processes.Group
    local_trials: int  # trials of a chunk this process simulates, padding included


def _checkpoint_files(checkpoint_dir, prints, run_config, num_devices, group):
    """policy -> (path, identity) of this process's checkpoint file, `prints` holding the
    fingerprints of the environment and of each policy; raises ValueError,
    before anything runs, if a file already there holds another run or cannot be read
    (`checkpoints.check_identity`), or if the directory holds the policy's files of a run
    with another number of processes."""
    import fedjax_sel

    os.makedirs(checkpoint_dir, exist_ok=True)
    present = os.listdir(checkpoint_dir)
    files = {}
    for name, policy_print in prints["policies"].items():
        identity = {
            **{k: v for k, v in run_config.items() if k != "policies"},
            "policy": name,
            "policy_fingerprint": policy_print,
            "environment_fingerprint": prints["environment"],
            # A chunk's saved state holds the trials of this process's devices' blocks.
            "num_devices": num_devices,
            "num_processes": group.count,
            "process_index": group.index,
            "format": checkpoints.FORMAT,
            "fedjax_sel": fedjax_sel.__version__,
            "jax": jax.__version__,
        }
        filename = checkpoints.filename(name, group.index, group.count)
        others = [
            f for f in present if checkpoints.process_count(f, name) not in (None, group.count)
        ]
        if others:
            raise ValueError(
                f"checkpoint_dir {checkpoint_dir!r} holds files of policy {name!r} from a run "
                f"of another number of processes ({sorted(others)}), which this run of "
                f"{group.count} cannot resume (each process's file holds its own devices' "
                f"trials): resume with that number of processes, or delete those files (or "
                f"use a fresh checkpoint_dir) to start over."
            )
        path = os.path.join(checkpoint_dir, filename)
        if os.path.exists(path):
            checkpoints.check_identity(path, identity)
        files[name] = (path, identity)
    return files


def _run_policy(name, policy_programs, plan: _Plan, file, progress) -> checkpoints.Progress:
    """Runs every chunk of trials of one policy (resuming from its checkpoint `file`, a
    (path, identity) pair or None, if the path exists) and returns where it stands at the
    end: the joined sums and the totals.

    Each chunk's trials are laid out over the devices of every process
    (`runner.processes`); this process simulates its `plan.local_trials` of them, and the
    chunk's values are joined over processes at its end.
    """
    group = plan.group
    num_chunks = -(-plan.num_trials // plan.chunk)
    path, identity = file or (None, None)
    resume = path and os.path.exists(path)
    state = checkpoints.load_progress(path, identity) if resume else checkpoints.Progress()
    save = lambda: checkpoints.save_progress(path, state, identity)
    if group.count > 1 and path:
        statuses = group.gather(np.array([state.chunk, state.joined is not None], np.int32))
        behind = processes.behind([processes.Status(c, bool(j)) for c, j in statuses], group.index)
        if behind:
            _join(name, state, plan)
            save()
    # What the chunks left will call compiles first, at once (a chunk already joined
    # calls nothing more): `run_rounds` from round 1, or from where a chunk stopped.
    first = state.chunk + (state.joined is not None)
    if first < num_chunks:
        starts = {1} if state.joined is not None else {1, state.next_round}
        step, last = plan.rounds_per_chunk, plan.num_rounds
        lengths = {_call_rounds(plan, t) for s in starts for t in range(s, last + 1, step)}
        trial_ids, valid = _chunk_trials(plan, first)
        programs.compile_programs(
            policy_programs, plan.keys, plan.env.params, trial_ids, valid, lengths, last
        )
    while state.chunk < num_chunks:
        if state.joined is None:
            local = _run_chunk(
                state, policy_programs, plan, file, save if path else None, name, progress
            )
        else:
            # Joined before an interruption: offer the saved values again.
            local = [x[group.index] for x in state.joined]
        state.joined = [group.gather(x) for x in local]
        if group.count > 1 and path:
            save()
            group.barrier(f"{name}: chunk {state.chunk} joined")
        _join(name, state, plan)
        if path:
            save()
    return state


def _chunk_trials(plan: _Plan, chunk: int) -> tuple[jax.Array, jax.Array]:
    """This process's trial ids of chunk `chunk` (int32[local_trials], split over its
    devices) and which of them are trials of the run, not padding (bool, the same)."""
    sharded = NamedSharding(plan.mesh, PartitionSpec("trials"))
    start = chunk * plan.chunk
    first = start + plan.group.index * plan.local_trials
    ids = np.arange(first, first + plan.local_trials)
    valid = ids < min(start + plan.chunk, plan.num_trials)
    return jax.device_put(ids.astype(np.int32), sharded), jax.device_put(valid, sharded)


def _call_rounds(plan: _Plan, first_round: int) -> int:
    """The rounds of the `run_rounds` call that starts at round `first_round`:
    `rounds_per_chunk`, or fewer at the end."""
    return min(plan.rounds_per_chunk, plan.num_rounds - first_round + 1)


def _run_chunk(state, programs_, plan: _Plan, file, save, name, progress) -> list[np.ndarray]:
    """Runs this process's trials of the chunk `state.chunk` from where `state` stands
    (a carry saved in the checkpoint `file`, a (path, identity) pair, where it stopped
    in the middle), saving after every call of `run_rounds` (if `save`), and returns its
    values for the join: the root of its devices' per-round sums f32[T, metrics, 2, 2]
    (double-f32) and selection counts f32[N], its trials' totals f32[trials, totals, 2]
    and decision checks f32[trials, 2]."""
    init_carry, run_rounds, finish = programs_
    # The environment's parameters are an argument of the programs, not constants in them.
    keys, params, chunk = plan.keys, plan.env.params, plan.chunk
    num_rounds, num_trials = plan.num_rounds, plan.num_trials
    start = state.chunk * chunk
    trial_ids, valid = _chunk_trials(plan, state.chunk)
    if state.carry_leaves is not None:
        shapes = jax.eval_shape(init_carry, keys, params, trial_ids)
        carry = checkpoints.saved_carry(state.carry_leaves, shapes, *file)
        carry = jax.device_put(carry, trial_ids.sharding)
    else:
        carry = init_carry(keys, params, trial_ids)
        state.curve = np.zeros((num_rounds, len(plan.layout.curves), 2, 2), np.float32)
    while state.next_round <= num_rounds:
        t0 = state.next_round
        length = _call_rounds(plan, t0)
        rounds = jnp.arange(t0, t0 + length, dtype=jnp.int32)
        carry, sums = run_rounds(carry, keys, params, trial_ids, valid, rounds)
        state.curve[t0 - 1 : t0 - 1 + length] = tree_sum(np.asarray(sums), double.add)
        state.next_round = t0 + length
        if save and state.next_round <= num_rounds:
            state.carry_leaves = [np.asarray(x) for x in jax.tree.leaves(carry)]
            save()
        if progress is not None:
            in_chunk = min(chunk, num_trials - start)
            done = start * num_rounds + in_chunk * (state.next_round - 1)
            progress(name, done, num_trials * num_rounds)
    per_trial, counts, cohorts = finish(carry, valid, jnp.float32(num_rounds))
    state.carry_leaves = None
    return [state.curve, tree_sum(np.asarray(counts)), np.asarray(per_trial), np.asarray(cohorts)]


def _join(name: str, state: checkpoints.Progress, plan: _Plan) -> None:
    """Moves `state` past its chunk with the chunk's values joined over processes,
    `state.joined` ([processes, ...] of each of `_run_chunk`'s values): the per-round
    sums and counts joined along the tree of `tree_sum`, the valid trials' totals in
    trial order, after checking their decisions."""
    curves, counts, per_trial, cohorts = state.joined
    start = state.chunk * plan.chunk
    ids = start + np.arange(plan.group.count * plan.local_trials)
    valid = ids < min(start + plan.chunk, plan.num_trials)
    cohorts = cohorts.reshape(-1, cohorts.shape[-1])[valid]
    _check_decisions(name, cohorts, plan.env.num_selected, start)
    state.per_trial.append(per_trial.reshape((-1,) + per_trial.shape[2:])[valid])
    state.stack.push((tree_sum(curves, double.add), tree_sum(counts)))
    state.chunk += 1
    state.next_round = 1
    state.joined = None


def _check_decisions(name: str, cohorts: np.ndarray, num_selected: int | None, start: int):
    """Raises if a trial's policy made a decision the environment does not accept
    (`metrics.decision_violations`, `Env.feasible`), which could make its regret negative.

    Args:
      cohorts: f32[trials, 2] of the chunk: each trial's largest cohort and its number of
        rounds with a decision not accepted.
      start: the index of the chunk's first trial.
    """
    largest, invalid = cohorts[:, 0], cohorts[:, 1]
    if not invalid.any():
        return
    trial = start + int(np.argmax(invalid > 0))
    cohort = (
        f" (its largest cohort: {int(largest.max())}; the environment's: num_selected="
        f"{num_selected})"
        if num_selected is not None
        else ""
    )
    raise ValueError(
        f"policy {name!r} made decisions the environment does not accept in "
        f"{int(invalid.sum())} rounds of {int((invalid > 0).sum())} trials, first in trial "
        f"{trial}{cohort}: a decision may select only available clients, at most "
        f"num_selected of them, within the environment's own constraints (Env.feasible). "
        f"Its results are not reported."
    )
