r"""Benchmark: FedAvg rounds per second, vectorized against a per-client `jit` loop.

Both sides do the same work: M trials, each round every trial picks k of N clients
uniformly at random, each selected client runs one local epoch of minibatch SGD on an
MLP, and the server takes the sample-weighted mean of their updates.
  - vectorized: one jitted program per round, `vmap` over the k cohort slots and the M
    trials (this project's way);
  - mapped: one jitted program per round that runs the M k client updates with
    `lax.map` in chunks of `--map_batch` (each chunk `vmap`-ed; `envs.training`'s
    `client_chunk`, `fl.cohort_update`): on a CPU this keeps a chunk's models in cache
    across their local steps, where a full `vmap` streams all M k models through
    memory at every step;
  - sequential: one jitted client update called per selected client of every trial,
    updates summed on the host side, the way FedJAX runs clients.
All start from the same models with the same keys and end with the same models up to
float32 rounding (the script reports the largest parameter difference). Compilation
is excluded (one warm-up round each).

  python -m launch.bench_training --flagfile=launch/flagfiles/bench_training.cfg

With `--roofline` it times no round: it measures this machine's f32 matmul GFLOP/s and
memory GB/s and counts the round's FLOPs and bytes moved per layout, the bounds of both
sides (`experiments.training_benchmark.roofline`; docs/benchmarks_training.md).
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from experiments.training_benchmark import benchmark, roofline
from fedjax_sel import threefry_cpu, validation

_NUM_CLIENTS = flags.DEFINE_integer("num_clients", 8, "N clients.")
_NUM_SELECTED = flags.DEFINE_integer("num_selected", 2, "k clients per round.")
_NUM_TRIALS = flags.DEFINE_integer("num_trials", 2, "M trials at once.")
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", 2, "Timed rounds per side.")
_EXAMPLES = flags.DEFINE_integer("examples_per_client", 16, "Examples per client.")
_FEATURES = flags.DEFINE_integer("features", 8, "Input features (784 for MNIST).")
_MODEL = flags.DEFINE_string("model", "mlp_128", "A flat model of `models` (mlp_128: 784-128-10).")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Local minibatch size.")
_MAP_BATCH = flags.DEFINE_integer("map_batch", 1, "Client updates per lax.map chunk.")
_ROOFLINE = flags.DEFINE_boolean(
    "roofline",
    False,
    "Instead of timing rounds, measure this machine's matmul GFLOP/s and memory GB/s and "
    "count the round's FLOPs and bytes per layout (experiments.training_benchmark.roofline).",
)
_OUTPUT = flags.DEFINE_string("output", None, "Write the numbers to this JSON file.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        n = validation.positive_int("--num_clients", _NUM_CLIENTS.value)
        validation.num_selected(_NUM_SELECTED.value, n, "--num_selected")
        for flag in (_NUM_TRIALS, _NUM_ROUNDS, _EXAMPLES, _FEATURES, _BATCH, _MAP_BATCH):
            validation.positive_int(f"--{flag.name}", flag.value)
        if _OUTPUT.value:
            validation.output_file("--output", _OUTPUT.value)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    # Both sides draw their minibatches through the same (straight-line) threefry.
    threefry_cpu.register()
    try:
        if _ROOFLINE.value:
            numbers = roofline(
                _NUM_SELECTED.value,
                _NUM_TRIALS.value,
                _EXAMPLES.value,
                _FEATURES.value,
                _MODEL.value,
                _BATCH.value,
            )
        else:
            numbers = benchmark(
                _NUM_CLIENTS.value,
                _NUM_SELECTED.value,
                _NUM_TRIALS.value,
                _NUM_ROUNDS.value,
                _EXAMPLES.value,
                _FEATURES.value,
                _MODEL.value,
                _BATCH.value,
                _MAP_BATCH.value,
            )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    print(json.dumps(numbers, indent=1))
    if _OUTPUT.value:
        os.makedirs(os.path.dirname(os.path.abspath(_OUTPUT.value)), exist_ok=True)
        with open(_OUTPUT.value, "w") as f:
            json.dump(numbers, f, indent=1)


if __name__ == "__main__":
    app.run(main)
