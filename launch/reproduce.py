r"""Reproduces a seed paper's figure: `python -m launch.reproduce --paper=xia --figure=1`.

Writes `<output_dir>/<paper>_fig<figure>_<setting>.png` and a `.json` of the numbers
the figure's claim rests on. Flagfiles for every figure are in `launch/flagfiles/`:

  python -m launch.reproduce --flagfile=launch/flagfiles/xia_fig1_calibrated.cfg
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

from absl import app, flags

from launch import reproductions

# Run as `python -m launch.reproduce`, this module is `__main__`; the reproductions import
# `Figure` from `launch.reproduce`, which must be this module, not a second copy that would
# define the flags again.
if __name__ == "__main__":
    sys.modules.setdefault("launch.reproduce", sys.modules[__name__])


class Options(NamedTuple):
    """What a figure's `run` receives.

    Attributes:
      setting: "literal" (the paper's parameters as printed) or "calibrated" (the spec's
        recommended reading, where the two differ).
      output_dir: where the figure and its JSON go.
      num_trials: Monte Carlo trials; None for the figure's default.
      num_rounds: rounds; None for the figure's default.
      seed: the seed of every random stream.
    """

    setting: str
    output_dir: str
    num_trials: int | None = None
    num_rounds: int | None = None
    seed: int = 0


class Figure(NamedTuple):
    """One reproducible figure.

    Attributes:
      claim: the claim the figure makes, in a sentence.
      run: `options -> dict`, runs it, writes the figure to `options.output_dir`, and
        returns the JSON-serialisable numbers (with a boolean `holds` per claim).
      settings: the settings it supports.
    """

    claim: str
    run: Callable[[Options], dict[str, Any]]
    settings: tuple[str, ...] = ("literal", "calibrated")


def papers() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(reproductions.__path__))


def figures(paper: str) -> dict[str, Figure]:
    if paper not in papers():
        raise ValueError(f"unknown paper {paper!r}; choose from {', '.join(papers())}.")
    return importlib.import_module(f"launch.reproductions.{paper}").FIGURES


def reproduce(paper: str, figure: str, options: Options) -> dict[str, Any]:
    """Runs one figure and writes its JSON; returns the numbers."""
    available = figures(paper)
    if figure not in available:
        raise ValueError(
            f"unknown figure {figure!r} of {paper}; choose from {', '.join(available)}."
        )
    fig = available[figure]
    if options.setting not in fig.settings:
        raise ValueError(
            f"setting must be one of {fig.settings} for {paper} figure {figure}, "
            f"got {options.setting!r}."
        )
    os.makedirs(options.output_dir, exist_ok=True)
    numbers = {"paper": paper, "figure": figure, "claim": fig.claim, **fig.run(options)}
    stem = os.path.join(options.output_dir, f"{paper}_fig{figure}_{options.setting}")
    with open(stem + ".json", "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    return numbers


_PAPER = flags.DEFINE_string("paper", None, "Seed paper: one of launch/reproductions.")
_FIGURE = flags.DEFINE_string("figure", None, "Figure of that paper.")
_SETTING = flags.DEFINE_enum("setting", "calibrated", ["literal", "calibrated"], "Parameters.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "out/reproductions", "Output directory.")
_NUM_TRIALS = flags.DEFINE_integer("num_trials", None, "Trials (default: the figure's).")
_NUM_ROUNDS = flags.DEFINE_integer("num_rounds", None, "Rounds (default: the figure's).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed.", lower_bound=0)


def main(argv):
    del argv
    if _PAPER.value is None or _FIGURE.value is None:
        raise app.UsageError(f"--paper and --figure are required; papers: {', '.join(papers())}.")
    options = Options(
        setting=_SETTING.value,
        output_dir=_OUTPUT_DIR.value,
        num_trials=_NUM_TRIALS.value,
        num_rounds=_NUM_ROUNDS.value,
        seed=_SEED.value,
    )
    try:
        numbers = reproduce(_PAPER.value, _FIGURE.value, options)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    json.dump(numbers, sys.stdout, indent=1, default=float)
    print()


if __name__ == "__main__":
    app.run(main)
