"""`experiments.tong_trials.run_trials`: the same numbers whatever its chunks and devices,
and no compiling for another number of trials."""

import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np

import bandits
from experiments.tong_trials import run_trials
from fedjax_sel import envs

ROOT = str(pathlib.Path(__file__).resolve().parents[1])


def test_run_trials_gives_the_same_numbers_whatever_the_chunks_and_devices():
    # Trial m's draws come from the seed and m; each device sums its block of a chunk
    # along the fixed tree of the runner: 5 trials at once, one by one, in pairs, and on
    # two devices (blocks of 2, the least, and 4; the last trials padding), the same bits.
    script = textwrap.dedent(
        """
        import jax, numpy as np, bandits
        from fedjax_sel import envs
        from experiments.tong_trials import run_trials
        env, sel = envs.opinion_surrogate(6, 2), bandits.quick_init_ucb(6, 2)
        run = lambda chunk, devices: run_trials(sel, env, 7, 5, seed=2, targets=(0.7,),
                                                trials_per_chunk=chunk, devices=devices)
        one = jax.devices()[:1]
        a = run(8, one)
        for b in (run(1, one), run(2, one), run(2, jax.devices()), run(None, jax.devices())):
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
                np.testing.assert_array_equal(x, y)
        assert a.counts.shape == (5, 6) and a.accuracy.shape == (7,)
        print("OK")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_another_number_of_trials_compiles_nothing(nothing_traced):
    # The number of trials is an argument of the compiled chunk (which trials count), not
    # of its shape: 7 trials after 5, in the same chunk of 8, trace and compile nothing,
    # and trial m's numbers do not depend on how many there are.
    env, sel = envs.opinion_surrogate(6, 2), bandits.quick_init_ucb(6, 2)
    five = run_trials(sel, env, 4, 5, seed=3, trials_per_chunk=8)
    with nothing_traced():
        seven = run_trials(sel, env, 4, 7, seed=3, trials_per_chunk=8)
    np.testing.assert_array_equal(seven.counts[:5], five.counts)
