r"""Monte Carlo sweep of selection policies on one environment.

  python -m launch.sweep                      # a meaningful default, about a minute on 2 cores
  python -m launch.sweep --env=bernoulli --policies=ucb,thompson,random \
      --num_clients=1000 --num_selected=100 --num_rounds=5000 --num_trials=1000
  python -m launch.sweep --flagfile=launch/flagfiles/sweep_default.cfg

Prints progress while it runs and a table at the end (final cumulative regret, mean and
95% interval over trials, per policy, with the other headline metrics); writes
`results.npz`/`results.json`, `regret.png` and a resumable checkpoint to `--output_dir`.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from absl import app, flags

import bandits
import fedjax_sel
from fedjax_sel import envs

_ENV = flags.DEFINE_string("env", "bernoulli", "Environment name (fedjax_sel.envs.REGISTRY).")
_POLICIES = flags.DEFINE_list(
    "policies",
    "oracle,ucb,thompson,epsilon_greedy,round_robin,random",
    "Comma-separated policy names (bandits.REGISTRY).",
)
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 100, "Number of clients N.")
_NUM_SELECTED = flags.DEFINE_integer("num_selected", 10, "Clients selected per round k.")
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 1000, "Rounds T.")
_NUM_TRIALS = flags.DEFINE_integer("num_trials", 200, "Monte Carlo trials M.")
_AVAILABILITY = flags.DEFINE_float("availability", 1.0, "Probability a client is available.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of every random stream.")
_TRIALS_PER_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk",
    None,
    "Trials run at once (a power of two); default all, or on CPU at most 2^21 / N per device.",
)
_ROUNDS_PER_CHUNK = flags.DEFINE_integer(
    "rounds_per_chunk", None, "Rounds per compiled call (progress, checkpoints); default T/10."
)
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "out/sweep", "Where results and figures go.")


class _Progress:
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


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    fedjax_sel.configure_cpu()
    rounds_per_chunk = _ROUNDS_PER_CHUNK.value or max(1, _NUM_ROUNDS.value // 10)
    if _ROUNDS_PER_CHUNK.value is None and _NUM_ROUNDS.value >= 1:
        rounds_per_chunk = min(rounds_per_chunk, _NUM_ROUNDS.value)
    start = time.perf_counter()
    print(
        f"sweep: env={_ENV.value} N={_NUM_CLIENTS.value} k={_NUM_SELECTED.value} "
        f"T={_NUM_ROUNDS.value} trials={_NUM_TRIALS.value} policies={','.join(_POLICIES.value)}",
        flush=True,
    )
    try:
        results = run(
            env=_ENV.value,
            policies=_POLICIES.value,
            num_clients=_NUM_CLIENTS.value,
            num_selected=_NUM_SELECTED.value,
            num_rounds=_NUM_ROUNDS.value,
            num_trials=_NUM_TRIALS.value,
            availability=_AVAILABILITY.value,
            seed=_SEED.value,
            trials_per_chunk=_TRIALS_PER_CHUNK.value,
            rounds_per_chunk=rounds_per_chunk,
            output_dir=_OUTPUT_DIR.value,
            progress=_Progress(),
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print()
    print(f"After {results.num_rounds} rounds, mean over {results.num_trials} trials +- 95% CI:")
    print(results.table())
    print()
    print(f"wrote {_OUTPUT_DIR.value}/results.npz, results.json, regret.png")
    print(f"total time {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    app.run(main)
