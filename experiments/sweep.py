"""A sweep of registered policies on a registered environment: the logic of `launch/sweep.py`.

Importable without flags: `run` builds the environment and the policies by name
(`fedjax_sel.envs.REGISTRY`, `bandits.REGISTRY`), simulates them, and writes results and
the regret figure; `Progress` prints one line per chunk.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

import bandits
import fedjax_sel
from fedjax_sel import envs


class Progress:
    """Prints one line per chunk: percent done, time spent and an estimate of time left.

    A policy's clock starts when the previous policy finished (or at construction), so
    its first chunk, compilation included, is counted.
    """

    def __init__(self, stream=sys.stderr):
        self.stream = stream
        self.start = {}
        self.last = time.perf_counter()

    def __call__(self, policy: str, done: int, total: int) -> None:
        now = time.perf_counter()
        start = self.start.setdefault(policy, self.last)
        self.last = now
        left = (total - done) * (now - start) / done
        print(
            f"  {policy:>16s} {100.0 * done / total:5.1f}%  ({now - start:5.1f} s, "
            f"about {left:4.0f} s left)",
            file=self.stream,
            flush=True,
        )


def run(
    env: str,
    policies: list[str],
    num_clients: int,
    num_selected: int,
    num_rounds: int,
    num_trials: int,
    availability: float = 1.0,
    seed: int = 0,
    trials_per_chunk: int | None = None,
    rounds_per_chunk: int | None = None,
    output_dir: str | None = None,
    progress=None,
) -> fedjax_sel.Results:
    """Builds the environment and policies by name and runs the sweep.

    Under `output_dir` (if given) it checkpoints after every chunk, so an interrupted
    sweep resumes where it stopped when run again with the same arguments; once the
    results and the regret figure are written the checkpoint is removed. Raises
    ValueError on an unknown name or an invalid size, before anything runs.
    """
    if not policies:
        raise ValueError("policies must name at least one policy.")
    if len(set(policies)) != len(policies):
        raise ValueError(f"policies must be distinct, got {policies}.")
    environment = envs.make(env, num_clients, num_selected, availability=availability)
    selectors = {name: bandits.make(name, num_clients, num_selected) for name in policies}
    config = {"env": env, "num_selected": num_selected, "availability": availability}
    checkpoint_dir = None
    if output_dir:
        os.makedirs(output_dir, exist_ok=True)
        checkpoint_dir = os.path.join(output_dir, "checkpoint")
    results = fedjax_sel.simulate(
        selectors,
        environment,
        num_rounds=num_rounds,
        num_trials=num_trials,
        seed=seed,
        trials_per_chunk=trials_per_chunk,
        rounds_per_chunk=rounds_per_chunk,
        checkpoint_dir=checkpoint_dir,
        config=config,
        progress=progress,
    )
    if output_dir:
        results.save(os.path.join(output_dir, "results"))
        fedjax_sel.plot(results, "cumulative_regret", path=os.path.join(output_dir, "regret.png"))
        shutil.rmtree(checkpoint_dir)
    return results
