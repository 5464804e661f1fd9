"""Progress of a run between chunks: saved after every chunk, resumed from, checked.

A checkpoint directory holds `config.json` (the run's configuration, compared on
resume) and one `policy_<name>.npz` per policy with where its run stands.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

import numpy as np

from fedjax_sel.runner.reduction import DyadicStack, join_chunks


@dataclasses.dataclass
class Progress:
    """Where a policy's run stands, as saved in a checkpoint."""

    chunk: int = 0
    next_round: int = 1
    curve: np.ndarray | None = None  # f32[T, metrics, 2, 2], current trial chunk
    per_trial: list = dataclasses.field(default_factory=list)
    stack: DyadicStack = dataclasses.field(default_factory=lambda: DyadicStack(join_chunks))
    carry_leaves: list | None = None


def _atomic_save(path: str, arrays: Mapping[str, np.ndarray]) -> None:
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def save_progress(path: str, p: Progress) -> None:
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


def load_progress(path: str) -> Progress:
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
        )


def check_config(checkpoint_dir: str, config: dict) -> None:
    """Writes `config` to a new checkpoint directory, or raises if the directory holds a
    run of another configuration."""
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
