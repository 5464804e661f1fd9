"""The NumPy baseline of `launch.xia_speed` simulates the same model as the jitted run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np

import bandits
import fedjax_sel
from experiments import reference
from fedjax_sel.envs import wireless_latency


def test_numpy_baseline_matches_jitted_cs_ucb_in_distribution():
    rounds = 60
    rng = np.random.default_rng(0)
    ours = np.asarray([reference.numpy_cs_ucb_trial(rng, rounds, 0.5) for _ in range(60)])
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
