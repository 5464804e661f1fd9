r"""One long `simulate` under a memory budget: its peak host memory and wall time.

  python -m launch.memory_run --num_trials=10000 --num_clients=10000 --num_rounds=1000 \
      --memory_budget_bytes=2200000000 --checkpoint_dir=out/memory_ckpt

Runs `--policy` on the stationary Bernoulli environment (cohort 10% of N) once, with
`simulate(..., memory_budget_bytes=B)` choosing the trial chunk, and writes to
`--output` the chosen chunk, the peak resident memory of the process (Linux VmHWM),
the wall and CPU seconds (compilation included) and the final mean cumulative regret.
With `--checkpoint_dir` an interrupted run resumes where it stopped (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os

from absl import app, flags

import bandits
from experiments import bench
from fedjax_sel import validation

_POLICY = flags.DEFINE_enum("policy", "ucb", sorted(bandits.REGISTRY), "Policy to run.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 10000, "N.", lower_bound=10)
_NUM_TRIALS = flags.DEFINE_integer("num_trials", 10000, "Trials M.", lower_bound=1)
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 1000, "Rounds T.", lower_bound=1)
_BUDGET = flags.DEFINE_integer(
    "memory_budget_bytes", 8_000_000_000, "Passed to simulate.", lower_bound=1
)
_ROUNDS_PER_CHUNK = flags.DEFINE_integer(
    "rounds_per_chunk", 50, "Rounds per compiled call (progress and checkpoints).", lower_bound=1
)
_CHECKPOINT_DIR = flags.DEFINE_string("checkpoint_dir", None, "Resume from / save to here.")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.", lower_bound=0)
_OUTPUT = flags.DEFINE_string("output", "out/bench/memory.json", "Where the JSON goes.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        validation.seed("--seed", _SEED.value)
        validation.output_file("--output", _OUTPUT.value)
        if _CHECKPOINT_DIR.value is not None:
            validation.output_dir("--checkpoint_dir", _CHECKPOINT_DIR.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    bench.configure()
    try:
        report = bench.memory_run(
            _POLICY.value,
            num_clients=_NUM_CLIENTS.value,
            num_trials=_NUM_TRIALS.value,
            num_rounds=_NUM_ROUNDS.value,
            memory_budget_bytes=_BUDGET.value,
            rounds_per_chunk=_ROUNDS_PER_CHUNK.value,
            checkpoint_dir=_CHECKPOINT_DIR.value,
            seed=_SEED.value,
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    if os.path.dirname(_OUTPUT.value):
        os.makedirs(os.path.dirname(_OUTPUT.value), exist_ok=True)
    with open(_OUTPUT.value, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    app.run(main)
