"""`simulate` across the processes of a `jax.distributed` job: two local CPU processes
with two devices each (`tests/multiprocess_worker.py`), against one process."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, runner
from fedjax_sel.runner import checkpoints, processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "tests", "multiprocess_worker.py")

# 13 trials in chunks of 4 over 2 x 2 devices: four chunks, the last one padded.
RUN = {
    "num_clients": 12,
    "num_selected": 3,
    "policies": ["ucb", "thompson", "random"],
    "num_rounds": 30,
    "num_trials": 13,
    "seed": 7,
    "trials_per_chunk": 4,
    "rounds_per_chunk": 10,
}


@pytest.fixture(scope="module", autouse=True)
def _shared_compilation_cache(tmp_path_factory):
    """The workers' programs in a persistent compilation cache of this module's runs: a
    later run of the same programs (a resumed run, the next test's) loads the executables
    process 0 stored (JAX's rule) in place of compiling them again; the results are the
    same bit for bit, and the tests compare them with one process's run."""
    cache = tmp_path_factory.mktemp("compilation_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JAX_COMPILATION_CACHE_DIR", str(cache))
        patch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(tmp_path, name, run=None, kill=None, overrides=None, checkpoint=False):
    """Starts the two processes of a run; returns them and the output directory."""
    output = tmp_path / name
    output.mkdir()
    run = dict(run or RUN)
    if checkpoint:
        run["checkpoint_dir"] = str(tmp_path / "checkpoint")
    spec = {"port": _free_port(), "run": run, "output": str(output), "kill": kill}
    spec["overrides"] = overrides or {}
    path = output / "spec.json"
    path.write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": ROOT}
    workers = [
        subprocess.Popen(
            [sys.executable, WORKER, str(path), str(p)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(output / f"process{p}.log", "w"),
        )
        for p in range(2)
    ]
    return workers, output


def _wait(workers, output, timeout=300):
    deadline = time.monotonic() + timeout
    codes = []
    for w in workers:
        try:
            codes.append(w.wait(max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for v in workers:
                v.kill()
            logs = [(output / f"process{p}.log").read_text()[-3000:] for p in range(2)]
            pytest.fail(f"the two-process run did not finish: {logs}")
    return codes


def _run(tmp_path, name, **kwargs):
    workers, output = _launch(tmp_path, name, **kwargs)
    codes = _wait(workers, output)
    return codes, output


def _killed(tmp_path, name, kill, run=None):
    """Runs until process `kill["process"]` stops as a kill would, then kills the other
    (which waits for it at the next exchange)."""
    workers, output = _launch(tmp_path, name, run=run, kill=kill, checkpoint=True)
    victim, other = workers[kill["process"]], workers[1 - kill["process"]]
    assert victim.wait(300) == 17, (output / f"process{kill['process']}.log").read_text()[-3000:]
    time.sleep(0.5)
    other.send_signal(signal.SIGKILL)
    other.wait(60)


@pytest.fixture(scope="module")
def one_process():
    """The run in this process, compiled as the workers compile it: at XLA's default
    level (conftest's `optimized`), since the workers' XLA_FLAGS set none."""
    n, k = RUN["num_clients"], RUN["num_selected"]
    run = {key: v for key, v in RUN.items() if key not in ("num_clients", "num_selected")}
    policies = {name: bandits.make(name, n, k) for name in run.pop("policies")}
    env = envs.bernoulli(n, k, availability=0.8)
    options = {**runner.COMPILER_OPTIONS.get("cpu", {}), "xla_backend_optimization_level": 3}
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(runner.COMPILER_OPTIONS, "cpu", options)
        return fedjax_sel.simulate(policies, env, progress=None, **run)


def _assert_bit_identical(results, reference):
    assert results.policies == reference.policies
    for policy in reference.policies:
        for metric, curve in reference.curves[policy].items():
            for stat in ("mean", "std"):
                np.testing.assert_array_equal(results.curves[policy][metric][stat], curve[stat])
        for total, x in reference.totals[policy].items():
            np.testing.assert_array_equal(results.totals[policy][total], x)
        np.testing.assert_array_equal(
            results.selection_fraction[policy], reference.selection_fraction[policy]
        )


def test_two_processes_equal_one_bit_for_bit(tmp_path, one_process):
    codes, output = _run(tmp_path, "run")
    assert codes == [0, 0]
    for p in range(2):
        results = fedjax_sel.Results.load(str(output / f"process{p}"))
        _assert_bit_identical(results, one_process)
        assert results.config["trials_per_chunk"] == RUN["trials_per_chunk"]


@pytest.mark.parametrize(
    "kill, stands",
    [
        # Inside a chunk: the processes resume in one chunk, at other rounds.
        ({"process": 1, "at": "progress", "after": 5}, [(1, False), (1, False)]),
        # After process 1 saved a chunk's joined values (process 0 may not have).
        ({"process": 1, "at": "joined_save", "after": 2}, [(1, None), (1, True)]),
        # After both joined a chunk, before process 1 saved the next: it is behind.
        ({"process": 1, "at": "barrier", "after": 2}, [(2, False), (1, True)]),
    ],
    ids=["inside_a_chunk", "after_one_joined", "after_the_barrier"],
)
def test_a_killed_process_resumes_from_the_checkpoints(tmp_path, one_process, kill, stands):
    run = {**RUN, "policies": ["ucb"]}
    _killed(tmp_path, "killed", kill, run=run)
    for p, (chunk, joined) in enumerate(stands):
        with np.load(tmp_path / "checkpoint" / f"policy_ucb.process{p}of2.npz") as f:
            assert int(f["chunk"]) == chunk
            assert joined is None or bool(f["num_joined"]) == joined
    codes, output = _run(tmp_path, "resumed", run=run, checkpoint=True)
    assert codes == [0, 0], [(output / f"process{p}.log").read_text()[-3000:] for p in range(2)]
    for p in range(2):
        results = fedjax_sel.Results.load(str(output / f"process{p}"))
        reference = fedjax_sel.Results(
            config=one_process.config,
            curves={k: one_process.curves[k] for k in run["policies"]},
            totals={k: one_process.totals[k] for k in run["policies"]},
            selection_fraction={k: one_process.selection_fraction[k] for k in run["policies"]},
        )
        _assert_bit_identical(results, reference)
        # It resumed: ucb's first chunk (4 trials x 30 rounds) did not run again.
        calls = json.loads((output / f"process{p}.progress.json").read_text())
        assert all(done > 4 * 30 for policy, done in calls if policy == "ucb")


def test_processes_called_with_other_arguments_refuse_to_run(tmp_path):
    codes, output = _run(tmp_path, "mismatch", overrides={"1": {"seed": 8}})
    assert codes == [3, 3]
    for p in range(2):
        error = (output / f"process{p}.error").read_text()
        assert "other arguments on processes [1] than on process 0" in error
        assert not (output / f"process{p}.npz").exists()


def test_a_checkpoint_refused_by_one_process_stops_both(tmp_path):
    # Process 1 finds a file of another run (another seed) where its own would be.
    run = {**RUN, "policies": ["ucb"], "num_trials": 4, "num_rounds": 10}
    (tmp_path / "checkpoint").mkdir()
    stranger = tmp_path / "checkpoint" / "policy_ucb.process1of2.npz"
    np.savez(stranger, identity=np.array(json.dumps({"policy": "ucb", "seed": 0})))
    before = stranger.read_bytes()
    codes, output = _run(tmp_path, "refused", run=run, checkpoint=True)
    assert codes == [3, 3]
    assert "holds a different run" in (output / "process1.error").read_text()
    assert "process 1 of this jax.distributed job refused the run" in (
        (output / "process0.error").read_text()
    )
    assert stranger.read_bytes() == before
    assert not (tmp_path / "checkpoint" / "policy_ucb.process0of2.npz").exists()


def test_a_resume_with_another_number_of_processes_is_refused(tmp_path):
    (tmp_path / "policy_ucb.process0of2.npz").write_bytes(b"kept")
    env = envs.bernoulli(6, 2)
    with pytest.raises(ValueError, match=r"another number of processes.*process0of2"):
        fedjax_sel.simulate(
            {"ucb": bandits.ucb(6, 2)}, env, 5, 2, checkpoint_dir=str(tmp_path), progress=None
        )
    assert (tmp_path / "policy_ucb.process0of2.npz").read_bytes() == b"kept"


def test_checkpoint_file_names():
    assert checkpoints.filename("ucb", 0, 1) == "policy_ucb.npz"
    assert checkpoints.filename("ucb", 1, 4) == "policy_ucb.process1of4.npz"
    assert checkpoints.process_count("policy_ucb.npz", "ucb") == 1
    assert checkpoints.process_count("policy_ucb.process3of4.npz", "ucb") == 4
    assert checkpoints.process_count("policy_ucb.process3of4.npz", "uc") is None
    assert checkpoints.process_count("policy_ucb_2.npz", "ucb") is None


S = processes.Status


@pytest.mark.parametrize(
    "statuses, behind",
    [
        ([S(2, False), S(2, False)], [False, False]),
        ([S(2, True), S(2, False)], [False, False]),
        ([S(2, True), S(3, False)], [True, False]),
        ([S(3, False), S(2, True), S(2, True)], [False, True, True]),
    ],
)
def test_which_process_is_behind(statuses, behind):
    assert [processes.behind(statuses, i) for i in range(len(statuses))] == behind


@pytest.mark.parametrize(
    "statuses",
    [[S(2, False), S(3, False)], [S(1, True), S(3, False)], [S(2, True), S(3, True), S(4, False)]],
)
def test_checkpoints_of_no_single_run_are_refused(statuses):
    with pytest.raises(ValueError, match="do not come from one interrupted run"):
        processes.behind(statuses, 0)


def test_agree_raises_everywhere_when_one_process_fails():
    def group(index, error_of):
        gather = lambda x: np.array([int(e is not None) for e in error_of])
        return processes.Group(index, len(error_of), gather, lambda name: None)

    errors = [None, "bad file"]
    with pytest.raises(ValueError, match="bad file"):
        group(1, errors).agree(errors[1])
    with pytest.raises(ValueError, match="process 1 of this jax.distributed job refused"):
        group(0, errors).agree(errors[0])
    group(0, [None, None]).agree(None)


def _group_seeing(other_row):
    """Process 0 of two, the other process sending `other_row(own_row)`."""
    gather = lambda row: np.stack([row, other_row(np.asarray(row))])
    return processes.Group(0, 2, gather, lambda name: None)


@pytest.mark.parametrize("devices", [(2, 4), (3, 3), (6, 6)])
def test_device_counts_that_are_unequal_or_not_powers_of_two_are_refused(devices):
    def other(row):
        row = row.copy()
        row[-1] = devices[1]
        return row

    with pytest.raises(ValueError, match=rf"the processes have \[{devices[0]}, {devices[1]}\]"):
        _group_seeing(other).check_same_run("run", devices[0])


def test_a_hash_that_differs_is_refused_and_equal_ones_pass():
    _group_seeing(lambda row: row).check_same_run("run", 4)
    with pytest.raises(ValueError, match=r"other arguments on processes \[1\]"):
        _group_seeing(lambda row: np.where(np.arange(row.size) == 0, row + 1, row)).check_same_run(
            "run", 4
        )
