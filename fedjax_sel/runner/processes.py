"""Several processes of a `jax.distributed` job: which trials each runs, and the join.

Every process calls `simulate` with the same arguments. A chunk of trials is laid out
over the devices of every process in process order, as one process would lay it out
over all of them (`chunking.device_block`): process p runs the p-th run of
`num_local_devices` blocks on its own devices, with no value crossing processes inside a
chunk. At the end of a chunk the processes exchange what the host of a one-process run
reads from its devices (`Group.gather`): each process's root of its blocks' per-round
sums and selection counts, and its trials' totals and decision checks. Because the
number of local devices is the same power of two on every process, a process's blocks
form an aligned subtree of the fixed tree of `reduction.tree_sum`, so joining the
processes' roots along the same tree gives the sums of one process, bit for bit, and
every process returns the same `Results`.

Checkpoints are written by each process for its own devices' state. A chunk ends in two
saves with a barrier between them: each process first saves the exchanged values (its
chunk is "joined"), then, once every process has, the run's state after the chunk.
Processes killed at any point therefore stand, on resume, either all in one chunk (some
of them possibly joined: they offer their saved values to the exchange again instead of
recomputing them) or in two consecutive chunks, those behind holding the joined values
that move them forward (`catch_up`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import numpy as np


def allgather(x: np.ndarray) -> np.ndarray:
    """`x` of every process stacked in process order, [processes, ...], on every process.

    `x` must have the same shape and dtype on every process; 32-bit and smaller dtypes
    travel bit for bit.
    """
    x = np.asarray(x)
    if jax.process_count() == 1:
        return x[None]
    from jax.experimental import multihost_utils

    gathered = np.asarray(multihost_utils.process_allgather(x, tiled=False))
    if gathered.dtype != x.dtype:
        raise ValueError(f"allgather changed {x.dtype} to {gathered.dtype}; send 32-bit values.")
    return gathered


def sync(name: str) -> None:
    """Waits until every process arrives (nothing to wait for with one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


class Group(NamedTuple):
    """The processes of a run as the runner sees them.

    Attributes:
      index: this process's index, in [0, count).
      count: the number of processes.
      gather: `allgather` (or a stand-in).
      barrier: `sync` (or a stand-in).
    """

    index: int
    count: int
    gather: Callable[[np.ndarray], np.ndarray]
    barrier: Callable[[str], None]

    def agree(self, error: str | None) -> None:
        """Raises ValueError on every process if any process has an `error` (its own
        message on that process, a pointer to it on the others): a check that fails on
        one process must stop all, or the others would wait for it forever."""
        failed = self.gather(np.int32(error is not None))
        if error is not None:
            raise ValueError(error)
        if failed.any():
            first = int(np.argmax(failed))
            raise ValueError(
                f"process {first} of this jax.distributed job refused the run (its error says "
                f"why); nothing ran and nothing was written."
            )

    def check_same_run(self, description: str, num_local_devices: int) -> None:
        """Raises ValueError on every process unless every process describes the same run
        (a hash of `description`) on the same power-of-two number of local devices."""
        digest = np.frombuffer(hashlib.sha256(description.encode()).digest(), np.uint8)
        row = np.concatenate([digest.astype(np.int32), [num_local_devices]]).astype(np.int32)
        rows = self.gather(row)
        devices = rows[:, -1]
        if (devices != devices[0]).any() or devices[0] & (devices[0] - 1):
            raise ValueError(
                f"every process of a jax.distributed run must have the same number of local "
                f"devices, a power of two (the runner joins each process's blocks of trials "
                f"as one subtree of its fixed-order sums); the processes have "
                f"{devices.tolist()}. Pass devices= a power-of-two list of each process's "
                f"local devices, the same length everywhere."
            )
        differ = [p for p in range(self.count) if (rows[p, :-1] != rows[0, :-1]).any()]
        if differ:
            raise ValueError(
                f"simulate was called with other arguments on processes {differ} than on "
                f"process 0 (policies, environment, sizes, seed, chunking or config differ, "
                f"compared by a hash exchanged at the start); every process of a "
                f"jax.distributed run must call simulate with the same arguments."
            )


def current() -> Group:
    """The processes of this `jax.distributed` job (one, without it)."""
    return Group(jax.process_index(), jax.process_count(), allgather, sync)


class Status(NamedTuple):
    """Where a process's checkpoint stands: its chunk, and whether it holds that
    chunk's joined values."""

    chunk: int
    joined: bool


def behind(statuses: Sequence[Status], index: int) -> bool:
    """Whether process `index` must apply its saved joined values to reach the others
    (see the module docstring); raises ValueError if the processes' checkpoints cannot
    come from one interrupted run.

    Args:
      statuses: every process's `Status`, in process order.
      index: this process.
    """
    chunks = sorted({s.chunk for s in statuses})
    consistent = len(chunks) == 1 or (
        len(chunks) == 2
        and chunks[1] == chunks[0] + 1
        and all(s.joined for s in statuses if s.chunk == chunks[0])
    )
    if not consistent:
        raise ValueError(
            f"the processes' checkpoint files do not come from one interrupted run (their "
            f"chunks and joined flags: {[tuple(s) for s in statuses]}); delete every "
            f"process's files to start over, or use a fresh checkpoint_dir."
        )
    return statuses[index].chunk < chunks[-1]
