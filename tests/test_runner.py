"""The runner: reproducibility, chunking, checkpoints, common random numbers, devices."""

import errno
import os
import re
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bandits
import fedjax_sel
from fedjax_sel import envs, runner
from fedjax_sel.runner import fingerprint, programs, tree_sum

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, K = 6, 2


def _env():
    return envs.bernoulli(N, K, availability=0.8)  # means drawn per trial


def _policies():
    return {"ucb": bandits.ucb(N, K), "thompson": bandits.thompson(N, K)}


# One environment and one set of policies for `_run`: `simulate` keeps the programs it
# compiled for the same objects, so the runs of this module compile each shape once.
# `test_same_seed_is_bit_identical` builds its own, to trace and compile anew.
ENV, POLICIES = _env(), _policies()


def _run(policies=POLICIES, env=ENV, **kwargs):
    kwargs.setdefault("num_rounds", 23)
    kwargs.setdefault("num_trials", 10)
    kwargs.setdefault("seed", 3)
    kwargs.setdefault("progress", None)
    return fedjax_sel.simulate(policies, env, **kwargs)


def _assert_identical(a, b):
    for policy in a.curves:
        for metric, c in a.curves[policy].items():
            np.testing.assert_array_equal(c["mean"], b.curves[policy][metric]["mean"])
            np.testing.assert_array_equal(c["std"], b.curves[policy][metric]["std"])
        for total, x in a.totals[policy].items():
            np.testing.assert_array_equal(x, b.totals[policy][total])
        np.testing.assert_array_equal(a.selection_fraction[policy], b.selection_fraction[policy])


@pytest.fixture
def reference(optimized):
    # Compiled once (the same objects, sizes and options), run again per test (10 trials).
    return _run()


def test_same_seed_is_bit_identical(reference):
    _assert_identical(reference, _run(_policies(), _env()))


def test_different_seed_differs(reference):
    other = _run(seed=4)
    assert not np.array_equal(
        reference.totals["ucb"]["cumulative_regret"], other.totals["ucb"]["cumulative_regret"]
    )


@pytest.mark.parametrize(
    "trials_per_chunk, rounds_per_chunk", [(1, None), (2, 5), (4, 23), (8, 1), (16, 7)]
)
def test_results_do_not_depend_on_chunking(reference, trials_per_chunk, rounds_per_chunk):
    _assert_identical(
        reference, _run(trials_per_chunk=trials_per_chunk, rounds_per_chunk=rounds_per_chunk)
    )


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the runner's CPU options")
def test_cpu_compiler_options_reach_xla_and_change_no_decision(reference, monkeypatch):
    # An option XLA does not know fails the compilation: the runner passes them on.
    monkeypatch.setitem(runner.COMPILER_OPTIONS, "cpu", {"xla_cpu_no_such_option": 1})
    with pytest.raises(jax.errors.JaxRuntimeError, match="xla_cpu_no_such_option"):
        _run()
    monkeypatch.delitem(runner.COMPILER_OPTIONS, "cpu")
    plain = _run()
    for policy in reference.totals:
        # The same cohorts every round: the same selection counts and 0/1 rewards.
        np.testing.assert_array_equal(
            reference.selection_fraction[policy], plain.selection_fraction[policy]
        )
        for total in ("cumulative_reward", "jain_index", "min_selection_fraction"):
            np.testing.assert_array_equal(
                reference.totals[policy][total], plain.totals[policy][total]
            )
        # Sums of the (non-integer) means over clients may round differently.
        np.testing.assert_allclose(
            reference.totals[policy]["cumulative_regret"],
            plain.totals[policy]["cumulative_regret"],
            rtol=1e-6,
        )


def test_tree_sum_of_aligned_blocks_equals_whole():
    x = jax.random.normal(jax.random.PRNGKey(0), (13, 3)) * 1e3
    whole = tree_sum(x)
    blocks = [tree_sum(x[i : i + 4]) for i in range(0, 13, 4)]
    joined = (blocks[0] + blocks[1]) + (blocks[2] + blocks[3])
    np.testing.assert_array_equal(whole, joined)
    np.testing.assert_allclose(whole, np.asarray(x, np.float64).sum(0), rtol=1e-5)


def test_checkpoint_resume_equals_uninterrupted(reference, tmp_path):
    calls = []

    def interrupt_on_third_chunk(policy, done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    ckpt = str(tmp_path / "ckpt")
    chunked = dict(trials_per_chunk=4, rounds_per_chunk=9, checkpoint_dir=ckpt)
    with pytest.raises(KeyboardInterrupt):
        _run(progress=interrupt_on_third_chunk, **chunked)
    assert os.path.exists(os.path.join(ckpt, "policy_ucb.npz"))
    resumed = _run(progress=lambda *args: calls.append(args), **chunked)
    _assert_identical(reference, resumed)


def test_checkpoint_whose_carry_is_not_this_codes_is_refused(tmp_path):
    # Stopped in the middle of a chunk, by code whose carry held one array fewer: the
    # resume names the file and what to do, instead of failing in `jax.tree.unflatten`.
    def interrupt(policy, done, total):
        raise KeyboardInterrupt

    ckpt = str(tmp_path / "ckpt")
    chunked = dict(trials_per_chunk=4, rounds_per_chunk=9, checkpoint_dir=ckpt)
    with pytest.raises(KeyboardInterrupt):
        _run(progress=interrupt, **chunked)
    path = os.path.join(ckpt, "policy_ucb.npz")
    with np.load(path) as f:
        arrays = dict(f)
    assert arrays["num_carry"] > 1
    arrays["num_carry"] = arrays["num_carry"] - 1
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"policy_ucb.npz.*carried arrays.*delete"):
        _run(**chunked)


def test_a_config_with_tuples_and_integer_keys_resumes_its_own_checkpoint(tmp_path):
    # The checkpoint keeps the config as JSON reads it back; the run's config is taken
    # the same way, so the same run resumes (it was refused as "differs in config").
    def interrupt(policy, done, total):
        raise KeyboardInterrupt

    config = {"means_range": (0.2, 0.8), 3: "three"}
    chunked = dict(rounds_per_chunk=9, checkpoint_dir=str(tmp_path), config=config)
    with pytest.raises(KeyboardInterrupt):
        _run(progress=interrupt, **chunked)
    resumed = _run(**chunked)
    _assert_identical(_run(), resumed)
    assert resumed.config["config"] == {"means_range": [0.2, 0.8], "3": "three"}


def test_checkpoint_from_another_configuration_is_refused(tmp_path):
    _run(num_rounds=5, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="holds a different run.*differs in num_rounds"):
        _run(num_rounds=6, checkpoint_dir=str(tmp_path))


def _one(policy, env, path, **kwargs):
    return fedjax_sel.simulate(
        {"p": policy}, env, 6, 4, seed=1, checkpoint_dir=str(path), progress=None, **kwargs
    )


# Each kind of change between the run that wrote a checkpoint and the run that finds it:
# (first run's policy and environment, second run's, what the refusal names).
STALE = {
    "environment arrays": (
        lambda: (bandits.ucb(N, K), envs.bernoulli(N, K, means=np.linspace(0.1, 0.9, N))),
        lambda: (bandits.ucb(N, K), envs.bernoulli(N, K, means=np.linspace(0.2, 0.8, N))),
        "environment_fingerprint",
    ),
    "environment parameters": (
        lambda: (bandits.ucb(N, K), envs.bernoulli(N, K, availability=0.9)),
        lambda: (bandits.ucb(N, K), envs.bernoulli(N, K, availability=0.8)),
        "environment_fingerprint",
    ),
    "policy hyper-parameter": (
        lambda: (bandits.epsilon_greedy(N, K, epsilon=0.0), envs.bernoulli(N, K)),
        lambda: (bandits.epsilon_greedy(N, K, epsilon=1.0), envs.bernoulli(N, K)),
        "policy_fingerprint",
    ),
    "policy factory": (
        lambda: (bandits.ucb(N, K), envs.bernoulli(N, K)),
        lambda: (bandits.thompson(N, K), envs.bernoulli(N, K)),
        "policy_fingerprint",
    ),
}


@pytest.mark.parametrize("change", sorted(STALE))
def test_a_stale_checkpoint_is_refused_naming_what_differs(change, tmp_path):
    first, second, field = STALE[change]
    _one(*first(), tmp_path)
    with pytest.raises(ValueError, match=rf"holds a different run.*differs in .*{field}"):
        _one(*second(), tmp_path)
    _one(*first(), tmp_path)  # the same run still resumes


def test_a_checkpoint_file_copied_from_another_policy_is_refused(tmp_path):
    env = envs.bernoulli(N, K)
    fedjax_sel.simulate(
        {"a": bandits.ucb(N, K), "b": bandits.thompson(N, K)},
        env,
        6,
        4,
        checkpoint_dir=str(tmp_path),
        progress=None,
    )
    os.replace(tmp_path / "policy_a.npz", tmp_path / "policy_b.npz")
    with pytest.raises(ValueError, match=r"policy_b.npz.*differs in policy: .*policy_fingerprint"):
        fedjax_sel.simulate(
            {"b": bandits.thompson(N, K)}, env, 6, 4, checkpoint_dir=str(tmp_path), progress=None
        )


def _first_chunk_checkpoint(path):
    """Writes the checkpoint of an interrupted run of `_run` under `path`."""

    def stop(policy, done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _run(trials_per_chunk=4, rounds_per_chunk=9, checkpoint_dir=str(path), progress=stop)
    return path / "policy_ucb.npz"


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda b: b[: len(b) // 2], "cannot be read"),  # truncated
        (lambda b: b"\x00" * 64 + b[64:], "cannot be read"),  # corrupt
        (lambda b: b"not a checkpoint", "cannot be read"),  # foreign bytes
        (None, "holds no identity"),  # a foreign .npz
    ],
)
def test_a_damaged_or_foreign_checkpoint_is_named_and_never_resumed(damage, message, tmp_path):
    path = _first_chunk_checkpoint(tmp_path)
    if damage is None:
        np.savez(path, chunk=np.int64(1))
    else:
        path.write_bytes(damage(path.read_bytes()))
    calls = []
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}.*{message}.*delete"):
        _run(
            trials_per_chunk=4,
            rounds_per_chunk=9,
            checkpoint_dir=str(tmp_path),
            progress=calls.append,
        )
    assert calls == []  # refused before anything ran


def test_a_partially_written_checkpoint_leaves_the_last_one_to_resume(reference, tmp_path):
    path = _first_chunk_checkpoint(tmp_path)
    # A save killed midway leaves only its temporary file, which a resume ignores.
    (tmp_path / "policy_ucb.npz.tmp.npz").write_bytes(path.read_bytes()[:100])
    _assert_identical(
        reference, _run(trials_per_chunk=4, rounds_per_chunk=9, checkpoint_dir=str(tmp_path))
    )


def test_a_full_disk_names_the_checkpoint_and_keeps_the_previous_one(tmp_path, monkeypatch):
    path = _first_chunk_checkpoint(tmp_path)
    before = path.read_bytes()

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    with pytest.raises(OSError, match=rf"{re.escape(str(path))}.*No space left.*intact"):
        _run(trials_per_chunk=4, rounds_per_chunk=9, checkpoint_dir=str(tmp_path))
    assert path.read_bytes() == before
    assert not os.path.exists(str(path) + ".tmp.npz")


def test_fingerprints_are_the_same_in_another_process():
    script = textwrap.dedent(
        """
        import numpy as np, bandits
        from fedjax_sel import envs
        from fedjax_sel.runner import fingerprint, programs
        keys = programs.keys(0)
        for env, sel in [
            (envs.bernoulli(6, 2, means=np.linspace(0.1, 0.9, 6)), bandits.epsilon_greedy(6, 2)),
            (envs.wireless_latency(6, 2), bandits.cs_ucb(6, 2)),
        ]:
            print(fingerprint.environment(env, keys), fingerprint.policy(sel, env, keys))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    keys = programs.keys(0)
    here = []
    for env, sel in [
        (envs.bernoulli(6, 2, means=np.linspace(0.1, 0.9, 6)), bandits.epsilon_greedy(6, 2)),
        (envs.wireless_latency(6, 2), bandits.cs_ucb(6, 2)),
    ]:
        here += [fingerprint.environment(env, keys), fingerprint.policy(sel, env, keys)]
    assert out == here
    assert len(set(here)) == 4


def test_two_copies_of_one_policy_give_identical_metrics():
    env = _env()
    res = fedjax_sel.simulate(
        {"a": bandits.thompson(N, K), "b": bandits.thompson(N, K)}, env, 15, 6, progress=None
    )
    for metric, c in res.curves["a"].items():
        np.testing.assert_array_equal(c["mean"], res.curves["b"][metric]["mean"])


def _recording_env():
    """Bernoulli arms whose extras record the round's environment draws: every client's
    reward (a decision's `indices` would have the selected ones' drawn alone, the others'
    left undefined)."""
    base = _env()

    def step(state, inp, decision, key, params=None):
        decision = decision._replace(indices=None)
        feedback, state, stats = base.step(state, inp, decision, key, params)
        draws = jnp.sum(feedback.reward * jnp.arange(1, N + 1)) + jnp.sum(
            inp.available * 10.0 ** jnp.arange(N)
        )
        return feedback, state, stats._replace(extras={"draws": draws, "mean0": state.means[0]})

    return base._replace(step=step)


def test_environment_draws_do_not_depend_on_the_policy():
    res = fedjax_sel.simulate(
        {"ucb": bandits.ucb(N, K), "random": bandits.random(N, K), "oracle": bandits.oracle()},
        _recording_env(),
        12,
        5,
        progress=None,
    )
    for metric in ("extra/draws", "extra/mean0"):
        ref = res.curves["ucb"][metric]["mean"]
        for p in ("random", "oracle"):
            np.testing.assert_array_equal(ref, res.curves[p][metric]["mean"])
    assert res.curves["ucb"]["extra/draws"]["std"].max() > 0  # the draws do vary


def test_metrics_are_consistent():
    res = _run(num_rounds=30)
    c = res.curves["ucb"]
    np.testing.assert_allclose(
        np.cumsum(c["regret"]["mean"]), c["cumulative_regret"]["mean"], rtol=1e-5, atol=1e-4
    )
    np.testing.assert_allclose(
        res.totals["ucb"]["cumulative_regret"].mean(), c["cumulative_regret"]["mean"][-1], rtol=1e-6
    )
    # At most K selected per round, fewer only when fewer than K are available.
    assert np.all(c["num_selected"]["mean"] <= K) and np.all(c["num_selected"]["mean"] > 1.0)
    np.testing.assert_allclose(
        res.selection_fraction["ucb"].sum(), c["num_selected"]["mean"].mean(), rtol=1e-5
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_rounds": 0}, r"num_rounds must be an integer in \[1, 16777216\], got 0"),
        ({"num_trials": -2}, r"num_trials must be an integer >= 1, got -2"),
        ({"trials_per_chunk": 3}, r"trials_per_chunk must be a power of two"),
        ({"rounds_per_chunk": 50}, r"rounds_per_chunk must be an integer in \[1, 23\]"),
        ({"seed": -1}, r"seed must be an integer in \[0, 4294967295\], got -1"),
        ({"config": {"f": object()}}, r"config must be JSON-serialisable"),
    ],
)
def test_bad_runner_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _run(**kwargs)


def test_bad_policies_argument():
    with pytest.raises(ValueError, match="non-empty mapping"):
        fedjax_sel.simulate({}, _env(), 5, 2)
    with pytest.raises(ValueError, match="map names"):
        fedjax_sel.simulate({"x": 3}, _env(), 5, 2)


def test_results_save_load_roundtrip_and_plot(reference, tmp_path):
    path = str(tmp_path / "res")
    reference.save(path)
    loaded = fedjax_sel.Results.load(path)
    _assert_identical(reference, loaded)
    assert loaded.config == reference.config
    fig = fedjax_sel.plot(loaded, "cumulative_regret", path=str(tmp_path / "r.png"))
    assert os.path.getsize(tmp_path / "r.png") > 1000
    assert len(fig.axes[0].lines) == 2
    with pytest.raises(ValueError, match="unknown metric"):
        fedjax_sel.plot(loaded, "nope")
    assert "cumulative_regret" in loaded.table().splitlines()[0]


def _python(script: str, **variables) -> str:
    """The output of `script` run by a fresh Python on the CPU, with these environment
    variables and no device count of this process's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(variables, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_results_do_not_depend_on_device_count():
    # Each device sums its own block of trials and the host joins the blocks: on 2 and
    # 4 devices (blocks of 8 and 4 of the 10 trials, the last ones padding), on 3
    # (chunks of 4 in blocks of 2) and on 4 under a budget, the numbers of one device.
    # The compiled rounds exchange nothing between devices.
    script = textwrap.dedent(
        """
        import jax, numpy as np, bandits, fedjax_sel
        from fedjax_sel import envs, runner
        assert jax.device_count() == 4
        env, sel = envs.bernoulli(6, 2, availability=0.8), bandits.ucb(6, 2)
        run = lambda devs, **kw: fedjax_sel.simulate(
            sel, env, 17, 10, seed=3, progress=None, devices=devs, **kw)
        a = run(jax.devices()[:1])
        budget = 8 * runner.trial_memory_bytes(env, sel) + 17 * 12 * 16 + 10 * 7 * 8
        runs = [run(jax.devices()[:2]), run(jax.devices()), run(jax.devices()[:3],
                trials_per_chunk=4), run(jax.devices(), memory_budget_bytes=budget)]
        assert [r.config["trials_per_chunk"] for r in runs] == [16, 16, 4, 8]
        for r in runs:
            for m, v in a.curves["policy"].items():
                np.testing.assert_array_equal(v["mean"], r.curves["policy"][m]["mean"])
                np.testing.assert_array_equal(v["std"], r.curves["policy"][m]["std"])
            for m, v in a.totals["policy"].items():
                np.testing.assert_array_equal(v, r.totals["policy"][m])
            np.testing.assert_array_equal(a.selection_fraction["policy"],
                                          r.selection_fraction["policy"])
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("trials",))
        options = runner.programs.compiler_options("cpu")
        keys = runner.programs.keys(0)
        layout = runner.programs.metric_layout(env, keys)
        init, rounds, _ = runner.programs.programs(env, sel, layout, options, mesh)  # simulate's
        ids = jax.device_put(np.arange(8, dtype=np.int32),
                             jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("trials")))
        carry = init(keys, env.params, ids)
        lowered = rounds.lower(carry, keys, env.params, ids, ids < 8, np.arange(1, 3))
        hlo = lowered.compile().as_text()
        assert "all-reduce" not in hlo and "all-gather" not in hlo and "collective" not in hlo
        # A checkpoint holds its devices' blocks: another device count is refused.
        import tempfile
        with tempfile.TemporaryDirectory() as ckpt:
            run(jax.devices()[:1], checkpoint_dir=ckpt, rounds_per_chunk=5)
            try:
                run(jax.devices()[:2], checkpoint_dir=ckpt)
                raise AssertionError("resumed on another number of devices")
            except ValueError as e:
                assert "differs in num_devices" in str(e), e
        # Rounds in calls of 4 compile the rounds twice (4 and 1), not again for the
        # carry of the first call.
        before = rounds._cache_size()
        run(jax.devices(), rounds_per_chunk=4)
        assert rounds._cache_size() == before + 2, (before, rounds._cache_size())
        print("OK")
        """
    )
    out = _python(script, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    assert "OK" in out


@pytest.mark.parametrize(
    "variables, call, expected",
    [
        ({}, "configure_cpu(3)", 3),
        ({}, "configure_cpu()", len(os.sched_getaffinity(0))),
        # A number chosen already wins over the number of cores.
        ({"JAX_NUM_CPU_DEVICES": "2"}, "configure_cpu()", 2),
        ({"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}, "configure_cpu()", 4),
    ],
)
def test_configure_cpu_before_jax_starts(variables, call, expected):
    # Importing the library and the launch scripts computes nothing, so the call works.
    script = (
        f"import bandits, fedjax_sel, jax, launch.bench, launch.reproduce\n"
        f"fedjax_sel.{call}\nprint(jax.device_count('cpu'))"
    )
    assert _python(script, **variables).split() == [str(expected)]


def test_configure_cpu_after_jax_started_keeps_the_devices(caplog):
    before = jax.device_count("cpu")
    jnp.zeros(1).block_until_ready()
    fedjax_sel.configure_cpu(before + 1)
    assert jax.device_count("cpu") == before
    assert "Call configure_cpu() before any JAX computation" in caplog.text
    with pytest.raises(ValueError, match="num_devices"):
        fedjax_sel.configure_cpu(0)


def test_importing_the_library_loads_no_training_or_plotting_library():
    # Needs `fedjax_sel.envs` to import its training environment lazily.
    heavy = ("flax", "optax", "tensorflow_datasets", "matplotlib", "scipy")
    script = f"import sys, fedjax_sel, bandits\nprint([m for m in {heavy!r} if m in sys.modules])"
    assert _python(script).split() == ["[]"]


def _notes(e):
    return " ".join(getattr(e, "__notes__", ()))


def test_a_policy_that_does_not_fit_the_env_fails_before_anything_runs():
    calls = []
    policies = {"ucb": bandits.ucb(N, K), "rbcs_f": bandits.rbcs_f(N, K, fairness_rate=0.1)}
    with pytest.raises(ValueError, match="reads RoundInput.context") as info:
        fedjax_sel.simulate(policies, _env(), 5, 2, progress=lambda *a: calls.append(a))
    assert calls == []  # not even the first policy ran
    if sys.version_info >= (3, 11):
        assert "policy 'rbcs_f'" in _notes(info.value)


def _selector(select):
    return fedjax_sel.Selector(
        init=lambda key: jnp.zeros(()), select=select, update=lambda state, dec, fb: state
    )


@pytest.mark.parametrize("rounds_per_chunk, traces", [(None, 1), (4, 2)])
def test_the_rounds_are_traced_once_for_each_length_of_call(rounds_per_chunk, traces):
    # The check before anything runs traces the rounds on the first call's inputs, which
    # the compilation then finds in JAX's cache: one trace of the policy's update for
    # 10 rounds in one call, two for calls of 4, 4 and 2 rounds (the update runs nowhere
    # else; the memory estimate traces the selection and the environment alone).
    calls = []
    base = bandits.ucb(N, K)

    def update(state, decision, feedback):
        calls.append(None)
        return base.update(state, decision, feedback)

    policy = base._replace(update=update)
    fedjax_sel.simulate(policy, _env(), 10, 4, progress=None, rounds_per_chunk=rounds_per_chunk)
    assert len(calls) == traces


def test_a_missing_round_input_field_names_the_field_and_the_policy():
    def select(state, inp, key):
        context = fedjax_sel.validation.require(inp.context, "context", policy="needs_context")
        return fedjax_sel.Decision(context[:, 0] > 0), state

    with pytest.raises(ValueError, match="policy 'needs_context' reads RoundInput.context"):
        fedjax_sel.simulate({"p": _selector(select)}, _env(), 5, 2, progress=None)
    assert fedjax_sel.validation.require(3, "context", policy="p") == 3


def test_a_bug_in_a_policy_keeps_its_own_exception_and_traceback():
    def buggy_select(state, inp, key):
        return fedjax_sel.Decision(inp.available & jnp.ones(N + 1, bool)), state

    with pytest.raises(TypeError, match="incompatible shapes") as info:
        fedjax_sel.simulate({"buggy": _selector(buggy_select)}, _env(), 5, 2, progress=None)
    assert any(entry.name == "buggy_select" for entry in info.traceback)
    if sys.version_info >= (3, 11):
        assert "policy 'buggy'" in _notes(info.value)


def test_a_policy_that_selects_more_than_the_cohort_is_refused():
    def select_everyone(state, inp, key):
        return fedjax_sel.Decision(inp.available | (inp.t > 3)), state  # N > K from round 4

    env = _env()
    assert env.num_selected == K
    assert fedjax_sel.simulate({"ucb": bandits.ucb(N, K)}, env, 5, 3, progress=None)
    with pytest.raises(
        ValueError,
        match=rf"policy 'greedy' made decisions the environment does not accept in 15 rounds "
        rf"of 3 trials, first in trial 0 \(its largest cohort: {N}.*num_selected={K}",
    ):
        fedjax_sel.simulate({"greedy": _selector(select_everyone)}, env, 5, 3, progress=None)


def test_an_environment_without_oracle_reward_has_no_regret_metrics():
    base = _env()

    def step(state, inp, decision, key, params=None):
        feedback, state, stats = base.step(state, inp, decision, key, params)
        return feedback, state, stats._replace(oracle_reward=None)

    env = base._replace(step=step, oracle=None)
    res = fedjax_sel.simulate(_policies(), env, 7, 3, progress=None)
    for policy in res.policies:
        assert not any("regret" in name for name in res.curves[policy])
        assert not any("regret" in name for name in res.totals[policy])
        assert res.totals[policy]["cumulative_reward"].shape == (3,)
    assert "regret" not in res.table() and "cumulative_reward" in res.table()
    # The other metrics are those of the same run with an oracle.
    with_oracle = fedjax_sel.simulate(_policies(), base, 7, 3, progress=None)
    for name, c in res.curves["ucb"].items():
        np.testing.assert_array_equal(c["mean"], with_oracle.curves["ucb"][name]["mean"])


def test_parameters_are_an_argument_of_the_compiled_programs():
    # Another availability through the parameters: the numbers of an environment built
    # with it, on the programs compiled for the first (no new compilation).
    env, other = _env(), envs.bernoulli(N, K, availability=0.5)
    sel = bandits.ucb(N, K)
    fedjax_sel.simulate(sel, env, 6, 4, progress=None)
    layout = runner.programs.metric_layout(env, runner.programs.keys(0))
    mesh = jax.sharding.Mesh(np.asarray(jax.devices()), ("trials",))
    options = runner.programs.compiler_options(jax.devices()[0].platform)
    _, rounds, _ = runner.programs.programs(env, sel, layout, options, mesh)
    before = rounds._cache_size()
    swapped = fedjax_sel.simulate(sel, env._replace(params=other.params), 6, 4, progress=None)
    assert rounds._cache_size() == before
    separate = fedjax_sel.simulate(sel, other, 6, 4, progress=None)
    for name, curve in separate.curves["policy"].items():
        np.testing.assert_array_equal(curve["mean"], swapped.curves["policy"][name]["mean"])
    np.testing.assert_array_equal(
        separate.selection_fraction["policy"], swapped.selection_fraction["policy"]
    )
    assert not np.array_equal(
        separate.curves["policy"]["num_selected"]["mean"],
        fedjax_sel.simulate(sel, env, 6, 4, progress=None).curves["policy"]["num_selected"]["mean"],
    )


def test_every_program_compiles_once_before_the_first_chunk_runs(monkeypatch):
    # `compile_programs` lowers each program as its calls do: no chunk, and not the
    # shorter last call of the rounds (5 = 2 + 2 + 1), compiles again when it runs.
    events = []

    def on_event(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            events.append(kwargs.get("fun_name"))

    compile_programs = programs.compile_programs
    monkeypatch.setattr(
        programs,
        "compile_programs",
        lambda *args: (compile_programs(*args), events.append("compiled")),
    )
    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        fedjax_sel.simulate(
            bandits.ucb(N, K), _env(), 5, 8, trials_per_chunk=4, rounds_per_chunk=2, progress=None
        )
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)
    programs_ = ("jit(init_carry)", "jit(run_rounds)", "jit(finish)")
    marker = events.index("compiled")
    before = [e for e in events[:marker] if e in programs_]
    assert sorted(before) == [
        "jit(finish)",
        "jit(init_carry)",
        "jit(run_rounds)",
        "jit(run_rounds)",
    ]
    assert not [e for e in events[marker:] if e in programs_]


@pytest.mark.parametrize(
    "decide, message",
    [
        (
            lambda inp: fedjax_sel.Decision(inp.available.astype(jnp.float32)),
            r"Decision.selected must be bool\[6\]",
        ),
        (
            lambda inp: fedjax_sel.Decision(jnp.ones((N + 1,), bool)),
            r"Decision.selected must be bool\[6\]",
        ),
        (
            lambda inp: fedjax_sel.Decision(inp.available, probe=inp.available),
            r"Decision.probe must be None or f32\[6\]",
        ),
        (
            lambda inp: fedjax_sel.Decision(inp.available, probe=jnp.ones(N + 1)),
            r"Decision.probe must be None or f32\[6\]",
        ),
        (
            lambda inp: fedjax_sel.Decision(inp.available, indices=jnp.ones(K)),
            r"Decision.indices must be None or int32\[m\]",
        ),
        (
            lambda inp: fedjax_sel.Decision(inp.available, indices=jnp.ones((K, 1), jnp.int32)),
            r"Decision.indices must be None or int32\[m\]",
        ),
    ],
)
def test_a_decision_of_the_wrong_shape_or_dtype_is_refused_before_anything_runs(decide, message):
    calls = []
    sel = _selector(lambda state, inp, key: (decide(inp), state))
    with pytest.raises(ValueError, match=message):
        fedjax_sel.simulate({"bad": sel}, _env(), 5, 2, progress=lambda *a: calls.append(a))
    assert calls == []


def test_a_policy_that_selects_an_unavailable_client_is_refused():
    def select_first(state, inp, key):
        return fedjax_sel.Decision(jnp.arange(N) < K), state  # availability 0.8: not always

    with pytest.raises(ValueError, match=r"policy 'first' made decisions the environment does"):
        fedjax_sel.simulate({"first": _selector(select_first)}, _env(), 20, 4, progress=None)


def test_a_decision_the_environment_rejects_is_refused():
    env = envs.dfl_delay(6, 1, num_servers=3)  # one client per cell of two

    def first_two(state, inp, key):
        return fedjax_sel.Decision(jnp.arange(6) < 2), state  # both of cell 0

    with pytest.raises(ValueError, match=r"Env.feasible"):
        fedjax_sel.simulate({"two": _selector(first_two)}, env, 3, 2, progress=None)
