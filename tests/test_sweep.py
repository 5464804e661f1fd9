"""`python -m launch.sweep`: outputs written, table printed, bad flags are usage errors."""

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import fedjax_sel
from launch import compilation_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _sweep(*flags, cwd=ROOT, **variables):
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu", **variables)
    return subprocess.run(
        [sys.executable, "-m", "launch.sweep", *flags],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_sweep_writes_results_figure_and_table(tmp_path):
    out = _sweep(
        "--policies=ucb,random,oracle",
        "--num_clients=12",
        "--num_selected=3",
        "--num_rounds=60",
        "--num_trials=8",
        "--availability=0.9",
        f"--output_dir={tmp_path}",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("policy"))
    rows = {line.split()[0]: line for line in lines[header + 2 : header + 5]}
    assert set(rows) == {"ucb", "random", "oracle"}
    assert rows["oracle"].split()[1] == "0"  # zero regret, printed as "0 +- 0"
    assert "%" in out.stderr  # progress lines
    assert os.path.getsize(tmp_path / "regret.png") > 1000
    assert not (tmp_path / "checkpoint").exists()  # removed once results are written
    res = fedjax_sel.Results.load(str(tmp_path / "results"))
    assert res.policies == ["ucb", "random", "oracle"]
    assert res.config["num_rounds"] == 60 and res.config["config"]["availability"] == 0.9
    mean, _ = res.final("random")
    assert mean > res.final("ucb")[0] > 0
    meta = json.loads((tmp_path / "results.json").read_text())
    assert "jax" in meta["versions"]
    assert np.isfinite(res.curves["ucb"]["cumulative_regret"]["mean"]).all()
    # The tables hold the numbers of the .npz, exactly.
    curves = pd.read_csv(tmp_path / "results.csv")
    rows = curves[(curves.policy == "random") & (curves.metric == "cumulative_regret")]
    np.testing.assert_array_equal(rows["mean"], res.curves["random"]["cumulative_regret"]["mean"])
    assert rows["round"].tolist() == list(range(1, 61))
    totals = pd.read_csv(tmp_path / "results_totals.csv")
    np.testing.assert_array_equal(
        totals[totals.policy == "ucb"]["cumulative_regret"], res.totals["ucb"]["cumulative_regret"]
    )

    # A sweep of another configuration into the same directory is refused before it runs,
    # and the results already there are kept.
    before = {name: (tmp_path / name).read_bytes() for name in ("results.npz", "results.csv")}
    out = _sweep(
        "--policies=ucb,random,oracle",
        "--num_clients=12",
        "--num_selected=3",
        "--num_rounds=61",
        "--num_trials=8",
        "--availability=0.9",
        f"--output_dir={tmp_path}",
    )
    assert out.returncode != 0
    assert "holds the results of another configuration (they differ in num_rounds)" in out.stderr
    assert {name: (tmp_path / name).read_bytes() for name in before} == before


@pytest.mark.parametrize(
    "flag, message",
    [
        ("--policies=ucb,nope", "unknown policy 'nope'"),
        ("--env=nope", "unknown environment 'nope'"),
        ("--num_selected=50", "num_selected must be an integer in [1, 12], got 50"),
        ("--num_trials=0", "num_trials must be an integer >= 1, got 0"),
        ("--availability=1.5", "availability must have every entry in [0.0, 1.0]"),
    ],
)
def test_sweep_bad_flags_are_usage_errors(tmp_path, flag, message):
    out = _sweep("--num_clients=12", "--num_rounds=5", flag, f"--output_dir={tmp_path}")
    assert out.returncode != 0
    assert message in out.stderr, out.stderr[-2000:]


def test_a_second_sweep_loads_its_programs_from_the_compilation_cache(tmp_path):
    # Every program cached, whatever its compile time (JAX's default skips those under 1 s).
    cache = tmp_path / "cache"
    flags = ["--policies=ucb,random", "--num_clients=12", "--num_selected=3"]
    flags += ["--num_rounds=20", "--num_trials=4", f"--compilation_cache_dir={cache}"]
    every = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    first, second = (
        _sweep(*flags, f"--output_dir={tmp_path / run}", **every) for run in ("first", "second")
    )
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-3000:]
    written = len(list(cache.glob("*-cache")))
    assert written >= 2  # the rounds of both policies at least

    def loaded_and_compiled(out):
        line = next(line for line in out.stdout.splitlines() if line.startswith("compilation"))
        assert line.startswith(f"compilation cache {cache}: ")
        words = line.split(": ")[1].split()
        return int(words[0]), int(words[3])

    # The first run compiles every program it has not compiled earlier in the run (those
    # it loads); the second loads every program, compiles none and writes nothing anew.
    (loaded, compiled), (reloaded, recompiled) = map(loaded_and_compiled, (first, second))
    assert compiled == written and reloaded == loaded + compiled and recompiled == 0
    assert len(list(cache.glob("*-cache"))) == written
    # The same executables: the same numbers.
    one, two = (np.load(tmp_path / run / "results.npz") for run in ("first", "second"))
    assert one.files == two.files
    for name in one.files:
        np.testing.assert_array_equal(one[name], two[name], err_msg=name)


def test_compilation_cache_directory():
    home = os.path.expanduser("~")
    assert compilation_cache.directory("/c", {}) == "/c"
    assert compilation_cache.directory("", {"JAX_COMPILATION_CACHE_DIR": "/j"}) is None
    assert compilation_cache.directory("~/c", {}) == os.path.join(home, "c")
    # By default JAX's own variable wins where it is set ('' there turns the cache off),
    # else the user's cache directory.
    assert compilation_cache.directory(None, {"JAX_COMPILATION_CACHE_DIR": "/j"}) == "/j"
    assert compilation_cache.directory(None, {"JAX_COMPILATION_CACHE_DIR": ""}) is None
    assert compilation_cache.directory(None, {"XDG_CACHE_HOME": "/x"}) == "/x/fedjax_sel/jax"
    assert compilation_cache.directory(None, {"XDG_CACHE_HOME": ""}) == os.path.join(
        home, ".cache", "fedjax_sel", "jax"
    )
    assert compilation_cache.directory(None, {}) == os.path.join(
        home, ".cache", "fedjax_sel", "jax"
    )


@pytest.mark.parametrize("caller", [None, "2"])
def test_enable_sets_the_directory_and_the_least_compile_time(monkeypatch, caller):
    # JAX's options as `enable` sets them, recorded instead of set in this process.
    updates = {}
    monkeypatch.setattr(compilation_cache.jax.config, "update", updates.__setitem__)
    variable = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
    if caller is None:
        monkeypatch.delenv(variable, raising=False)
    else:
        monkeypatch.setenv(variable, caller)  # the caller's, which JAX has read already
    assert compilation_cache.enable("/c") == "/c"
    expected = {"jax_compilation_cache_dir": "/c"}
    if caller is None:
        expected["jax_persistent_cache_min_compile_time_secs"] = (
            compilation_cache.MIN_COMPILE_SECONDS
        )
    assert updates == expected
    updates.clear()
    assert compilation_cache.enable("") is None
    assert updates["jax_compilation_cache_dir"] is None
