"""Benchmarks of the simulator: bandit throughput against the NumPy references, timing.

The logic of `launch/bench.py`, `launch/memory_run.py` and `launch/xia_speed.py` (see
their docstrings), importable without flags. `measure` times a call (wall, CPU and
compile seconds, from JAX's own compile events: the wall time covered by their spans)
and its peak resident memory;
`run_suite` measures every (policy, N, M) cell of a grid against the policy's NumPy
reference (`experiments.references`): the stationary policies at every N of the grid,
the papers' policies (`references.PAPER`) at their papers' N.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

import bandits
import fedjax_sel
from experiments import references
from experiments.references import beyond, qu, stationary, xia
from fedjax_sel import envs, runner, validation
from fedjax_sel.envs import wireless_latency
from fedjax_sel.envs.wireless_latency import PRESETS

_COMPILE_EVENTS = "/jax/core/compile/"
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
# The (start, end) wall times of JAX's tracing, lowering and compiling, each span ending
# as its event is reported, and the number of XLA compilations.
_compile_spans: list[tuple[float, float]] = []
_backend_compiles = [0]


def _on_duration(event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event.startswith(_COMPILE_EVENTS):
        end = time.perf_counter()
        _compile_spans.append((end - duration, end))
    if event == _BACKEND_COMPILE:
        _backend_compiles[0] += 1


def covered_seconds(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the (start, end) `spans`: the wall time during which
    at least one was under way. The runner compiles a policy's programs on threads of
    their own (`runner.programs.compile_programs`), so their spans overlap, and their
    sum would count the overlap twice."""
    covered, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        covered += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return covered


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


def configure() -> None:
    """The benchmark scripts' process: `fedjax_sel.configure_cpu()`, and JAX's persistent
    compilation cache off, so that the compile seconds of `measure` are of compiling,
    not of loading a program compiled by an earlier run (`JAX_COMPILATION_CACHE_DIR`,
    the launch scripts' cache: launch/compilation_cache.py). Call it before anything
    compiles."""
    fedjax_sel.configure_cpu()
    jax.config.update("jax_enable_compilation_cache", False)


def measure(fn: Callable[[], Any]) -> dict[str, float | None]:
    """Runs `fn` once: wall, CPU (all threads) and compile seconds, peak and added RSS."""
    _reset_peak()
    before = _status_kb("VmRSS")
    spans, compiles = len(_compile_spans), _backend_compiles[0]
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = _status_kb("VmHWM")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "compile_s": covered_seconds(_compile_spans[spans:]),
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
    compiles: int = 1,
) -> dict[str, Any]:
    """Compiles and runs `simulate` `compiles` times (`time_jax`), then `repeats` more
    times; median compile and run times."""
    k = max(1, num_clients // 10)
    env = envs.bernoulli(num_clients, k)
    selector = bandits.make(policy, num_clients, k)

    budget = {} if memory_budget_bytes is None else {"memory_budget_bytes": memory_budget_bytes}

    def run():
        fedjax_sel.simulate(selector, env, num_rounds, num_trials, seed, progress=None, **budget)

    return time_jax(run, num_trials * num_rounds * num_clients, repeats, compiles)


def forget_programs() -> None:
    """Drops every trace and compiled program of this process (JAX's caches, the runner's
    programs and memory estimates), so that the next call compiles as a first call does."""
    jax.clear_caches()
    runner.programs.build_programs.cache_clear()
    runner.chunking.trial_memory_bytes.cache_clear()


def time_jax(run: Callable[[], Any], work: float, repeats: int, compiles: int = 1) -> dict:
    """`jax_timing` of `compiles` first calls of `run` (the first, then each after
    `forget_programs`) and of `repeats` later calls. One compilation's time moves by a
    second or more from call to call on the 2-core machine of docs/benchmarks.md (Oort's
    6.2 to 8.7 s): the median of several is the figure reported."""
    firsts = [measure(run)]
    for _ in range(compiles - 1):
        forget_programs()
        firsts.append(measure(run))
    return jax_timing(firsts, [measure(run) for _ in range(repeats)], work)


def jax_timing(firsts: list[dict], runs: list[dict], work: float) -> dict[str, Any]:
    """The numbers of a jitted run from `measure`s of its first (compiling) calls and of
    later calls: compile time the median of the first calls', run time the median of the
    later calls without compilation, throughput `work` (client-rounds) per second,
    compilations, peak memory."""
    first = firsts[0]
    run_s = statistics.median(r["wall_s"] - r["compile_s"] for r in runs)
    return {
        "compile_s": statistics.median(r["compile_s"] for r in firsts),
        "compile_s_all": [r["compile_s"] for r in firsts],
        "first_call_s": first["wall_s"],
        "run_s": run_s,
        "run_s_all": [r["wall_s"] - r["compile_s"] for r in runs],
        "recompile_s": sum(r["compile_s"] for r in runs),
        "xla_compilations": first["xla_compilations"],
        "xla_compilations_all": [r["xla_compilations"] for r in firsts],
        "xla_recompilations": sum(r["xla_compilations"] for r in runs),
        "client_rounds_per_s": work / run_s,
        # Compile time is spent on one core: it leaves the CPU time like the wall time.
        "client_rounds_per_cpu_s": work
        / statistics.median(r["cpu_s"] - r["compile_s"] for r in runs),
        "peak_rss_bytes": max(r["peak_rss_bytes"] or 0 for r in [*firsts, *runs]) or None,
        "added_rss_bytes": max(r["added_rss_bytes"] or 0 for r in [*firsts, *runs]) or None,
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
    the reference's (`stationary.TIE_BREAKS`)."""
    k = max(1, num_clients // 10)

    def run(trials):
        return measure(
            lambda: stationary.simulate(policy, num_clients, k, num_rounds, trials, seed, tie_break)
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


def bench_paper_jax(
    case: references.Case,
    num_trials: int,
    num_rounds: int,
    repeats: int,
    seed: int = 0,
    compiles: int = 1,
) -> dict[str, Any]:
    """A paper policy's jitted run (`case.jax_run`): built once, called `compiles` times to
    compile (`time_jax`), then `repeats` more times; median compile and run times, and
    the mean metrics of the last call."""
    call = case.jax_run(num_trials, num_rounds, seed)
    out = {}

    def run():
        out["metrics"] = call()

    timing = time_jax(run, num_trials * num_rounds * case.num_clients, repeats, compiles)
    return {**timing, "metrics": out["metrics"]}


def bench_paper_numpy(
    case: references.Case,
    num_trials: int,
    num_rounds: int,
    seed: int = 0,
    min_seconds: float = 0.0,
) -> dict[str, Any]:
    """A paper policy's NumPy reference (`case.numpy_trial`) for `num_trials` trials one
    after another, or as many as fill `min_seconds` when those take less (as `bench_numpy`);
    the mean of each metric over the trials of the last run."""

    def run(trials):
        rng = np.random.default_rng(seed)
        runs = []
        timed = measure(
            lambda: runs.extend(case.numpy_trial(rng, num_rounds) for _ in range(trials))
        )
        return timed, runs

    r, runs = run(num_trials)
    if r["wall_s"] < min_seconds:
        num_trials = math.ceil(num_trials * min_seconds / max(r["wall_s"], 1e-6))
        r, runs = run(num_trials)
    work = num_trials * num_rounds * case.num_clients
    return {
        "trials": num_trials,
        "run_s": r["wall_s"],
        "tie_break": "-",
        "client_rounds_per_s": work / r["wall_s"],
        "client_rounds_per_cpu_s": work / r["cpu_s"],
        "peak_rss_bytes": r["peak_rss_bytes"],
        "added_rss_bytes": r["added_rss_bytes"],
        "metrics": {name: float(np.mean([t[name] for t in runs])) for name in runs[0]},
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
    compiles: int = 1,
) -> dict[str, Any]:
    """Every cell of the grid; cells over `max_client_rounds` are listed as skipped. Each
    cell compiles `compiles` times (`time_jax`)."""
    for name in policies:
        if name not in stationary.REGISTRY and name not in references.PAPER:
            raise ValueError(
                f"policies: {name!r} is not a policy with a NumPy reference; choose from "
                f"{sorted(stationary.REGISTRY)} (the stationary environment, at every N of "
                f"num_clients) or {sorted(references.PAPER)} (their papers' settings)."
            )
    if reference_tie_break not in stationary.TIE_BREAKS:
        raise ValueError(
            f"reference_tie_break must be one of {stationary.TIE_BREAKS}, "
            f"got {reference_tie_break!r}."
        )
    num_rounds = validation.positive_int("num_rounds", num_rounds)
    repeats = validation.positive_int("repeats", repeats)
    reference_trials = validation.positive_int("reference_trials", reference_trials)
    compiles = validation.positive_int("compiles", compiles)
    cells, skipped = [], []
    for policy in policies:
        if policy in references.PAPER:
            case = references.PAPER[policy]
            numpy_cell = None
            for m in num_trials:
                size = {"policy": policy, "num_clients": case.num_clients, "num_trials": m}
                if m * num_rounds * case.num_clients > max_client_rounds:
                    skipped.append(size)
                    continue
                if numpy_cell is None:
                    numpy_cell = bench_paper_numpy(
                        case, reference_trials, num_rounds, seed, reference_seconds
                    )
                result = bench_paper_jax(case, m, num_rounds, repeats, seed, compiles)
                cell = {**size, "setting": case.setting, "num_rounds": num_rounds}
                cells.append(_cell(cell, result, numpy_cell))
                log(_row(cells[-1]))
                log(_metrics_row(cells[-1]))
            continue
        for n in num_clients:
            numpy_cell = None
            for m in num_trials:
                size = {"policy": policy, "num_clients": n, "num_trials": m}
                if m * num_rounds * n > max_client_rounds:
                    skipped.append(size)
                    continue
                if numpy_cell is None:
                    numpy_cell = bench_numpy(
                        policy,
                        n,
                        reference_trials,
                        num_rounds,
                        seed,
                        reference_seconds,
                        reference_tie_break,
                    )
                result = bench_jax(
                    policy, n, m, num_rounds, repeats, seed, memory_budget_bytes, compiles
                )
                cell = {**size, "num_selected": max(1, n // 10), "num_rounds": num_rounds}
                cells.append(_cell(cell, result, numpy_cell))
                log(_row(cells[-1]))
    return {"machine": machine(), "num_rounds": num_rounds, "cells": cells, "skipped": skipped}


def _cell(cell: dict[str, Any], jax_side: dict[str, Any], numpy_side: dict[str, Any]) -> dict:
    """A cell of `run_suite`: its sizes, both sides' numbers, their ratios, the load."""
    return {
        **cell,
        "load_average": os.getloadavg()[0],
        "jax": jax_side,
        "numpy": numpy_side,
        "ratio": jax_side["client_rounds_per_s"] / numpy_side["client_rounds_per_s"],
        "cpu_ratio": jax_side["client_rounds_per_cpu_s"] / numpy_side["client_rounds_per_cpu_s"],
    }


HEADER = (
    "| policy | N | trials | JAX client-rounds/s | NumPy client-rounds/s | NumPy ties | ratio | "
    "ratio per CPU-s | compile s | JAX peak RSS MB | NumPy peak RSS MB | load |"
)


def _row(cell: dict[str, Any]) -> str:
    mb = lambda b: f"{b / 2**20:.0f}" if b else "n/a"
    ties = cell["numpy"]["tie_break"] if cell["policy"] in stationary.TIE_BREAKING else "-"
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


METRICS_HEADER = (
    "| policy | trials | setting (N is the paper's: --num_clients does not apply) | "
    "metric: JAX mean / NumPy mean |"
)


def _metrics_row(cell: dict[str, Any]) -> str:
    jax_means, numpy_means = cell["jax"]["metrics"], cell["numpy"]["metrics"]
    pairs = ", ".join(f"{k}: {jax_means[k]:.4g} / {numpy_means[k]:.4g}" for k in jax_means)
    return f"| {cell['policy']} | {cell['num_trials']} | {cell['setting']} | {pairs} |"


def metrics_table(results: dict[str, Any]) -> str:
    """The paper cells of `run_suite` (those with a `setting`): the mean metrics of the jitted
    run and of the reference, side by side, as a Markdown table; empty without such cells."""
    rows = [_metrics_row(cell) for cell in results["cells"] if "setting" in cell]
    if not rows:
        return ""
    return "\n".join([METRICS_HEADER, "|" + "---|" * (METRICS_HEADER.count("|") - 1), *rows])


def memory_run(
    policy: str,
    num_clients: int,
    num_trials: int,
    num_rounds: int,
    memory_budget_bytes: int,
    rounds_per_chunk: int,
    checkpoint_dir: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """One `simulate` of `policy` on the Bernoulli environment (cohort 10% of N) under a
    memory budget: the trial chunk it chose, its peak memory, wall and CPU seconds."""
    k = num_clients // 10
    env = envs.bernoulli(num_clients, k)
    policies = {policy: bandits.make(policy, num_clients, k)}
    out = {}

    def run():
        out["results"] = fedjax_sel.simulate(
            policies,
            env,
            num_rounds=num_rounds,
            num_trials=num_trials,
            seed=seed,
            rounds_per_chunk=min(rounds_per_chunk, num_rounds),
            checkpoint_dir=checkpoint_dir,
            memory_budget_bytes=memory_budget_bytes,
        )

    measured = measure(run)
    results = out["results"]
    return {
        "policy": policy,
        "num_clients": num_clients,
        "num_selected": k,
        "num_trials": num_trials,
        "num_rounds": num_rounds,
        "memory_budget_bytes": memory_budget_bytes,
        "trials_per_chunk": results.config["trials_per_chunk"],
        "final_regret_mean": results.final(policy)[0],
        "load_average": os.getloadavg()[0],
        "machine": machine(),
        **measured,
    }


def xia_speed(
    num_trials: int,
    num_rounds: int,
    preset: str = "literal",
    trials_per_chunk: int | None = None,
    numpy_trials: int = 1,
) -> dict[str, Any]:
    """CS-UCB on Xia et al.'s latency model (Fig. 1: K = 20, N = 5), jitted against NumPy.

    The jitted run's wall time includes compilation; the NumPy reference
    (`references.xia.numpy_cs_ucb_trial`) runs `numpy_trials` trials, extrapolated to
    `num_trials`.
    """
    k, n = xia.XIA_CLIENTS, xia.XIA_SELECTED
    env = wireless_latency(k, n, preset=preset)
    start = time.perf_counter()
    res = fedjax_sel.simulate(
        bandits.cs_ucb(k, n),
        env,
        num_rounds,
        num_trials,
        trials_per_chunk=trials_per_chunk,
        progress=None,
    )
    jax_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    numpy_latency = [
        xia.numpy_cs_ucb_trial(rng, num_rounds, PRESETS[preset])["cumulative_latency"]
        for _ in range(numpy_trials)
    ]
    numpy_s = time.perf_counter() - start
    per_trial = numpy_s / numpy_trials
    return {
        "num_trials": num_trials,
        "num_rounds": num_rounds,
        "jax_wall_s_including_compile": jax_s,
        "numpy_trials_timed": numpy_trials,
        "numpy_s_per_trial": per_trial,
        "numpy_extrapolated_s": per_trial * num_trials,
        "speedup": per_trial * num_trials / jax_s,
        "jax_mean_latency_s": res.final("policy", "cumulative_latency")[0],
        "numpy_mean_latency_s": float(np.mean(numpy_latency)),
    }


def qu_speed(
    num_trials: int,
    num_rounds: int,
    numpy_trials: int = 1,
    trials_per_chunk: int | None = None,
) -> dict[str, Any]:
    """COCS on Qu et al.'s MNIST network (Fig. 3: N = 50, M = 3), jitted against NumPy.

    The jitted program runs twice: the first call's wall time includes compilation, the
    second reuses the program. The NumPy reference (`references.qu.numpy_cocs_trial`) runs
    `numpy_trials` trials, extrapolated to `num_trials`. Both compute the figure's two
    curves: the utility and the pseudo-regret (the oracle's knapsack on p every round).
    """
    n = qu.NUM_CLIENTS_COCS
    env, selector = envs.hierarchical(n), bandits.cocs(n)

    def run():
        return fedjax_sel.simulate(
            selector, env, num_rounds, num_trials,
            trials_per_chunk=trials_per_chunk, progress=None,
        )  # fmt: skip

    first = measure(run)
    start = time.perf_counter()
    res = run()
    jax_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    numpy_runs = [qu.numpy_cocs_trial(rng, num_rounds) for _ in range(numpy_trials)]
    per_trial = (time.perf_counter() - start) / numpy_trials
    numpy_utility, numpy_regret = np.mean(numpy_runs, axis=0)
    return {
        "num_trials": num_trials,
        "num_rounds": num_rounds,
        "jax_wall_s_first_call": first["wall_s"],
        "jax_compile_s": first["compile_s"],
        "jax_wall_s": jax_s,
        "numpy_trials_timed": numpy_trials,
        "numpy_s_per_trial": per_trial,
        "numpy_extrapolated_s": per_trial * num_trials,
        "speedup": per_trial * num_trials / jax_s,
        "speedup_including_compile": per_trial * num_trials / first["wall_s"],
        "jax_mean_utility": res.final("policy", "cumulative_reward")[0],
        "jax_mean_regret": res.final("policy", "cumulative_regret")[0],
        "numpy_mean_utility": float(numpy_utility),
        "numpy_mean_regret": float(numpy_regret),
        "load_average": os.getloadavg()[0],
    }


def beyond_speed(
    policy: str,
    num_clients: int,
    num_trials: int,
    num_rounds: int,
    numpy_trials: int = 1,
    trials_per_chunk: int | None = None,
    num_kept: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    """Oort or pow-d on `envs.devices` (K = `num_kept` kept of m = int(1.3 K) selected),
    jitted against the NumPy references of `experiments.references.beyond`.

    The NumPy reference runs first (`numpy_trials` trials, one at a time), then the jitted
    program twice: the first call compiles, the second's time is the run time. Throughput
    is client-rounds per second, trials x rounds x N / seconds; the ratio compares the two
    at their own trial counts (the reference's time is linear in its trials).
    """
    policy = validation.choice("policy", policy, beyond.POLICIES)
    n = validation.positive_int("num_clients", num_clients)
    k = validation.int_in_range("num_kept", num_kept, 1, n)
    m = int(1.3 * k)
    if m > n:
        raise ValueError(f"num_kept: int(1.3 K) = {m} clients selected exceed N = {n}.")
    env = envs.make("devices", n, m, num_kept=k)
    selector = bandits.make(policy, n, m)
    load_before = os.getloadavg()[0]

    rng = np.random.default_rng(seed)
    numpy_runs = []
    numpy = measure(
        lambda: numpy_runs.extend(
            beyond.trial(rng, policy, n, m, k, num_rounds) for _ in range(numpy_trials)
        )
    )
    out = {}

    def run():
        out["res"] = fedjax_sel.simulate(
            selector, env, num_rounds, num_trials, seed,
            trials_per_chunk=trials_per_chunk, progress=None,
        )  # fmt: skip

    jax_work = num_trials * num_rounds * n
    timing = time_jax(run, jax_work, repeats=1)
    res = out["res"]
    numpy_work = numpy_trials * num_rounds * n
    numpy_at_m = numpy["wall_s"] / numpy_trials * num_trials
    numpy_rate = numpy_work / numpy["wall_s"]
    loss = res.curves["policy"]["loss"]
    return {
        "policy": policy,
        "num_clients": n,
        "num_selected": m,
        "num_kept": k,
        "num_trials": num_trials,
        "num_rounds": num_rounds,
        "trials_per_chunk": res.config["trials_per_chunk"],
        "jax": {
            **timing,
            "mean_final_loss": float(loss["mean"][-1]),
            "mean_cumulative_latency_s": res.final("policy", "cumulative_latency")[0],
        },
        "numpy": {
            "trials": numpy_trials,
            "run_s": numpy["wall_s"],
            "s_per_trial": numpy["wall_s"] / numpy_trials,
            "client_rounds_per_s": numpy_rate,
            "client_rounds_per_cpu_s": numpy_work / numpy["cpu_s"],
            "peak_rss_bytes": numpy["peak_rss_bytes"],
            "added_rss_bytes": numpy["added_rss_bytes"],
            "mean_final_loss": float(np.mean([losses[-1] for losses, _ in numpy_runs])),
            "mean_cumulative_latency_s": float(np.mean([clock for _, clock in numpy_runs])),
        },
        "ratio": timing["client_rounds_per_s"] / numpy_rate,
        # The reference's time extrapolated to num_trials over the first call's, compile included.
        "ratio_including_compile": numpy_at_m / timing["first_call_s"],
        "load_average": [load_before, os.getloadavg()[0]],
        "machine": machine(),
    }
