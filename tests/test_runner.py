"""The runner: reproducibility, chunking, checkpoints, common random numbers, devices."""

import os
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
from fedjax_sel.runner import tree_sum

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N, K = 6, 2


def _env():
    return envs.bernoulli(N, K, availability=0.8)  # means drawn per trial


def _policies():
    return {"ucb": bandits.ucb(N, K), "thompson": bandits.thompson(N, K)}


def _run(**kwargs):
    kwargs.setdefault("num_rounds", 23)
    kwargs.setdefault("num_trials", 10)
    kwargs.setdefault("seed", 3)
    kwargs.setdefault("progress", None)
    return fedjax_sel.simulate(_policies(), _env(), **kwargs)


def _assert_identical(a, b):
    for policy in a.curves:
        for metric, c in a.curves[policy].items():
            np.testing.assert_array_equal(c["mean"], b.curves[policy][metric]["mean"])
            np.testing.assert_array_equal(c["std"], b.curves[policy][metric]["std"])
        for total, x in a.totals[policy].items():
            np.testing.assert_array_equal(x, b.totals[policy][total])
        np.testing.assert_array_equal(a.selection_fraction[policy], b.selection_fraction[policy])


@pytest.fixture(scope="module")
def reference():
    return _run()


def test_same_seed_is_bit_identical(reference):
    _assert_identical(reference, _run())


def test_different_seed_differs(reference):
    other = fedjax_sel.simulate(_policies(), _env(), 23, 10, seed=4, progress=None)
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


def test_cpu_compiler_options_reach_xla_and_change_no_decision(reference, monkeypatch):
    assert jax.default_backend() == "cpu"
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


def test_checkpoint_from_another_configuration_is_refused(tmp_path):
    _run(num_rounds=5, checkpoint_dir=str(tmp_path))
    with pytest.raises(ValueError, match="different configuration .*num_rounds"):
        _run(num_rounds=6, checkpoint_dir=str(tmp_path))


def test_two_copies_of_one_policy_give_identical_metrics():
    env = _env()
    res = fedjax_sel.simulate(
        {"a": bandits.thompson(N, K), "b": bandits.thompson(N, K)}, env, 15, 6, progress=None
    )
    for metric, c in res.curves["a"].items():
        np.testing.assert_array_equal(c["mean"], res.curves["b"][metric]["mean"])


def _recording_env():
    """Bernoulli arms whose extras record the round's environment draws."""
    base = _env()

    def step(state, inp, decision, key):
        feedback, state, stats = base.step(state, inp, decision, key)
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
        ({"num_rounds": 0}, r"num_rounds must be an integer >= 1, got 0"),
        ({"num_trials": -2}, r"num_trials must be an integer >= 1, got -2"),
        ({"trials_per_chunk": 3}, r"trials_per_chunk must be a power of two"),
        ({"rounds_per_chunk": 50}, r"rounds_per_chunk must be an integer in \[1, 23\]"),
        ({"seed": -1}, r"seed must be an integer >= 0"),
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


def test_results_do_not_depend_on_device_count():
    script = textwrap.dedent(
        """
        import jax, numpy as np, bandits, fedjax_sel
        from fedjax_sel import envs
        assert jax.device_count() == 4
        env = envs.bernoulli(6, 2, availability=0.8)
        run = lambda devs, **kw: fedjax_sel.simulate(
            bandits.ucb(6, 2), env, 17, 10, seed=3, progress=None, devices=devs, **kw)
        a = run(jax.devices()[:1])
        b = run(jax.devices())
        c = run(jax.devices()[:3], trials_per_chunk=4)
        for r in (b, c):
            for m, v in a.curves["policy"].items():
                np.testing.assert_array_equal(v["mean"], r.curves["policy"][m]["mean"])
            np.testing.assert_array_equal(a.totals["policy"]["cumulative_regret"],
                                          r.totals["policy"]["cumulative_regret"])
        print("OK")
        """
    )
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        JAX_PLATFORMS="cpu",
        PYTHONPATH=ROOT,
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_a_policy_that_does_not_fit_the_env_fails_before_anything_runs():
    calls = []
    policies = {"ucb": bandits.ucb(N, K), "rbcs_f": bandits.rbcs_f(N, K, fairness_rate=0.1)}
    with pytest.raises(ValueError, match="policy 'rbcs_f' does not fit this environment"):
        fedjax_sel.simulate(policies, _env(), 5, 2, progress=lambda *a: calls.append(a))
    assert calls == []  # not even the first policy ran
