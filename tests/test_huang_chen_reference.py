"""The NumPy references of RBCS-F (Huang et al.) and CC-MAB (Chen et al.) run the jitted
policies' model: their P4 solver and grid exactly, every metric in distribution."""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sel
from bandits.dfl_ccmab import grid_index, grid_size
from experiments import bench
from experiments.references import chen as chen_reference
from experiments.references import huang as huang_reference

JAX_TRIALS, NUMPY_TRIALS = 128, 64
HUANG_ROUNDS = 40
CHEN_ROUNDS = 32  # G_T = 2


def _assert_agree(numpy_values, jax_mean, jax_std, name):
    """The two means differ by at most 4 standard errors of their difference (a correct
    reference fails with probability ~6e-5 per metric; the seeds are fixed), or by the
    f32 rounding of the jitted value where both sides are constant (RBCS-F's least
    selection fraction is 1/T in every trial of a short run)."""
    x = np.asarray(numpy_values, np.float64)
    se = np.sqrt(x.var(ddof=1) / x.size + jax_std**2 / JAX_TRIALS)
    f32_rounding = 1e-6 * abs(jax_mean)
    assert abs(x.mean() - jax_mean) <= 4 * se + f32_rounding, (name, x.mean(), jax_mean, se)


def _check_reference(trial, metrics, env, policy, rounds, run):
    """Every metric of `trial` against the jitted run; `run` (the module's `jax_run_*`,
    on the same cached objects) compiles nothing and returns the jitted means."""
    res = fedjax_sel.simulate(policy, env, rounds, JAX_TRIALS, seed=1, progress=None)
    rng = np.random.default_rng(2)
    ours = [trial(rng, rounds) for _ in range(NUMPY_TRIALS)]
    jitted = {}
    for name in metrics:
        if name in res.totals["policy"]:
            values = np.asarray(res.totals["policy"][name], np.float64)
            jitted[name] = values.mean()
            std = values.std(ddof=1)
        else:  # a last-round value of an extra curve
            curve = res.curves["policy"][f"extra/{name}"]
            jitted[name], std = curve["mean"][-1], curve["std"][-1]
        _assert_agree([o[name] for o in ours], jitted[name], std, name)
    means = {}
    assert bench.measure(lambda: means.update(run()))["xla_compilations"] == 0
    assert means.keys() == set(metrics)
    np.testing.assert_allclose([means[m] for m in metrics], [jitted[m] for m in metrics])


def test_rbcs_f_reference_agrees_with_jitted_policy():
    env, policy = huang_reference.jitted_setting()
    run = huang_reference.jax_run_rbcs_f(JAX_TRIALS, HUANG_ROUNDS, seed=1)
    _check_reference(
        huang_reference.numpy_trial_rbcs_f,
        huang_reference.METRICS,
        env,
        policy,
        HUANG_ROUNDS,
        run,
    )


def test_dfl_ccmab_reference_agrees_with_jitted_policy():
    env, policy = chen_reference.jitted_setting(CHEN_ROUNDS)
    run = chen_reference.jax_run_dfl_ccmab(JAX_TRIALS, CHEN_ROUNDS, seed=1)
    _check_reference(
        chen_reference.numpy_trial_dfl_ccmab,
        chen_reference.METRICS,
        env,
        policy,
        CHEN_ROUNDS,
        run,
    )


def _p4_instances(rng, num, n):
    """Continuous costs and queues (so the optimum is unique), random availability."""
    cost = rng.uniform(0.0, 5.0, (num, n))
    value = rng.uniform(0.0, 3.0, (num, n))
    available = rng.random((num, n)) < 0.7
    weight = rng.uniform(0.1, 2.0, num)
    return cost, value, available, weight


def test_p4_solver_equals_brute_force():
    # `ops.prefix_max_cost_top_k`, the jitted policy's solver, is held to the same brute
    # force in tests/test_rbcs_f.py.
    rng = np.random.default_rng(0)
    n, m = 7, 3
    subsets = np.array(list(itertools.product([False, True], repeat=n)))
    for cost, value, available, weight in zip(*_p4_instances(rng, 200, n), strict=True):
        chosen = huang_reference.solve_p4(cost, value, available, m, weight, rng)
        ok = (subsets.sum(1) == min(m, available.sum())) & ~np.any(subsets & ~available, 1)
        worst = np.max(np.where(subsets, cost, 0.0), axis=1)
        objective = np.where(ok, weight * worst - subsets @ value, np.inf)
        expected = np.flatnonzero(subsets[np.argmin(objective)])
        np.testing.assert_array_equal(np.sort(chosen), expected)


@pytest.mark.parametrize("rounds", [CHEN_ROUNDS, 2000])
def test_ccmab_grid_equals_the_policy_grid(rounds):
    g = chen_reference.grid_size(rounds)
    assert g == grid_size(rounds)
    imax, dmax = chen_reference.MAX_ACTIVITY, chen_reference.SHARD_SIZE
    activity, samples = np.meshgrid(np.arange(imax + 1), np.arange(1, dmax + 1))
    activity, samples = activity.ravel(), samples.ravel()
    # The environment's f32 context: int32 / int32 in JAX.
    context = jnp.stack([jnp.asarray(activity) / imax, jnp.asarray(samples) / dmax], -1)
    np.testing.assert_array_equal(
        chen_reference.grid_cell(activity, samples, g),
        np.asarray(grid_index(context.astype(jnp.float32), g)),
    )
