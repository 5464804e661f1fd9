"""The NumPy COCS of `launch.qu_speed` simulates the same model and policy as the jitted run."""

from __future__ import annotations

import math

import numpy as np

import bandits
import fedjax_sel
from experiments import reference
from fedjax_sel import envs


def test_numpy_cocs_matches_jitted_cocs_in_distribution():
    rounds = 30
    rng = np.random.default_rng(0)
    ours = np.asarray([reference.numpy_cocs_trial(rng, rounds) for _ in range(16)])
    res = fedjax_sel.simulate(bandits.cocs(50), envs.hierarchical(50), rounds, 64, progress=None)
    jitted = np.asarray(res.totals["policy"]["cumulative_reward"])
    se = math.sqrt(ours.var(ddof=1) / ours.size + jitted.var(ddof=1) / jitted.size)
    assert abs(ours.mean() - jitted.mean()) < 4 * se, (ours.mean(), jitted.mean(), se)
