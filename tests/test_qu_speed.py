"""The NumPy COCS of `launch.qu_speed` simulates the same model and policy as the jitted run."""

from __future__ import annotations

import math

import numpy as np

import bandits
import fedjax_sel
from experiments.references import qu
from fedjax_sel import envs


def test_numpy_cocs_matches_jitted_cocs_in_distribution():
    # Utility and pseudo-regret per trial, means within 4 standard errors of their
    # difference (the two draw from different streams).
    rounds = 30
    rng = np.random.default_rng(0)
    ours = np.asarray([qu.numpy_cocs_trial(rng, rounds) for _ in range(16)])
    res = fedjax_sel.simulate(bandits.cocs(50), envs.hierarchical(50), rounds, 64, progress=None)
    for column, total in enumerate(("cumulative_reward", "cumulative_regret")):
        numpy_side = ours[:, column]
        jitted = np.asarray(res.totals["policy"][total])
        se = math.sqrt(numpy_side.var(ddof=1) / numpy_side.size + jitted.var(ddof=1) / jitted.size)
        assert abs(numpy_side.mean() - jitted.mean()) < 4 * se, (
            total,
            numpy_side.mean(),
            jitted.mean(),
            se,
        )
    # The regret is not a copy of the utility: COCS's is about a tenth of it here.
    assert 0.02 < ours[:, 1].mean() / ours[:, 0].mean() < 0.5
