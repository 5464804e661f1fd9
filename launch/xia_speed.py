r"""Wall time of the Figure 1 setting of Xia et al. (2020): one jitted program vs NumPy.

  python -m launch.xia_speed --num_trials=10000 --num_rounds=5000 --numpy_trials=3

Runs CS-UCB on the wireless latency environment (K = 20, N = 5, literal preset,
geometry per trial) through `fedjax_sel.simulate` (one XLA program: scan over rounds,
vmap over trials), then a plain NumPy implementation of the same policy and
environment, one trial at a time, on `numpy_trials` trials, and extrapolates its time
linearly to `num_trials`. Prints a JSON line.
"""

from __future__ import annotations

import json

from absl import app, flags

from experiments import bench
from fedjax_sel.envs.wireless_latency import PRESETS

_NUM_TRIALS = flags.DEFINE_integer("num_trials", 8, "Trials of the jitted run.", lower_bound=1)
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 50, "Rounds per trial.", lower_bound=1)
_NUMPY_TRIALS = flags.DEFINE_integer("numpy_trials", 1, "Trials timed in NumPy.", lower_bound=1)
_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk", None, "Power of two; None: all at once (on CPU, chunks of 2^21 / N)."
)
_PRESET = flags.DEFINE_enum("preset", "literal", sorted(PRESETS), "Deadline preset.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    bench.configure()
    try:
        numbers = bench.xia_speed(
            _NUM_TRIALS.value, _NUM_ROUNDS.value, _PRESET.value, _CHUNK.value, _NUMPY_TRIALS.value
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(numbers))


if __name__ == "__main__":
    app.run(main)
