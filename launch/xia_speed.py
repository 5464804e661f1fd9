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
import time

import numpy as np
from absl import app, flags

import bandits
import fedjax_sel
from fedjax_sel.envs import wireless_latency
from fedjax_sel.envs.wireless_latency import PRESETS
from launch.xia_numpy import numpy_cs_ucb_trial

_NUM_TRIALS = flags.DEFINE_integer("num_trials", 8, "Trials of the jitted run.", lower_bound=1)
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 50, "Rounds per trial.", lower_bound=1)
_NUMPY_TRIALS = flags.DEFINE_integer("numpy_trials", 1, "Trials timed in NumPy.", lower_bound=1)
_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk", None, "Power of two; None: all at once (on CPU, chunks of 2^21 / N)."
)
_PRESET = flags.DEFINE_enum("preset", "literal", sorted(PRESETS), "Deadline preset.")

K, N = 20, 5  # the Figure 1 setting


def main(argv):
    del argv
    fedjax_sel.configure_cpu()
    trials, rounds = _NUM_TRIALS.value, _NUM_ROUNDS.value
    env = wireless_latency(K, N, preset=_PRESET.value)
    start = time.perf_counter()
    res = fedjax_sel.simulate(
        bandits.cs_ucb(K, N), env, rounds, trials, trials_per_chunk=_CHUNK.value, progress=None
    )
    jax_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    numpy_latency = [
        numpy_cs_ucb_trial(rng, rounds, PRESETS[_PRESET.value]) for _ in range(_NUMPY_TRIALS.value)
    ]
    numpy_s = time.perf_counter() - start
    per_trial = numpy_s / _NUMPY_TRIALS.value
    print(
        json.dumps(
            {
                "num_trials": trials,
                "num_rounds": rounds,
                "jax_wall_s_including_compile": jax_s,
                "numpy_trials_timed": _NUMPY_TRIALS.value,
                "numpy_s_per_trial": per_trial,
                "numpy_extrapolated_s": per_trial * trials,
                "speedup": per_trial * trials / jax_s,
                "jax_mean_latency_s": res.final("policy", "cumulative_latency")[0],
                "numpy_mean_latency_s": float(np.mean(numpy_latency)),
            }
        )
    )


if __name__ == "__main__":
    app.run(main)
