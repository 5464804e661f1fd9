"""The NumPy references of `launch.beyond_speed` simulate the same model and policies as the
jitted run: Oort and pow-d on `envs.devices`, compared in distribution."""

from __future__ import annotations

import math

import numpy as np
import pytest

import bandits
import fedjax_sel
from experiments.references import beyond
from fedjax_sel import envs

# 200 clients keep unexplored ones available to Oort through the 12 rounds (its exploration
# list is never stale: tests/test_oort.py covers the stale list's rejoining).
N, M, K, T = 200, 13, 10, 12
JAX_TRIALS, NUMPY_TRIALS = 256, 128


@pytest.mark.parametrize("policy", beyond.POLICIES)
def test_numpy_reference_matches_jitted_policy_in_distribution(policy):
    env = envs.make("devices", N, M, num_kept=K)
    res = fedjax_sel.simulate(bandits.make(policy, N, M), env, T, JAX_TRIALS, progress=None)
    loss = res.curves["policy"]["loss"]
    jax_loss, jax_loss_std = float(loss["mean"][-1]), float(loss["std"][-1])
    jax_clock = np.asarray(res.totals["policy"]["cumulative_latency"])

    rng = np.random.default_rng(0)
    runs = [beyond.trial(rng, policy, N, M, K, T) for _ in range(NUMPY_TRIALS)]
    numpy_loss = np.asarray([losses[-1] for losses, _ in runs])
    numpy_clock = np.asarray([clock for _, clock in runs])

    # 4 standard errors of the difference of two independent means.
    se = math.sqrt(jax_loss_std**2 / JAX_TRIALS + numpy_loss.var(ddof=1) / NUMPY_TRIALS)
    assert abs(jax_loss - numpy_loss.mean()) < 4 * se, (jax_loss, numpy_loss.mean(), se)
    se = math.sqrt(jax_clock.var(ddof=1) / JAX_TRIALS + numpy_clock.var(ddof=1) / NUMPY_TRIALS)
    assert abs(jax_clock.mean() - numpy_clock.mean()) < 4 * se, (
        jax_clock.mean(),
        numpy_clock.mean(),
        se,
    )


def test_reference_losses_fall_and_refuse_unknown_policies():
    rng = np.random.default_rng(1)
    for policy in beyond.POLICIES:
        losses, clock = beyond.trial(rng, policy, 50, 13, 10, 5)
        assert losses.shape == (5,) and np.all(np.diff(losses) <= 0) and clock > 0
    with pytest.raises(ValueError, match="policy"):
        beyond.trial(rng, "random", 50, 13, 10, 5)
