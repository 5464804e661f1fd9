"""The NumPy references of CS-UCB (`launch.xia_speed`) and CS-UCB-Q simulate the same model and
policies as the jitted runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np

import bandits
import fedjax_sel
from experiments.references import xia
from fedjax_sel.envs import wireless_latency


def test_numpy_baseline_matches_jitted_cs_ucb_in_distribution():
    rounds = 60
    rng = np.random.default_rng(0)
    ours = np.asarray(
        [xia.numpy_cs_ucb_trial(rng, rounds, 0.5)["cumulative_latency"] for _ in range(60)]
    )
    env = wireless_latency(20, 5, preset="calibrated")
    res = fedjax_sel.simulate(bandits.cs_ucb(20, 5), env, rounds, 256, progress=None)
    jitted = np.asarray(res.totals["policy"]["cumulative_latency"])
    se = math.sqrt(ours.var(ddof=1) / ours.size + jitted.var(ddof=1) / jitted.size)
    assert abs(ours.mean() - jitted.mean()) < 5 * se


def test_speed_script_runs_with_tiny_defaults():
    out = subprocess.run(
        [sys.executable, "-m", "launch.xia_speed", "--num_trials=2", "--num_rounds=10"],
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        capture_output=True,
        text=True,
        check=True,
    )
    numbers = json.loads(out.stdout.strip().splitlines()[-1])
    assert numbers["num_trials"] == 2 and numbers["numpy_extrapolated_s"] > 0


def test_numpy_cs_ucb_q_matches_jitted_cs_ucb_q_in_distribution():
    # Fig. 7's setting at N = 5 (fixed geometry, alpha = 0.9, beta = 0.01), 40 rounds: the
    # mean of each metric within 4 standard errors of the difference of the two means.
    rounds, numpy_trials, jax_trials = 40, 200, 256
    rng = np.random.default_rng(0)
    ours = [xia.numpy_trial_cs_ucb_q(rng, rounds) for _ in range(numpy_trials)]
    env = wireless_latency(20, 5, preset="literal", geometry_seed=0, availability=0.9)
    policy = bandits.cs_ucb_q(20, 5, xia.FAIRNESS, beta=0.01, availability=0.9)
    res = fedjax_sel.simulate(policy, env, rounds, jax_trials, seed=1, progress=None)
    for metric in xia.METRICS:
        numpy_side = np.asarray([trial[metric] for trial in ours])
        jitted = np.asarray(res.totals["policy"][metric])
        se = math.sqrt(numpy_side.var(ddof=1) / numpy_trials + jitted.var(ddof=1) / jax_trials)
        assert abs(numpy_side.mean() - jitted.mean()) < 4 * se, (
            metric,
            numpy_side.mean(),
            jitted.mean(),
            se,
        )
    # Both sides see failures at the literal deadline (about one client in 40 rounds).
    assert 0.2 < np.mean([trial["cumulative_failed"] for trial in ours]) < 1.0
