r"""Bandit-only throughput of every policy against its NumPy reference.

  python -m launch.bench --policies=ucb --num_clients=100,1000 --num_trials=1000

For each policy, number of clients N and number of trials M, one cell runs
`fedjax_sel.simulate` on the stationary Bernoulli environment (cohort 10% of N) and
`launch.numpy_reference` on the same environment, in the same process, and reports:

- client-rounds per second, M * T * N / (wall seconds of the run without compilation);
  the first call compiles (its compile time is reported apart, from JAX's own compile
  events), the next `--repeats` calls reuse the program and their median is taken;
- the NumPy reference's client-rounds per second, from `--reference_trials` trials, or
  as many as fill `--reference_seconds` when those take less (it
  runs one trial after another, so its rate does not depend on M) and the ratio;
- the peak resident memory of the process during each run (Linux VmHWM, reset before
  each run) and its increase over the memory resident before the run;
- the same rates per CPU-second of the process (all threads, compilation excluded),
  steadier than wall clock on a shared machine, and the load average next to every cell.

`--prng_impl` sets JAX's default PRNG implementation for the whole run (threefry is
JAX's default and the runner's; see docs/benchmarks.md for the measured alternatives),
and `--memory_budget_bytes` is passed to `simulate`. Results go to `--output` as JSON
and are printed as a Markdown table (docs/benchmarks.md).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from absl import app, flags

import bandits
import fedjax_sel
from fedjax_sel import envs
from launch import numpy_reference

_COMPILE_EVENTS = "/jax/core/compile/"
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
# Seconds spent tracing, lowering and compiling, and the number of XLA compilations.
_compile_seconds = [0.0]
_backend_compiles = [0]


def _on_duration(event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event.startswith(_COMPILE_EVENTS):
        _compile_seconds[0] += duration
    if event == _BACKEND_COMPILE:
        _backend_compiles[0] += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def measure(fn: Callable[[], Any]) -> dict[str, float | None]:
    """Runs `fn` once: wall, CPU (all threads) and compile seconds, peak and added RSS."""
    _reset_peak()
    before = _status_kb("VmRSS")
    compiled, compiles = _compile_seconds[0], _backend_compiles[0]
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = _status_kb("VmHWM")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "compile_s": _compile_seconds[0] - compiled,
        "xla_compilations": _backend_compiles[0] - compiles,
        "peak_rss_bytes": peak,
        "added_rss_bytes": None if peak is None or before is None else peak - before,
    }


def machine() -> dict[str, Any]:
    """The host and JAX backend the figures were taken on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": memory,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "numpy": np.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "prng_impl": str(jax.config.jax_default_prng_impl),
    }


def bench_jax(
    policy: str,
    num_clients: int,
    num_trials: int,
    num_rounds: int,
    repeats: int,
    seed: int = 0,
    memory_budget_bytes: int | None = None,
) -> dict[str, Any]:
    """Compiles and runs `simulate` once, then `repeats` more times; median run time."""
    k = max(1, num_clients // 10)
    env = envs.bernoulli(num_clients, k)
    selector = bandits.make(policy, num_clients, k)

    budget = {} if memory_budget_bytes is None else {"memory_budget_bytes": memory_budget_bytes}

    def run():
        fedjax_sel.simulate(selector, env, num_rounds, num_trials, seed, progress=None, **budget)

    first = measure(run)
    runs = [measure(run) for _ in range(repeats)]
    run_s = statistics.median(r["wall_s"] - r["compile_s"] for r in runs)
    work = num_trials * num_rounds * num_clients
    return {
        "compile_s": first["compile_s"],
        "first_call_s": first["wall_s"],
        "run_s": run_s,
        "run_s_all": [r["wall_s"] - r["compile_s"] for r in runs],
        "recompile_s": sum(r["compile_s"] for r in runs),
        "xla_compilations": first["xla_compilations"],
        "xla_recompilations": sum(r["xla_compilations"] for r in runs),
        "client_rounds_per_s": work / run_s,
        # Compile time is spent on one core: it leaves the CPU time like the wall time.
        "client_rounds_per_cpu_s": work
        / statistics.median(r["cpu_s"] - r["compile_s"] for r in runs),
        "peak_rss_bytes": max(r["peak_rss_bytes"] or 0 for r in [first, *runs]) or None,
        "added_rss_bytes": max(r["added_rss_bytes"] or 0 for r in [first, *runs]) or None,
    }


def bench_numpy(
    policy: str,
    num_clients: int,
    num_trials: int,
    num_rounds: int,
    seed: int = 0,
    min_seconds: float = 0.0,
    tie_break: str = "uniform",
) -> dict[str, Any]:
    """Runs the NumPy reference for `num_trials` trials, or more if they took less than
    `min_seconds`: then again with as many trials as fill `min_seconds` at that pace (a
    run of a few milliseconds measures noise more than the reference). `tie_break` is
    the reference's (`numpy_reference.TIE_BREAKS`)."""
    k = max(1, num_clients // 10)

    def run(trials):
        return measure(
            lambda: numpy_reference.simulate(
                policy, num_clients, k, num_rounds, trials, seed, tie_break
            )
        )

    r = run(num_trials)
    if r["wall_s"] < min_seconds:
        num_trials = math.ceil(num_trials * min_seconds / max(r["wall_s"], 1e-6))
        r = run(num_trials)
    return {
        "trials": num_trials,
        "run_s": r["wall_s"],
        "tie_break": tie_break,
        "client_rounds_per_s": num_trials * num_rounds * num_clients / r["wall_s"],
        "client_rounds_per_cpu_s": num_trials * num_rounds * num_clients / r["cpu_s"],
        "peak_rss_bytes": r["peak_rss_bytes"],
        "added_rss_bytes": r["added_rss_bytes"],
    }


def run_suite(
    policies: list[str],
    num_clients: list[int],
    num_trials: list[int],
    num_rounds: int,
    repeats: int = 2,
    reference_trials: int = 2,
    reference_seconds: float = 0.0,
    max_client_rounds: float = float("inf"),
    memory_budget_bytes: int | None = None,
    seed: int = 0,
    reference_tie_break: str = "uniform",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every cell of the grid; cells over `max_client_rounds` are listed as skipped."""
    for name in policies:
        if name not in numpy_reference.REGISTRY:
            raise ValueError(
                f"policies: {name!r} is not a policy with a NumPy reference on the stationary "
                f"environment; choose from {sorted(numpy_reference.REGISTRY)}."
            )
    if reference_tie_break not in numpy_reference.TIE_BREAKS:
        raise ValueError(
            f"reference_tie_break must be one of {numpy_reference.TIE_BREAKS}, "
            f"got {reference_tie_break!r}."
        )
    cells, skipped = [], []
    for policy in policies:
        for n in num_clients:
            reference = None
            for m in num_trials:
                size = {"policy": policy, "num_clients": n, "num_trials": m}
                if m * num_rounds * n > max_client_rounds:
                    skipped.append(size)
                    continue
                if reference is None:
                    reference = bench_numpy(
                        policy,
                        n,
                        reference_trials,
                        num_rounds,
                        seed,
                        reference_seconds,
                        reference_tie_break,
                    )
                result = bench_jax(policy, n, m, num_rounds, repeats, seed, memory_budget_bytes)
                cell = {
                    **size,
                    "num_selected": max(1, n // 10),
                    "num_rounds": num_rounds,
                    "load_average": os.getloadavg()[0],
                    "jax": result,
                    "numpy": reference,
                    "ratio": result["client_rounds_per_s"] / reference["client_rounds_per_s"],
                    "cpu_ratio": result["client_rounds_per_cpu_s"]
                    / reference["client_rounds_per_cpu_s"],
                }
                cells.append(cell)
                log(_row(cell))
    return {"machine": machine(), "num_rounds": num_rounds, "cells": cells, "skipped": skipped}


HEADER = (
    "| policy | N | trials | JAX client-rounds/s | NumPy client-rounds/s | NumPy ties | ratio | "
    "ratio per CPU-s | compile s | JAX peak RSS MB | NumPy peak RSS MB | load |"
)


def _row(cell: dict[str, Any]) -> str:
    mb = lambda b: f"{b / 2**20:.0f}" if b else "n/a"
    ties = cell["numpy"]["tie_break"] if cell["policy"] in numpy_reference.TIE_BREAKING else "-"
    return (
        f"| {cell['policy']} | {cell['num_clients']} | {cell['num_trials']} | "
        f"{cell['jax']['client_rounds_per_s']:.3g} | "
        f"{cell['numpy']['client_rounds_per_s']:.3g} | {ties} | {cell['ratio']:.2f} | "
        f"{cell['cpu_ratio']:.2f} | "
        f"{cell['jax']['compile_s']:.2f} | {mb(cell['jax']['peak_rss_bytes'])} | "
        f"{mb(cell['numpy']['peak_rss_bytes'])} | {cell['load_average']:.1f} |"
    )


def markdown_table(results: dict[str, Any]) -> str:
    """The cells of `run_suite` as a Markdown table."""
    lines = [HEADER, "|" + "---|" * (HEADER.count("|") - 1)]
    lines += [_row(cell) for cell in results["cells"]]
    return "\n".join(lines)


def _define_flags() -> None:
    """Defines the command-line flags (only when run as a program, so that importing
    this module next to other launch scripts defines no clashing flags)."""
    ints = lambda values: [str(v) for v in values]
    flags.DEFINE_list(
        "policies",
        sorted(numpy_reference.REGISTRY),
        "Policies to measure: those of `bandits` with a NumPy reference (the policies of the "
        "stationary environment; the papers' policies are timed by their reproductions).",
    )
    flags.DEFINE_list("num_clients", ints([100, 1000, 10000]), "Numbers of clients N.")
    flags.DEFINE_list("num_trials", ints([1, 100, 1000, 10000]), "Numbers of trials M.")
    flags.DEFINE_integer("num_rounds", 100, "Rounds T per trial.", lower_bound=1)
    flags.DEFINE_integer("repeats", 2, "Timed runs after the compiling one.", lower_bound=1)
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
        list(numpy_reference.TIE_BREAKS),
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


def main(argv):
    del argv
    fedjax_sel.configure_cpu()
    f = flags.FLAGS
    if f.prng_impl is not None:
        jax.config.update("jax_default_prng_impl", f.prng_impl)
    try:
        ints = lambda values: [int(v) for v in values]
        results = run_suite(
            policies=f.policies,
            num_clients=ints(f.num_clients),
            num_trials=ints(f.num_trials),
            num_rounds=f.num_rounds,
            repeats=f.repeats,
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
    print(markdown_table(results))
    print(f"skipped (over --max_client_rounds): {len(results['skipped'])} cells", file=sys.stderr)


if __name__ == "__main__":
    _define_flags()
    app.run(main)
