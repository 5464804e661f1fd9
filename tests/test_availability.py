"""Availability processes: their laws, and environments that take or wear them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs
from fedjax_sel.envs import availability


def _draws(process, rounds, trials=2000):
    """bool[trials, rounds, N] of a process run the way environments run it."""

    def trial(key):
        state = process.init(key, process.params)

        def round_(state, t):
            available = process.sample(state, t, jax.random.fold_in(key, t), process.params)
            return process.update(state, available, process.params), available

        return jax.lax.scan(round_, state, jnp.arange(1, rounds + 1))[1]

    return np.asarray(jax.jit(jax.vmap(trial))(jax.random.split(jax.random.PRNGKey(0), trials)))


def test_bernoulli_draws_as_the_environments_did():
    process = availability.bernoulli([0.2, 0.9])
    key = jax.random.PRNGKey(4)
    got = process.sample(None, 1, key, process.params)
    np.testing.assert_array_equal(got, jax.random.uniform(key, (2,)) < jnp.asarray([0.2, 0.9]))


def test_markov_is_stationary_and_sticky():
    on, off = np.array([0.1, 0.5]), np.array([0.3, 0.5])
    a = _draws(availability.markov(on, off), rounds=6)
    np.testing.assert_allclose(a.mean(axis=(0, 1)), on / (on + off), atol=0.02)
    # P(on at t+1 | on at t) = 1 - turn_off.
    stay = (a[:, 1:] & a[:, :-1]).sum(axis=(0, 1)) / a[:, :-1].sum(axis=(0, 1))
    np.testing.assert_allclose(stay, 1.0 - off, atol=0.03)


def test_trace_replays_cycling():
    recorded = np.array([[1, 0, 1], [0, 0, 1]], bool)
    a = _draws(availability.trace(recorded), rounds=5, trials=1)[0]
    np.testing.assert_array_equal(a, recorded[[0, 1, 0, 1, 0]])


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: availability.markov(0.5, 1.5, 3), "turn_off"),
        (lambda: availability.markov(0.5, 0.5), "num_clients"),
        (lambda: availability.trace(np.ones((2, 3))), "trace"),
        # was: "num_clients is required when every probability is a scalar"
        (lambda: availability.bernoulli(np.full((2, 2), 0.5)), r"probability .* shape \(2, 2\)"),
        (lambda: availability.markov(0.5, np.full((2, 2), 0.5), 4), r"turn_off .* shape"),
        (lambda: envs.bernoulli(4, 2, availability=availability.bernoulli(0.5, 3)), "3"),
    ],
)
def test_bad_processes_are_refused(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_environments_take_a_process_and_report_what_the_server_saw():
    recorded = np.eye(6, dtype=bool)[:, ::-1] | np.eye(6, dtype=bool)
    env = envs.exchange_time(6, 2, availability=availability.trace(recorded))
    state = env.reset(jax.random.PRNGKey(0))
    for t in range(1, 4):
        inp = env.observe(state, t, jax.random.PRNGKey(t))
        np.testing.assert_array_equal(inp.available, recorded[t - 1])
        decision = env.oracle(state, inp)
        assert set(np.flatnonzero(decision.selected)) <= set(np.flatnonzero(recorded[t - 1]))
        _, state, _ = env.step(state, inp, decision, jax.random.PRNGKey(10 + t))


def test_fixed_geometry_resets_without_a_key():
    env = envs.wireless_latency(5, 2, geometry_seed=0)
    assert env.reset(None).means.shape == (5,)


def test_an_availability_of_one_is_the_always_process_with_nothing_to_draw():
    process = availability.resolve(1.0, 5)
    assert process.params == availability.AlwaysParams() and not jax.tree.leaves(process.params)
    np.testing.assert_array_equal(process.sample(None, 3, None, process.params), np.ones(5, bool))
    assert availability.resolve(np.ones(5), 5).params == availability.AlwaysParams()
    # Below 1 anywhere, a Bernoulli draw with its probabilities as parameters.
    p = np.array([1.0, 1.0, 0.5, 1.0, 1.0], np.float32)
    np.testing.assert_array_equal(availability.resolve(p, 5).params.probability, p)
    # A Bernoulli draw at probability 1 gives the same clients, all of them.
    draw = availability.bernoulli(1.0, 5)
    np.testing.assert_array_equal(
        draw.sample(None, 1, jax.random.PRNGKey(0), draw.params), np.ones(5, bool)
    )
