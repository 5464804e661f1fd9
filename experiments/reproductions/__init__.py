"""Paper reproductions, one module per paper, run by `python -m launch.reproduce`.

A module `experiments/reproductions/<paper>.py` defines `FIGURES`, a mapping from a figure
name ("1", "3", ...) to a `Figure`. Modules are discovered by name, so adding a paper
needs no registration.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
from collections.abc import Callable
from typing import Any, NamedTuple

from fedjax_sel import validation


class Options(NamedTuple):
    """What a figure's `run` receives.

    Attributes:
      setting: "literal" (the paper's parameters as printed) or "calibrated" (the spec's
        recommended reading, where the two differ).
      output_dir: where the figure and its JSON go.
      num_trials: Monte Carlo trials; None for the figure's default.
      num_rounds: rounds; None for the figure's default.
      seed: the seed of every random stream.
      dataset: a dataset of `fedjax_sel.data` replacing a training figure's offline
        default (e.g. a prepared tfds "fashion_mnist"); None for the default.
      data_dir: the tfds data directory of `dataset`; None for tfds's default.
    """

    setting: str
    output_dir: str
    num_trials: int | None = None
    num_rounds: int | None = None
    seed: int = 0
    dataset: str | None = None
    data_dir: str | None = None


class Figure(NamedTuple):
    """One reproducible figure.

    Attributes:
      claim: the claim the figure makes, in a sentence.
      run: `options -> dict`, runs it, writes the figure to `options.output_dir`, and
        returns the JSON-serialisable numbers (with a boolean `holds` per claim).
      settings: the settings it supports.
      datasets: the datasets `Options.dataset` may name (training figures); empty
        for figures without training data.
    """

    claim: str
    run: Callable[[Options], dict[str, Any]]
    settings: tuple[str, ...] = ("literal", "calibrated")
    datasets: tuple[str, ...] = ()


# A regret is called sub-linear when its growth exponent (`Results.growth_exponent`) is
# below 1 by this much and below the linear baselines' by as much. (A log-log slope below
# 1 cannot fail: a linear regret with an offset has one.)
SUBLINEAR_MARGIN = 0.2


def sublinear_regret(growth: dict[str, float], policy: str, baselines: tuple[str, ...]) -> bool:
    """Whether `policy`'s regret growth exponent (`growth`, per policy) is sub-linear:
    below 1 - `SUBLINEAR_MARGIN` and below each of `baselines`' by the margin."""
    return bool(
        growth[policy] < 1.0 - SUBLINEAR_MARGIN
        and all(growth[policy] < growth[p] - SUBLINEAR_MARGIN for p in baselines)
    )


def papers() -> list[str]:
    """Names of the papers with reproductions."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__))


def figures(paper: str) -> dict[str, Figure]:
    """The figures of `paper`, by name."""
    if paper not in papers():
        raise ValueError(f"unknown paper {paper!r}; choose from {', '.join(papers())}.")
    return importlib.import_module(f"{__name__}.{paper}").FIGURES


def reproduce(paper: str, figure: str, options: Options) -> dict[str, Any]:
    """Runs one figure, writes `<paper>_fig<figure>_<setting>.json`; returns the numbers.

    Raises:
      ValueError: an unknown paper, figure, setting or dataset, sizes that are not None
        or integers >= 1 (0 does not mean "the default"), a seed outside [0, 2^32), or an
        `output_dir` that cannot be a directory; before anything runs or is written.
    """
    for name in ("num_trials", "num_rounds"):
        if getattr(options, name) is not None:
            validation.positive_int(name, getattr(options, name))
    validation.seed("seed", options.seed)
    validation.output_dir("output_dir", options.output_dir)
    available = figures(paper)
    if figure not in available:
        training = f"{paper}_training"
        hint = ""
        if training in papers() and figure in figures(training):
            hint = f" Figure {figure!r} trains models: --paper={training}."
        raise ValueError(
            f"unknown figure {figure!r} of {paper}; choose from {', '.join(available)}.{hint}"
        )
    fig = available[figure]
    if options.setting not in fig.settings:
        raise ValueError(
            f"setting must be one of {fig.settings} for {paper} figure {figure}, "
            f"got {options.setting!r}."
        )
    if options.dataset is not None and options.dataset not in fig.datasets:
        allowed = f"one of {fig.datasets}" if fig.datasets else "None (it trains no model)"
        raise ValueError(
            f"dataset must be {allowed} for {paper} figure {figure}, got {options.dataset!r}."
        )
    if options.data_dir is not None and options.dataset is None:
        raise ValueError("data_dir needs a dataset: name the prepared tfds dataset to read.")
    os.makedirs(options.output_dir, exist_ok=True)
    numbers = {"paper": paper, "figure": figure, "claim": fig.claim, **fig.run(options)}
    stem = os.path.join(options.output_dir, f"{paper}_fig{figure}_{options.setting}")
    with open(stem + ".json", "w") as f:
        json.dump(numbers, f, indent=1, default=float)
    return numbers
