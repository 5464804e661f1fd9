"""The benchmark suite runs end to end on tiny sizes; its output is parsed, not timed."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import bandits
import fedjax_sel
from experiments import bench, references, training_benchmark
from experiments.references import xia
from fedjax_sel import envs, runner

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_module(args, **variables):
    """Runs `python -m args...` from the repository root on CPU, with the environment
    `variables` added; fails on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT, "JAX_PLATFORMS": "cpu", **variables},
        capture_output=True,
        text=True,
        check=True,
    )


@pytest.mark.parametrize(
    "spans, covered",
    [
        ([], 0.0),
        ([(0.0, 2.0)], 2.0),
        # Overlapping, nested, touching and apart, in any order.
        ([(5.0, 6.0), (0.0, 2.0), (1.0, 3.0), (5.25, 5.75), (3.0, 3.5)], 4.5),
        ([(0.0, 10.0), (1.0, 2.0), (9.0, 11.0)], 11.0),
    ],
)
def test_compile_seconds_count_overlapping_spans_once(spans, covered):
    assert bench.covered_seconds(spans) == covered


def test_run_suite_cells_and_table():
    results = bench.run_suite(
        policies=["random", "round_robin"],
        num_clients=[10],
        num_trials=[1, 2],
        num_rounds=3,
        repeats=1,
        reference_trials=1,
        max_client_rounds=30,
        log=lambda line: None,
        compiles=2,
    )
    cells = results["cells"]
    # trials=2 gives 2 * 3 * 10 = 60 client-rounds > 30: skipped, and listed as such.
    assert [(c["policy"], c["num_trials"]) for c in cells] == [("random", 1), ("round_robin", 1)]
    assert results["skipped"] == [
        {"policy": "random", "num_clients": 10, "num_trials": 2},
        {"policy": "round_robin", "num_clients": 10, "num_trials": 2},
    ]
    for c in cells:
        assert c["num_selected"] == 1
        jax_rate, numpy_rate = c["jax"]["client_rounds_per_s"], c["numpy"]["client_rounds_per_s"]
        assert jax_rate > 0 and numpy_rate > 0
        assert c["ratio"] == pytest.approx(jax_rate / numpy_rate)
        assert c["jax"]["run_s"] == pytest.approx(3 * 10 / jax_rate)
        # The first call compiles, and its compile time is counted apart; later calls
        # reuse the compiled programs. A second first call, after the programs are
        # dropped, compiles every one again, as many as the first call of the process:
        # the compile time is the median of the two.
        assert c["jax"]["compile_s"] > 0 and c["jax"]["xla_compilations"] >= 1
        assert c["jax"]["xla_recompilations"] == 0
        assert len(c["jax"]["compile_s_all"]) == 2 and min(c["jax"]["compile_s_all"]) > 0
        assert c["jax"]["compile_s"] == pytest.approx(np.mean(c["jax"]["compile_s_all"]))
        first, again = c["jax"]["xla_compilations_all"]
        assert again >= first >= 1 and again >= cells[0]["jax"]["xla_compilations"]
    table = bench.markdown_table(results).splitlines()
    assert table[0] == bench.HEADER and len(table) == 2 + len(cells)
    assert all(line.count("|") == bench.HEADER.count("|") for line in table)
    assert json.loads(json.dumps(results)) == results
    assert results["machine"]["backend"] == "cpu"


def test_reference_runs_more_trials_to_fill_its_time_floor():
    quick = bench.bench_numpy("round_robin", 10, 1, 3)
    assert quick["trials"] == 1
    floor = 50 * quick["run_s"]
    longer = bench.bench_numpy("round_robin", 10, 1, 3, min_seconds=floor)
    # Trials are scaled by floor / (time of one trial): about 50, whatever the noise.
    assert longer["trials"] > 1
    assert longer["client_rounds_per_s"] == longer["trials"] * 3 * 10 / longer["run_s"]


@pytest.mark.parametrize("name", ["nope", "modified_cs_ucb"])
def test_policy_without_reference_is_refused(name):
    # modified_cs_ucb is a policy of `bandits`, but has no NumPy reference.
    with pytest.raises(ValueError, match=f"policies: '{name}' is not a policy with a NumPy"):
        bench.run_suite([name], [10], [1], 2)


@pytest.mark.parametrize(
    "sizes, match",
    [
        ({"num_rounds": 0}, "num_rounds must be"),
        ({"num_rounds": 2, "repeats": 0}, "repeats must be"),
        ({"num_rounds": 2, "reference_trials": 0}, "reference_trials must be"),
    ],
)
def test_paper_policy_sizes_are_checked_before_running(sizes, match):
    with pytest.raises(ValueError, match=match):
        bench.run_suite(["cs_ucb"], [10], [1], **sizes)


def test_paper_registry_follows_the_interface():
    for name, case in references.PAPER.items():
        assert case.setting and case.num_clients >= 1, name
        metrics = case.numpy_trial(np.random.default_rng(0), 2)
        assert metrics and all(isinstance(v, float) for v in metrics.values()), name


def test_command_line(tmp_path):
    # A stationary policy at N = 10 and a paper policy at its paper's N (K = 20): the
    # stationary --num_clients does not apply to it.
    out = tmp_path / "bench.json"
    # A persistent compilation cache chosen in the environment is not used: the compile
    # times are of compiling (every program cached, whatever its compile time, if it were).
    cache = tmp_path / "cache"
    proc = _run_module(
        [
            "launch.bench",
            "--policies=random,cs_ucb_q",
            "--num_clients=10",
            "--num_trials=2",
            "--num_rounds=2",
            "--repeats=1",
            "--compiles=1",
            "--reference_trials=1",
            "--reference_tie_break=position",
            f"--output={out}",
        ],
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
    )
    assert not cache.exists() or not any(cache.iterdir())
    results = json.loads(out.read_text())
    cell, paper = results["cells"]
    assert (cell["policy"], cell["num_clients"], cell["num_trials"]) == ("random", 10, 2)
    assert (paper["policy"], paper["num_clients"], paper["num_trials"]) == ("cs_ucb_q", 20, 2)
    assert paper["setting"] == references.PAPER["cs_ucb_q"].setting
    jax_side, numpy_side = paper["jax"], paper["numpy"]
    assert set(jax_side["metrics"]) == set(numpy_side["metrics"]) == set(xia.METRICS)
    assert jax_side["run_s"] == pytest.approx(2 * 2 * 20 / jax_side["client_rounds_per_s"])
    assert numpy_side["client_rounds_per_s"] == pytest.approx(
        numpy_side["trials"] * 2 * 20 / numpy_side["run_s"]
    )
    assert paper["ratio"] == pytest.approx(
        jax_side["client_rounds_per_s"] / numpy_side["client_rounds_per_s"]
    )
    assert jax_side["compile_s"] > 0 and jax_side["xla_recompilations"] == 0
    # Two rounds of 5 of 20 clients: the bottleneck reward is at most 2 on both sides.
    assert 0 < jax_side["metrics"]["cumulative_reward"] <= 2
    assert 0 < numpy_side["metrics"]["cumulative_reward"] <= 2
    assert bench.METRICS_HEADER in proc.stdout and "does not apply" in bench.METRICS_HEADER
    assert [line for line in proc.stdout.splitlines() if line.startswith("| cs_ucb_q | 2 |")]
    assert cell["numpy"]["tie_break"] == "position"
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| random |")]
    assert len(rows) == 2  # logged as it runs, then in the final table
    assert rows[-1].split("|")[2].strip() == "10"
    assert rows[-1].split("|")[6].strip() == "-"  # random has no ties to break


def test_reference_tie_break_is_checked_and_recorded():
    with pytest.raises(ValueError, match="reference_tie_break must be one of"):
        bench.run_suite(["ucb"], [10], [1], 2, reference_tie_break="lowest")
    results = bench.run_suite(
        ["ucb"], [10], [1], 2, repeats=1, reference_tie_break="position", log=lambda line: None
    )
    (cell,) = results["cells"]
    assert cell["numpy"]["tie_break"] == "position"
    assert bench.markdown_table(results).splitlines()[2].split("|")[6].strip() == "position"


def test_memory_run_command_line(tmp_path):
    # A budget that fits 2 trials but not 4 runs 5 trials in chunks of 2, with the
    # numbers of an unchunked run of the same seed.
    env, policies = envs.bernoulli(20, 2), {"ucb": bandits.make("ucb", 20, 2)}
    assert runner.trials_per_chunk_for_budget(policies, env, 4, 5, 10**9) == 8
    # What the run keeps whatever the chunking is about a kilobyte here (1,048 bytes).
    budget = 3 * runner.trial_memory_bytes(env, policies["ucb"]) + 2048
    assert runner.trials_per_chunk_for_budget(policies, env, 4, 5, budget) == 2
    out = tmp_path / "memory.json"
    _run_module(
        [
            "launch.memory_run",
            "--num_clients=20",
            "--num_trials=5",
            "--num_rounds=4",
            "--rounds_per_chunk=2",
            f"--memory_budget_bytes={budget}",
            f"--checkpoint_dir={tmp_path / 'ckpt'}",
            f"--output={out}",
        ]
    )
    report = json.loads(out.read_text())
    assert report["trials_per_chunk"] == 2
    assert report["peak_rss_bytes"] > 0 and report["wall_s"] > 0
    whole = fedjax_sel.simulate(policies, env, num_rounds=4, num_trials=5, seed=0)
    assert report["final_regret_mean"] == whole.final("ucb")[0]


def test_training_benchmark_command_line(tmp_path):
    # Tiny defaults: 2 trials, 2 of 8 clients, 16 examples, an 8-128-10 MLP.
    out = tmp_path / "training.json"
    proc = _run_module(["launch.bench_training", "--num_rounds=2", f"--output={out}"])
    numbers = json.loads(out.read_text())
    assert json.loads(proc.stdout) == numbers
    for side in ("vectorized", "mapped", "sequential"):
        assert numbers[f"{side}_rounds_per_s"] > 0
    assert numbers["speedup_vectorized"] == pytest.approx(
        numbers["vectorized_rounds_per_s"] / numbers["sequential_rounds_per_s"]
    )
    # The three sides train the same clients from the same models with the same keys:
    # they end with the same parameters up to float32 rounding.
    assert numbers["max_abs_param_difference"] < 1e-5


def test_roofline_counts_by_hand():
    # An 8-128-10 MLP, batch 8, 16 examples (2 local steps), 2 trials x 2 slots.
    numbers = training_benchmark.roofline(2, 2, 16, 8, "mlp_128", 8, stream_mib=8, dot_size=128)
    params = 8 * 128 + 128 + 128 * 10 + 10
    assert numbers["param_bytes"] == 4 * params and numbers["local_steps"] == 2
    # Forward and weight gradients of both layers, the input gradient of the second.
    assert numbers["step_flops"] == 2 * 8 * (2 * 8 * 128 + 3 * 128 * 10)
    assert numbers["round_gflop"] == pytest.approx(4 * 2 * numbers["step_flops"] / 1e9)
    # XLA's count adds the elementwise work (activations, softmax, bias gradients, update).
    assert 1.0 < numbers["xla_step_flops"] / numbers["step_flops"] < 1.2
    minibatch = 8 * (8 * 4 + 4)
    assert numbers["vectorized_round_gb"] == pytest.approx(
        4 * 2 * (5 * 4 * params + minibatch) / 1e9
    )
    assert numbers["per_client_round_gb"] == pytest.approx(4 * 2 * minibatch / 1e9)
    bound = max(numbers["vectorized_compute_bound_s"], numbers["vectorized_memory_bound_s"])
    assert numbers["vectorized_max_rounds_per_s"] == pytest.approx(1 / bound)
    for key in ("dot_gflops", "batched_dot_gflops", "cached_dot_gflops", "stream_gbps"):
        assert numbers[key] > 0
