r"""Throughput of Oort and Power-of-Choice on heterogeneous devices: one jitted program vs NumPy.

  python -m launch.beyond_speed --policy=oort --num_clients=1000 --num_kept=10 \
      --num_trials=1000 --num_rounds=50 --numpy_trials=20

Runs `bandits.oort` or `bandits.power_of_choice` (`pow-d`, d = 2m) on `envs.devices` at its
defaults, K = `num_kept` kept of m = int(1.3 K) selected, through `fedjax_sel.simulate` (one
XLA program: scan over rounds, vmap over trials) twice (the first call compiles), after the
plain NumPy reference of the same policy and environment
(`experiments.references.beyond.trial`, one trial at a time) on `numpy_trials` trials.
Prints a JSON line: client-rounds per second of both, their ratio, compile time, peak
resident memory (docs/benchmarks.md).
"""

from __future__ import annotations

import json

from absl import app, flags

from experiments import bench
from experiments.references import beyond

_POLICY = flags.DEFINE_enum("policy", "oort", beyond.POLICIES, "Selector.")
_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 1000, "N.", lower_bound=1)
_NUM_KEPT = flags.DEFINE_integer(
    "num_kept", 100, "K kept a round; int(1.3 K) are selected.", lower_bound=1
)
_NUM_TRIALS = flags.DEFINE_integer("num_trials", 8, "Trials of the jitted run.", lower_bound=1)
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 20, "Rounds per trial.", lower_bound=1)
_NUMPY_TRIALS = flags.DEFINE_integer("numpy_trials", 1, "Trials timed in NumPy.", lower_bound=1)
_CHUNK = flags.DEFINE_integer(
    "trials_per_chunk", None, "Power of two; None: the runner's choice for the platform."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    bench.configure()
    try:
        numbers = bench.beyond_speed(
            _POLICY.value,
            _NUM_CLIENTS.value,
            _NUM_TRIALS.value,
            _NUM_ROUNDS.value,
            _NUMPY_TRIALS.value,
            _CHUNK.value,
            _NUM_KEPT.value,
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(numbers))


if __name__ == "__main__":
    app.run(main)
