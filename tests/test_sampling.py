"""Gamma and Beta draws of `ops.sampling` against SciPy's distributions (Kolmogorov-Smirnov
at fixed seeds) and against a plain loop of attempts, the same bits whatever the buffer of
the rejected attempts, and unchanged by `jax.vmap`."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from fedjax_sel.ops import sampling

SIZE = 20_000
# A KS p-value below this at a fixed seed fails: a correct sampler fails one seed in 10^4.
P_MIN = 1e-4


def _draw(fn, *shapes, spare=None, seed=0):
    args = [jnp.full((SIZE,), s, jnp.float32) for s in shapes]
    return np.asarray(
        jax.jit(fn, static_argnums=len(args) + 1)(jax.random.PRNGKey(seed), *args, spare),
        np.float64,
    )


@pytest.mark.parametrize("a", [1.0, 1.5, 7.0, 1e6])
@pytest.mark.parametrize("spare", [0, 100, None])
def test_gamma_matches_scipy_whatever_the_buffer(a, spare):
    # spare=0: the rejected go on in passes over all; 100 at a = 1: the buffer takes 100
    # of about 980 rejected, the passes the rest; None: the buffer takes them all.
    x = _draw(sampling.gamma, a, spare=spare)
    assert stats.kstest(x, stats.gamma(a).cdf).pvalue > P_MIN


def _first_accepted(key, attempt, params, compiler_options):
    """A rejection sampler as a plain loop: attempt i of element e from the hash of
    (i, e), until each element's first acceptance (the definition of `gamma` and
    `beta`)."""
    size = params[0].size

    @functools.partial(jax.jit, compiler_options=compiler_options)
    def attempt_i(i):
        words = sampling._word_pairs(jax.random.fold_in(key, i), size)
        return attempt(*words, *(p.reshape(-1) for p in params))

    value, done = np.zeros(size, np.float32), np.zeros(size, bool)
    i = 0
    while not done.all():
        value_i, accepted = map(np.asarray, attempt_i(i))
        first = accepted & ~done
        value[first], done = value_i[first], done | accepted
        i += 1
    return value.reshape(params[0].shape)


def _shapes(seed):
    """f32[2, 1000] of 1, 2 and 5."""
    return 1.0 + jnp.floor(3.0 * jax.random.uniform(jax.random.PRNGKey(seed), (2, 1000))) ** 2


# Each sampler, its attempt and the attempt's parameters from the sampler's arguments.
_SAMPLERS = {
    "gamma": (
        sampling.gamma,
        sampling._gamma_attempt,
        lambda a: (a - 1.0 / 3.0, jax.lax.rsqrt(9.0 * (a - 1.0 / 3.0))),
        (_shapes(12),),
    ),
    "beta": (
        sampling.beta,
        sampling._beta_attempt,
        lambda a, b: (a, b),
        # min(a, b) = 1 (the inverse CDF, either way round) and 2 to 1,000 (Cheng's BA).
        (_shapes(12), jnp.where(_shapes(13) == 5.0, 1000.0, _shapes(13))),
    ),
}


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
@pytest.mark.parametrize("name", list(_SAMPLERS))
def test_each_element_is_its_first_accepted_attempt(name, impl, xla_defaults):
    # The bulk attempt, the buffer (overflowing at spare = 1 and 40: 49 of the 2,000
    # first Gamma attempts and 125 of the 2,000 first Beta attempts are rejected here,
    # with the threefry key) and the passes after it make each element's attempts in the
    # order of the plain loop, from the same hashes: the same numbers whatever the
    # buffer, and the plain loop's up to the rounding of separately compiled arithmetic
    # (an element given another attempt's value would be off by its spread).
    sampler, attempt, params, args = _SAMPLERS[name]
    key = jax.random.key(11, impl=impl)
    draw = jax.jit(sampler, static_argnums=len(args) + 1, compiler_options=xla_defaults)
    drawn = {spare: np.asarray(draw(key, *args, spare)) for spare in (0, 1, 40, None)}
    for spare in (0, 1, 40):
        np.testing.assert_array_equal(drawn[spare], drawn[None])
    loop = _first_accepted(key, attempt, params(*args), xla_defaults)
    np.testing.assert_allclose(drawn[None], loop, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("spare", [-1, 2.0])
def test_a_bad_buffer_is_refused(spare):
    with pytest.raises(ValueError, match="spare must be None or an int >= 0"):
        sampling.gamma(jax.random.PRNGKey(0), jnp.ones(4), spare)


def test_parameters_outside_the_domain_give_nan_at_once():
    # No attempt of them could be accepted: the loop of attempts ran forever (a NaN
    # reward under jit hung Thompson sampling's sweep). The valid elements keep their
    # draws, bit for bit.
    key = jax.random.PRNGKey(3)
    bad = [jnp.nan, jnp.inf, 0.3, 0.0, -1.0]
    a = jnp.array([2.0, *bad, 1.0, 3.0])
    b = jnp.array([5.0, 4.0, 4.0, 4.0, 0.5, 4.0, 4.0, 1.0])
    for draw, args in (
        (jax.jit(sampling.gamma), (key, a)),
        (jax.jit(sampling.beta), (key, a, b)),
    ):
        got = np.asarray(draw(*args))
        assert np.all(np.isnan(got[1:6])) and np.all(np.isfinite(got[[0, 6, 7]])), got
    valid = jax.jit(sampling.beta)(key, a.at[1:6].set(2.0), b.at[4].set(4.0))
    np.testing.assert_array_equal(np.asarray(valid)[[0, 6, 7]], got[[0, 6, 7]])
    assert np.all(np.isnan(np.asarray(jax.jit(sampling.beta)(key, b, a))[[1, 2, 3, 4, 5]]))


@pytest.mark.parametrize(
    "a, b",
    [
        (1.0, 1.0),  # no observation: uniform (the inverse CDF)
        (1.0, 7.0),  # no success yet: the inverse CDF
        (7.0, 1.0),  # no failure yet: the inverse CDF the other way round
        (3.5, 2.0),  # fractional rewards
        (1.001, 50.0),  # just above 1: Cheng's BA accepts 0.7 of its attempts
        (2.0, 1e6),  # BA accepts 0.8 of its attempts
        (50.0, 50.0),
        (1.0, 1e6 + 1.0),  # a million failures, no success
        (1e6 + 1.0, 1e6 + 1.0),
    ],
)
def test_beta_matches_scipy(a, b):
    x = _draw(sampling.beta, a, b)
    assert stats.kstest(x, stats.beta(a, b).cdf).pvalue > P_MIN


def test_beta_near_one_has_the_right_mean_and_spread():
    # Beta(1e6 + 1, 1) lies within 1e-5 of 1, where float32's spacing (6e-8) rounds every
    # draw (as it does jax.random.beta's): its mean and standard deviation, to within
    # five standard errors of each and the rounding.
    a, b = 1e6 + 1.0, 1.0
    x = _draw(sampling.beta, a, b)
    dist = stats.beta(a, b)
    rounding = 2.0**-24
    assert abs(x.mean() - dist.mean()) < 5 * dist.std() / np.sqrt(SIZE) + rounding
    assert abs(x.std() - dist.std()) < 5 * dist.std() / np.sqrt(2 * SIZE) + rounding


def test_the_trials_of_a_batch_do_not_change_a_trials_draws(xla_defaults):
    # Each trial's draws come from its own key, and a batch's loop runs for as long as
    # its slowest trial's: in chunks of 1, 2 or 8 trials (as the runner chunks them), the
    # same bits, as compiled for users (the suite's faster compiling once rounded one
    # draw of trial 6 differently in a chunk of 1 or 2, by an ulp).
    keys = jax.random.split(jax.random.PRNGKey(3), 8)
    a = 1.0 + 3.0 * jax.random.uniform(jax.random.PRNGKey(4), (8, 50))
    b = 1.0 + jnp.arange(50.0) * jax.random.uniform(jax.random.PRNGKey(5), (8, 1))
    draw = jax.jit(
        jax.vmap(lambda k, a, b: sampling.beta(k, a, b, spare=4)), compiler_options=xla_defaults
    )
    whole = draw(keys, a, b)
    for chunk in (1, 2):
        parts = [
            draw(keys[i : i + chunk], a[i : i + chunk], b[i : i + chunk])
            for i in range(0, 8, chunk)
        ]
        np.testing.assert_array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("size, typed", [(7, False), (100_003, True)])
def test_draws_at_positions_are_the_draws_over_all_positions(size, typed):
    # JAX's uniform and normal draws over N, read at some positions: the same bits,
    # repeated and unsorted positions included.
    key = jax.random.key(5) if typed else jax.random.PRNGKey(5)
    index = jnp.asarray(np.random.default_rng(size).integers(0, size, 64), jnp.int32)
    np.testing.assert_array_equal(
        sampling.uniform_at(key, index, size), jax.random.uniform(key, (size,))[index]
    )
    np.testing.assert_array_equal(
        sampling.uniform_at(key, index, size, -2.0, 3.0),
        jax.random.uniform(key, (size,), minval=-2.0, maxval=3.0)[index],
    )
    np.testing.assert_array_equal(
        sampling.normal_at(key, index, size), jax.random.normal(key, (size,))[index]
    )


def test_draws_at_positions_with_another_prng_run_the_definition():
    key = jax.random.key(5, impl="rbg")
    index = jnp.array([3, 0, 9], jnp.int32)
    np.testing.assert_array_equal(
        sampling.uniform_at(key, index, 10), jax.random.uniform(key, (10,))[index]
    )
