"""Double-f32 arithmetic (`fedjax_sel.ops.double`) against float64, and the runner's moments
at long horizons."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import bandits
import fedjax_sel
from fedjax_sel import envs
from fedjax_sel.ops import double
from fedjax_sel.runner import reduction


def _values(seed, size, scale=1e4):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(size) * scale * rng.uniform(0.0, 1.0, size)).astype(np.float32)


def test_two_sum_is_exact():
    a, b = _values(0, 10_000), _values(1, 10_000, 1e-3)
    s, e = jax.jit(double.two_sum)(a, b)
    np.testing.assert_array_equal(
        np.asarray(s, np.float64) + np.asarray(e, np.float64),
        a.astype(np.float64) + b.astype(np.float64),
    )


def test_from_int32_is_exact():
    # Integers past 2^24, where f32 alone rounds, up to the 2^30 bound, both signs.
    x = np.array([0, 1, -7, 2**24 + 1, 2**29 + 12345, -(2**30 - 1)], np.int32)
    got = np.asarray(jax.jit(double.from_int32)(x))
    assert got.shape == (6, 2)
    np.testing.assert_array_equal(double.to_float64(got), x.astype(np.float64))


def test_sum_int27_is_exact_where_an_int32_sum_wraps():
    # Sums of up to 2^20 terms in [0, 2^27), up to about 2^47: float64 holds them exactly.
    rng = np.random.default_rng(0)
    for size, high in [(1, 2**27), (1000, 2**27), (2**20, 2**27), (2**20, 2), (7, 512)]:
        x = rng.integers(0, high, size, dtype=np.int64).astype(np.int32)
        got = double.to_float64(np.asarray(jax.jit(double.sum_int27)(x)))
        assert got == float(x.astype(np.int64).sum()), (size, high)
    x = np.full(2**20, 2**27 - 1, np.int32)
    assert double.to_float64(np.asarray(double.sum_int27(x))) == 2**20 * (2**27 - 1)
    assert int(jnp.sum(jnp.asarray(x))) != 2**20 * (2**27 - 1)  # what int32 made of it


def test_square_is_exact_to_2_pow_minus_46():
    x = _values(2, 10_000)
    # A double-f32 number with a low part: x + x / 3 rounded, and its f32 error.
    y = jnp.stack(double.two_sum(x, x / np.float32(3.0)), -1)
    exact = double.to_float64(np.asarray(y)) ** 2
    got = double.to_float64(np.asarray(jax.jit(double.square)(y)))
    assert np.max(np.abs(got - exact) / exact) < 2.0**-46


def test_add_on_the_host_equals_add_on_device_bit_for_bit():
    x = np.stack([_values(3, 1000), _values(4, 1000, 1e-4)], -1)
    y = np.stack([_values(5, 1000), _values(6, 1000, 1e-4)], -1)
    np.testing.assert_array_equal(double.add(x, y), np.asarray(jax.jit(double.add)(x, y)))


def test_a_running_sum_of_1e5_rounds_does_not_drift():
    """The per-trial running sums: a plain f32 sum of 1e5 values drifts by about 1e-4
    relative, the double-f32 sum stays within 2^-40 of the float64 sum."""
    x = _values(7, 100_000, 1.0) + np.float32(0.3)

    def run(step, init):
        return lax.scan(lambda c, v: (step(c, v), None), init, x)[0]

    plain = run(lambda c, v: c + v, jnp.float32(0.0))
    compensated = run(lambda c, v: double.add(c, double.from_f32(v)), jnp.zeros(2))
    exact = x.astype(np.float64).sum()
    assert abs(float(plain) - exact) / exact > 1e-6  # the drift is real
    assert abs(double.to_float64(np.asarray(compensated)) - exact) / exact < 2.0**-40


def test_moments_survive_a_mean_far_larger_than_the_spread():
    """std/mean = 1e-4: f32 moments would give 0 or noise; these match float64 to the
    bound of `runner.reduction`, (mean/std)^2 2^-48 ~ 4e-7 relative."""
    x = (1e4 + np.random.default_rng(8).standard_normal(1000)).astype(np.float32)
    sums = np.asarray(
        jax.jit(lambda v: reduction.tree_sum(double.moments(v), double.add))(
            jnp.stack([x, jnp.zeros_like(x)], -1)
        )
    )
    mean, std = reduction.mean_and_std(sums, x.size)
    np.testing.assert_allclose(mean, x.astype(np.float64).mean(), rtol=1e-12)
    np.testing.assert_allclose(std, x.astype(np.float64).std(), rtol=1e-6)


def test_curve_std_at_a_long_horizon_equals_the_totals_std(optimized):
    """`random` on fixed Bernoulli means at T = 1e5: the curve's std at T is the per-trial
    totals' std (it was 0.000 with f32 moments of 12-bit squares, against 222.8)."""
    env = envs.bernoulli(5, 2, means=[0.1, 0.3, 0.5, 0.7, 0.9])
    res = fedjax_sel.simulate(
        {"random": bandits.random(5, 2)}, env, num_rounds=100_000, num_trials=64, progress=None
    )
    for metric in ("cumulative_reward", "cumulative_regret"):
        totals = res.totals["random"][metric]
        curve = res.curves["random"][metric]
        assert totals.std() > 10.0
        np.testing.assert_allclose(curve["std"][-1], totals.std(), rtol=1e-6)
        np.testing.assert_allclose(curve["mean"][-1], totals.mean(), rtol=1e-12)
