"""Progress of a run between chunks: saved after every chunk, resumed from, checked.

A checkpoint directory holds one `policy_<name>.npz` per policy with where its run
stands and its identity: the fingerprints of the policy and of the environment
(`fingerprint`), the seed, the sizes, the metrics, the user's `config` and the versions
that wrote it. A file is resumed only if its identity equals the run's; otherwise, or if
it cannot be read, the run stops before anything runs, naming the file and what differs.
Files are replaced atomically (written aside, then renamed), so an interrupted save
leaves the previous checkpoint intact.
"""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from collections.abc import Mapping

import jax
import numpy as np

from fedjax_sel.results import write_in_place
from fedjax_sel.runner.reduction import DyadicStack, join_chunks

# The layout of a checkpoint file; a file of another layout is refused, not misread.
FORMAT = 3

# What each field of an identity is, for the message when a file's differs from the run's.
_FIELDS = {
    "policy": "the policy's name (a file copied from another policy?)",
    "policy_fingerprint": "the policy (its factory's arguments, its arrays or its code)",
    "environment_fingerprint": "the environment (its parameters, its arrays or its code)",
    "format": "the checkpoint format",
    "fedjax_sel": "the fedjax-sel version that wrote it",
    "jax": "the jax version that wrote it",
    "num_devices": "the number of devices (a chunk's state holds its devices' blocks)",
    "num_processes": "the number of processes of the jax.distributed run",
    "process_index": "the process that wrote it (a file copied from another process?)",
}


@dataclasses.dataclass
class Progress:
    """Where a policy's run stands, as saved in a checkpoint."""

    chunk: int = 0
    next_round: int = 1
    curve: np.ndarray | None = None  # f32[T, metrics, 2, 2], current trial chunk
    per_trial: list = dataclasses.field(default_factory=list)
    stack: DyadicStack = dataclasses.field(default_factory=lambda: DyadicStack(join_chunks))
    carry_leaves: list | None = None
    # The chunk's values joined over processes, saved before the run moves past it
    # (`processes`); None otherwise.
    joined: list | None = None


def filename(policy: str, process: int, num_processes: int) -> str:
    """The checkpoint file of `policy` written by `process` of `num_processes`:
    `policy_<name>.npz` in a one-process run, `policy_<name>.process<p>of<P>.npz` else."""
    if num_processes == 1:
        return f"policy_{policy}.npz"
    return f"policy_{policy}.process{process}of{num_processes}.npz"


def process_count(name: str, policy: str) -> int | None:
    """The number of processes of the run that wrote the file `name`, if it is a
    checkpoint file of `policy` (`filename`); None otherwise."""
    match = re.fullmatch(rf"policy_{re.escape(policy)}(?:\.process\d+of(\d+))?\.npz", name)
    if match is None:
        return None
    return int(match.group(1) or 1)


def _start_over(path: str, policy: str) -> str:
    return (
        f"delete {path!r} to run policy {policy!r} from the start (the other policies' "
        f"files are kept), or use a fresh checkpoint_dir."
    )


def _atomic_save(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    try:
        write_in_place(path, lambda f: np.savez(f, **arrays), "wb", ".tmp.npz")
    except OSError as e:
        raise OSError(
            e.errno,
            f"could not write the checkpoint {path!r} ({e.strerror or e}); the previous "
            f"checkpoint is intact: free space or fix the directory's permissions and run "
            f"again to resume, or choose another checkpoint_dir",
        ) from e


def save_progress(path: str, p: Progress, identity: dict) -> None:
    arrays = {
        "identity": np.array(json.dumps(identity, sort_keys=True)),
        "chunk": np.int64(p.chunk),
        "next_round": np.int64(p.next_round),
        "curve": p.curve,
        "levels": np.asarray(p.stack.levels, np.int64),
        "num_per_trial": np.int64(len(p.per_trial)),
        "num_carry": np.int64(len(p.carry_leaves or [])),
        "num_joined": np.int64(len(p.joined or [])),
    }
    for i, (curve, fractions) in enumerate(p.stack.items):
        arrays[f"stack_curve_{i}"] = curve
        arrays[f"stack_counts_{i}"] = fractions
    for i, x in enumerate(p.per_trial):
        arrays[f"per_trial_{i}"] = x
    for i, x in enumerate(p.carry_leaves or []):
        arrays[f"carry_{i}"] = x
    for i, x in enumerate(p.joined or []):
        arrays[f"joined_{i}"] = x
    _atomic_save(path, arrays)


def _unreadable(path: str, identity: dict, error: Exception) -> ValueError:
    return ValueError(
        f"checkpoint file {path!r} cannot be read ({type(error).__name__}: {error}): it is "
        f"corrupt, truncated or not a fedjax-sel checkpoint; "
        f"{_start_over(path, identity['policy'])}"
    )


def saved_carry(leaves: list, shapes, path: str, identity: dict):
    """The carry saved in the middle of a chunk (`Progress.carry_leaves`), as the pytree
    of `shapes` (`jax.eval_shape` of the carry this code builds). Raises ValueError,
    naming the file, where the saved arrays are not that carry's: a file written by
    code that carried other arrays (the identity holds the version, not the layout)."""
    want = jax.tree.leaves(shapes)
    got = [(tuple(x.shape), np.dtype(x.dtype)) for x in leaves]
    if got != [(tuple(x.shape), np.dtype(x.dtype)) for x in want]:
        raise ValueError(
            f"checkpoint file {path!r} holds a run stopped in the middle of a chunk whose "
            f"{len(got)} carried arrays are not the {len(want)} that this code carries "
            f"(written by other code). {_start_over(path, identity['policy'])}"
        )
    return jax.tree.unflatten(jax.tree.structure(shapes), leaves)


def check_identity(path: str, identity: dict) -> None:
    """Raises ValueError, naming the file and what differs, unless the checkpoint at `path`
    holds a run with this `identity`."""
    try:
        with np.load(path) as f:
            saved = json.loads(str(f["identity"])) if "identity" in f.files else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise _unreadable(path, identity, e) from None
    if saved is None or not isinstance(saved, dict):
        raise ValueError(
            f"checkpoint file {path!r} holds no identity: it was written by an older "
            f"fedjax-sel or is not a checkpoint; {_start_over(path, identity['policy'])}"
        )
    differs = sorted(k for k in set(saved) | set(identity) if saved.get(k) != identity.get(k))
    if differs:
        what = "; ".join(f"{k}: {_FIELDS.get(k, k)}" for k in differs)
        raise ValueError(
            f"checkpoint file {path!r} holds a different run, which this one would resume "
            f"wrongly. It differs in {what}. {_start_over(path, identity['policy'])}"
        )


def load_progress(path: str, identity: dict) -> Progress:
    """The progress saved at `path`, whose identity `check_identity` accepted."""
    try:
        with np.load(path) as f:
            levels = [int(v) for v in f["levels"]]
            items = [(f[f"stack_curve_{i}"], f[f"stack_counts_{i}"]) for i in range(len(levels))]
            return Progress(
                chunk=int(f["chunk"]),
                next_round=int(f["next_round"]),
                curve=f["curve"],
                per_trial=[f[f"per_trial_{i}"] for i in range(int(f["num_per_trial"]))],
                stack=DyadicStack(join_chunks, levels, items),
                carry_leaves=[f[f"carry_{i}"] for i in range(int(f["num_carry"]))] or None,
                joined=[f[f"joined_{i}"] for i in range(int(f["num_joined"]))] or None,
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise _unreadable(path, identity, e) from None
