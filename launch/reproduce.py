r"""Reproduces a seed paper's figure: `python -m launch.reproduce --paper=xia --figure=1`.

Writes `<output_dir>/<paper>_fig<figure>_<setting>.png` and a `.json` of the numbers
the figure's claim rests on, and prints the JSON. Flagfiles for every figure are in
`launch/flagfiles/`:

  python -m launch.reproduce --flagfile=launch/flagfiles/huang_fig3_calibrated.cfg

The training figures take `--dataset` (and `--data_dir`) to run on a prepared tfds
dataset instead of their offline default:

  python -m launch.reproduce --flagfile=launch/flagfiles/huang_training_fig5a_calibrated.cfg \
      --dataset=fashion_mnist --data_dir=~/tensorflow_datasets

The figures themselves live in `experiments/reproductions/<paper>.py`. Compiled programs
are kept in JAX's persistent compilation cache (`--compilation_cache_dir`,
`launch/compilation_cache.py`), so a second run of a figure loads them instead of
compiling them.
"""

from __future__ import annotations

import json
import sys

from absl import app, flags

import fedjax_sel
from experiments import reproductions
from launch import compilation_cache

_PAPER = flags.DEFINE_string("paper", None, "Seed paper: a module of experiments/reproductions.")
_FIGURE = flags.DEFINE_string("figure", None, "Figure of that paper.")
_SETTING = flags.DEFINE_enum("setting", "calibrated", ["literal", "calibrated"], "Parameters.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "out/reproductions", "Output directory.")
_NUM_TRIALS = flags.DEFINE_integer("num_trials", None, "Trials (default: the figure's).")
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", None, "Rounds (default: the figure's).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.", lower_bound=0)
_DATASET = flags.DEFINE_string(
    "dataset",
    None,
    "Training figures: a dataset replacing the offline default, e.g. a prepared tfds "
    "fashion_mnist, cifar10, mnist or emnist (default: the figure's own).",
)
_DATA_DIR = flags.DEFINE_string("data_dir", None, "tfds data directory of --dataset.")
_CACHE_DIR = compilation_cache.define_flag()


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    fedjax_sel.configure_cpu()
    cache = compilation_cache.enable(_CACHE_DIR.value)
    if _PAPER.value is None or _FIGURE.value is None:
        raise app.UsageError(
            f"--paper and --figure are required; papers: {', '.join(reproductions.papers())}."
        )
    options = reproductions.Options(
        setting=_SETTING.value,
        output_dir=_OUTPUT_DIR.value,
        num_trials=_NUM_TRIALS.value,
        num_rounds=_NUM_ROUNDS.value,
        seed=_SEED.value,
        dataset=_DATASET.value,
        data_dir=_DATA_DIR.value,
    )
    try:
        numbers = reproductions.reproduce(_PAPER.value, _FIGURE.value, options)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    json.dump(numbers, sys.stdout, indent=1, default=float)
    print()
    print(compilation_cache.summary(cache), file=sys.stderr)


if __name__ == "__main__":
    app.run(main)
