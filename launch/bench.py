r"""Bandit-only throughput of every policy against its NumPy reference.

  python -m launch.bench --policies=ucb --num_clients=100,1000 --num_trials=1000
  python -m launch.bench --policies=cs_ucb,cs_ucb_q,cocs,oort --num_trials=1000

For each stationary policy, number of clients N and number of trials M, one cell runs
`fedjax_sel.simulate` on the stationary Bernoulli environment (cohort 10% of N) and
`experiments.references.stationary` on the same environment, in the same process. A paper
policy (`experiments.references.PAPER`) runs on its paper's setting instead, at the paper's
N (`--num_clients` does not apply), its jitted run next to its NumPy reference on the same
environment, with the mean metrics of both printed side by side. Each cell reports:

- client-rounds per second, M * T * N / (wall seconds of the run without compilation);
  the first call compiles (its compile time is reported apart, from JAX's own compile
  events: the median of `--compiles` first calls, each after the process's programs are
  dropped), the next `--repeats` calls reuse the program and their median is taken;
- the NumPy reference's client-rounds per second, from `--reference_trials` trials, or
  as many as fill `--reference_seconds` when those take less (it
  runs one trial after another, so its rate does not depend on M) and the ratio;
- the peak resident memory of the process during each run (Linux VmHWM, reset before
  each run) and its increase over the memory resident before the run;
- the same rates per CPU-second of the process (all threads, compilation excluded),
  steadier than wall clock on a shared machine, and the load average next to every cell.

`--prng_impl` sets JAX's default PRNG implementation for the whole run (threefry is
JAX's default and the runner's, and the one the figures of docs/benchmarks.md use),
and `--memory_budget_bytes` is passed to `simulate`. Results go to `--output` as JSON
and are printed as a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import os
import sys

import jax
from absl import app, flags

from experiments import bench, references
from experiments.references import stationary
from fedjax_sel import validation


def _define_flags() -> None:
    """Defines the command-line flags (only when run as a program, so that importing
    this module next to other launch scripts defines no clashing flags)."""
    ints = lambda values: [str(v) for v in values]
    flags.DEFINE_list(
        "policies",
        sorted(stationary.REGISTRY),
        "Policies to measure: those of `bandits` with a NumPy reference, the policies of the "
        f"stationary environment ({', '.join(sorted(stationary.REGISTRY))}) and the papers' "
        f"policies on their papers' settings ({', '.join(sorted(references.PAPER))}).",
    )
    flags.DEFINE_list(
        "num_clients",
        ints([100, 1000, 10000]),
        "Numbers of clients N of the stationary policies' cells. Does not apply to a paper "
        "policy, which runs at its paper's N.",
    )
    flags.DEFINE_list("num_trials", ints([1, 100, 1000, 10000]), "Numbers of trials M.")
    flags.DEFINE_integer("num_rounds", 100, "Rounds T per trial.", lower_bound=1)
    flags.DEFINE_integer("repeats", 2, "Timed runs after the compiling one.", lower_bound=1)
    flags.DEFINE_integer(
        "compiles",
        3,
        "First calls of each cell, each after the process's programs are dropped: the "
        "compile time reported is their median (one compilation's time moves by a second "
        "or more from call to call).",
        lower_bound=1,
    )
    flags.DEFINE_integer(
        "reference_trials", 2, "Trials of the NumPy reference per (policy, N).", lower_bound=1
    )
    flags.DEFINE_float(
        "reference_seconds",
        2.0,
        "The NumPy reference runs more trials than --reference_trials when these take less "
        "time: as many as fill this many seconds.",
        lower_bound=0.0,
    )
    flags.DEFINE_enum(
        "reference_tie_break",
        "uniform",
        list(stationary.TIE_BREAKS),
        "How the references of ucb and epsilon_greedy break ties at the k-th place: "
        "uniformly at random like the jitted policies, or by np.argpartition's order (the "
        "leanest reference, a different rule).",
    )
    flags.DEFINE_float(
        "max_client_rounds", 2e9, "Skip cells with more trials x rounds x clients than this."
    )
    flags.DEFINE_integer(
        "memory_budget_bytes", None, "Passed to simulate: chunk trials to fit this budget."
    )
    flags.DEFINE_enum(
        "prng_impl",
        None,
        ["threefry2x32", "philox2x32", "philox4x32", "threefry4x32", "rbg", "unsafe_rbg"],
        "JAX's PRNG implementation (jax_default_prng_impl); None keeps JAX's default.",
    )
    flags.DEFINE_integer("seed", 0, "Seed.", lower_bound=0)
    flags.DEFINE_string("output", "out/bench/bench.json", "Where the JSON goes.")


def _sizes(flag: str, values: list[str]) -> list[int]:
    """The integers >= 1 of a comma-separated size flag."""
    try:
        sizes = [int(v) for v in values]
    except ValueError:
        raise ValueError(f"--{flag} must be integers >= 1, got {','.join(values)!r}.") from None
    if not sizes:
        raise ValueError(f"--{flag} must name at least one size.")
    return [validation.positive_int(f"--{flag}", v) for v in sizes]


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    bench.configure()
    f = flags.FLAGS
    try:
        if not f.policies:
            raise ValueError("--policies must name at least one policy.")
        num_clients = _sizes("num_clients", f.num_clients)
        num_trials = _sizes("num_trials", f.num_trials)
        validation.seed("--seed", f.seed)
        validation.output_file("--output", f.output)
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    if f.prng_impl is not None:
        jax.config.update("jax_default_prng_impl", f.prng_impl)
    try:
        results = bench.run_suite(
            policies=f.policies,
            num_clients=num_clients,
            num_trials=num_trials,
            num_rounds=f.num_rounds,
            repeats=f.repeats,
            compiles=f.compiles,
            reference_trials=f.reference_trials,
            reference_seconds=f.reference_seconds,
            reference_tie_break=f.reference_tie_break,
            max_client_rounds=f.max_client_rounds,
            memory_budget_bytes=f.memory_budget_bytes,
            seed=f.seed,
            log=lambda line: print(line, flush=True),
        )
    except ValueError as e:
        raise app.UsageError(str(e)) from None
    if os.path.dirname(f.output):
        os.makedirs(os.path.dirname(f.output), exist_ok=True)
    with open(f.output, "w") as out:
        json.dump(results, out, indent=1)
    print(bench.markdown_table(results))
    paper = bench.metrics_table(results)
    if paper:
        print(paper)
    print(f"skipped (over --max_client_rounds): {len(results['skipped'])} cells", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
