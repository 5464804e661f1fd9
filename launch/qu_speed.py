r"""Wall time of Figure 3's bandit-only setting of Qu et al.: one jitted program vs NumPy.

  python -m launch.qu_speed --num_trials=1000 --num_rounds=1000 --numpy_trials=3

Runs COCS on the hierarchical network (N = 50 clients, M = 3 edge servers, MNIST
constants, physical generator) through `fedjax_sel.simulate` (one XLA program: scan over
rounds, vmap over trials), twice (with and without compilation), then the plain NumPy
COCS of `experiments.references.qu.numpy_cocs_trial` on `numpy_trials` trials, extrapolated
linearly to `num_trials`. Prints a JSON line (docs/benchmarks.md).
"""

from __future__ import annotations

import json

from absl import app, flags

from experiments import bench

_NUM_TRIALS = flags.DEFINE_integer("num_trials", 8, "Trials of the jitted run.", lower_bound=1)
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 50, "Rounds per trial.", lower_bound=1)
_NUMPY_TRIALS = flags.DEFINE_integer("numpy_trials", 1, "Trials timed in NumPy.", lower_bound=1)
_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk", None, "Power of two; None: the runner's choice for the platform."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    bench.configure()
    try:
        numbers = bench.qu_speed(
            _NUM_TRIALS.value, _NUM_ROUNDS.value, _NUMPY_TRIALS.value, _CHUNK.value
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(numbers))


if __name__ == "__main__":
    app.run(main)
