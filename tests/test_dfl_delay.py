"""The edge-server DFL delay environment (Chen et al., 2025, Secs. 3.2 and 7.1)."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs
from fedjax_sel.envs.dfl_delay import (
    DelayParams,
    DFLDelayState,
    DFLRound,
    client_delays,
    path_gain_from_distance,
)
from fedjax_sel.types import Decision


def test_client_delay_hand_worked():
    # SNR 1 on the uplink (log2 2 = 1) and 3 on the downlink (log2 4 = 2), m / B = 1 s:
    # upload 1 s, download 0.5 s; compute s D (1 + I) / phi = 1e6 * 100 * 5 / 1e9 = 0.5 s.
    params = DelayParams(1e6, 1e6, 1.0, 3.0, 1.0, 1e9, 1.5)
    state = DFLDelayState(jnp.ones(2), jnp.full(2, 1e6), jax.random.PRNGKey(0))
    info = DFLRound(jnp.array([4, 0]), jnp.array([100, 100]))
    raw, capped = client_delays(params, state, info, jnp.ones(2), jnp.ones(2))
    np.testing.assert_allclose(raw, [2.0, 1.6], rtol=1e-6)
    np.testing.assert_allclose(capped, [1.5, 1.5], rtol=1e-6)


def test_path_loss_hand_worked():
    # PL = 128.1 dB at 1 km and 128.1 - 37.6 = 90.5 dB at 100 m.
    got = path_gain_from_distance(jnp.array([1000.0, 100.0]))
    np.testing.assert_allclose(got, [10**-12.81, 10**-9.05], rtol=1e-5)


def _numpy_delays(rng, path_gain, cycles, num_rounds, model_bits, noise_w, tau_max):
    """An independent NumPy sampler of eqs. (6)-(11) with the Sec. 7.1 constants."""
    k = path_gain.size
    activity = rng.integers(0, 11, (num_rounds, k))
    samples = rng.integers(1, 3334, (num_rounds, k))
    up, down = rng.exponential(size=(2, num_rounds, k))
    rate_up = np.log2(1 + 0.01 * path_gain * up / noise_w)
    rate_down = np.log2(1 + 1.0 * path_gain * down / noise_w)
    comm = model_bits / 1e6 / rate_up + model_bits / 1e6 / rate_down
    return np.minimum(comm + cycles * samples * (1 + activity) / 2e11, tau_max)


@pytest.mark.parametrize(
    "kwargs, noise_dbm",
    [
        (dict(), -113.0),  # the Sec. 7.1 setting: -173 dBm/Hz over 1 MHz
        # m read as kbit in a 20 km area: communication dominates and the cap binds.
        (dict(model_bits=5e6, area_m=20000.0, tau_max=3.0), -113.0),
        (dict(model_bits=5e6, area_m=20000.0, noise_mode="literal"), -173.0),
    ],
)
def test_delay_distribution_matches_numpy(kwargs, noise_dbm):
    env = envs.dfl_delay(6, 1, num_servers=2, **kwargs)
    state = env.reset(jax.random.PRNGKey(3))
    everyone = Decision(jnp.ones(6, bool))
    num_rounds = 3000

    @jax.jit
    def delays(t):
        inp = env.observe(state, t, jax.random.fold_in(jax.random.PRNGKey(4), t))
        fb, _, stats = env.step(state, inp, everyone, jax.random.PRNGKey(0))
        return fb.latency, stats.latency

    ours, round_delay = jax.vmap(delays)(jnp.arange(1, num_rounds + 1))
    ours, round_delay = np.asarray(ours), np.asarray(round_delay)
    np.testing.assert_allclose(round_delay, ours.max(1))  # eq. (12)
    tau_max = kwargs.get("tau_max", 5.0)
    ref = _numpy_delays(
        np.random.default_rng(0),
        np.asarray(state.path_gain, np.float64),
        np.asarray(state.cycles_per_sample, np.float64),
        num_rounds,
        kwargs.get("model_bits", 5e3),
        10 ** ((noise_dbm - 30) / 10),
        tau_max,
    )
    # Two-sample Kolmogorov-Smirnov per client at level 1e-4 (c = 2.15), both n = 3000.
    critical = 2.15 * np.sqrt(2 / num_rounds)
    grid = np.linspace(0, tau_max, 2001)
    for k in range(6):
        cdf = lambda x: np.searchsorted(np.sort(x), grid, side="right") / num_rounds
        assert np.max(np.abs(cdf(ours[:, k]) - cdf(ref[:, k]))) < critical, k
        assert np.mean(ours[:, k] == tau_max) == pytest.approx(
            np.mean(ref[:, k] == tau_max), abs=0.04
        )


@functools.partial(jax.jit, static_argnums=0)
def _oracle_and_every_schedule(env, state, every, t):
    """Round t's oracle decision, its statistics, and the statistics of every schedule
    (rows of `every`), under the same draws."""
    inp = env.observe(state, t, jax.random.fold_in(jax.random.PRNGKey(10), t))
    best = env.oracle(state, inp)
    step = lambda sel: env.step(state, inp, Decision(sel), jax.random.PRNGKey(0))[2]
    return best, step(best.selected), jax.vmap(step)(jnp.asarray(every))


def test_oracle_is_the_brute_force_best_per_server_schedule():
    env = envs.dfl_delay(8, 2, num_servers=2, model_bits=5e6, area_m=5000.0)
    state = env.reset(jax.random.PRNGKey(1))
    pairs = list(itertools.combinations(range(4), 2))
    every = np.zeros((len(pairs) ** 2, 8), bool)
    for i, (a, b) in enumerate(itertools.product(pairs, pairs)):
        every[i, list(a)] = True
        every[i, [4 + j for j in b]] = True

    for t in range(1, 6):
        best, stats, all_stats = _oracle_and_every_schedule(env, state, every, t)
        assert np.sum(best.selected[:4]) == 2 and np.sum(best.selected[4:]) == 2
        np.testing.assert_array_equal(
            best.assignment, np.where(best.selected, [0] * 4 + [1] * 4, -1)
        )
        assert float(stats.latency) == pytest.approx(float(np.min(all_stats.latency)))
        assert float(stats.oracle_reward) == -float(stats.latency)
        # Realised reference: regret = delay - the oracle's delay, reward = -delay.
        np.testing.assert_allclose(
            all_stats.oracle_reward - all_stats.expected_reward,
            all_stats.latency - stats.latency,
            rtol=1e-6,
        )
        np.testing.assert_array_equal(all_stats.reward, -all_stats.latency)


def test_expected_reference_uses_mean_channel_gain():
    env = envs.dfl_delay(6, 1, num_servers=2, regret_reference="expected", model_bits=5e6)
    state = env.reset(jax.random.PRNGKey(2))
    inp = env.observe(state, 3, jax.random.PRNGKey(5))
    params = DelayParams(5e6, 1e6, 0.01, 1.0, 10 ** ((-113 - 30) / 10), 2e11, 5.0)
    mean_delay = np.asarray(client_delays(params, state, inp.info, jnp.ones(6), jnp.ones(6))[1])
    best = np.asarray(env.oracle(state, inp).selected)
    np.testing.assert_array_equal(
        np.flatnonzero(best), [np.argmin(mean_delay[:3]), 3 + np.argmin(mean_delay[3:])]
    )
    sel = jnp.array([True, False, False, False, False, True])
    _, _, stats = env.step(state, inp, Decision(sel), jax.random.PRNGKey(0))
    assert float(stats.expected_reward) == pytest.approx(-max(mean_delay[0], mean_delay[5]))
    assert float(stats.oracle_reward) == pytest.approx(-mean_delay[best].max())


def test_contexts_are_the_normalised_features():
    env = envs.make("dfl_delay", 18, 2)
    state = env.reset(jax.random.PRNGKey(0))
    inp = env.observe(state, 1, jax.random.PRNGKey(1))
    np.testing.assert_allclose(inp.context[:, 0], inp.info.activity / 10, rtol=1e-6)
    np.testing.assert_allclose(inp.context[:, 1], inp.info.num_samples / 3333, rtol=1e-6)
    assert inp.context.shape == (18, 2) and bool(jnp.all(inp.available))


def test_availability_takes_a_key_no_context_draw_uses():
    # The contexts of a round are those of an always-available run, and the availability
    # bits are not the uniforms of the key that draws the data sizes (fold_in(key, 1),
    # which it took, is that key: split(key)[1]).
    full = envs.make("dfl_delay", 18, 2)
    half = envs.make("dfl_delay", 18, 2, availability=0.5)
    state = half.reset(jax.random.PRNGKey(0))
    same_key_draws = []
    for t in range(1, 21):
        key = jax.random.PRNGKey(t)
        inp = half.observe(state, t, key)
        np.testing.assert_array_equal(inp.context, full.observe(state, t, key).context)
        data_key = jax.random.split(key)[1]
        same_key_draws.append(
            np.array_equal(inp.available, jax.random.uniform(data_key, (18,)) < 0.5)
        )
    assert not any(same_key_draws)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_selected=7), "num_selected"),
        (dict(num_selected=0), "num_selected"),
        (dict(num_servers=4), "num_servers"),
        (dict(tau_max=0.0), "tau_max"),
        (dict(tau_max=-1.0), "tau_max"),
        (dict(bandwidth_hz=0.0), "bandwidth_hz"),
        (dict(bandwidth_hz=-1e6), "bandwidth_hz"),
        (dict(model_bits=0.0), "model_bits"),
        (dict(noise_mode="psd"), "noise_mode"),
        (dict(regret_reference="best"), "regret_reference"),
        (dict(cycles_per_sample_range=(3e7, 1e7)), "cycles_per_sample_range"),
        (dict(shard_size=0), "shard_size"),
    ],
)
def test_env_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        envs.dfl_delay(**{"num_clients": 18, "num_selected": 2, **kwargs})


def test_unequal_cells_oracle_is_the_brute_force_best_schedule():
    # Cells of 1, 3 and 4 clients, N = 2: the 1-client cell schedules its client, the
    # others any 2 of theirs: 1 x 3 x 6 schedules.
    sizes = (1, 3, 4)
    env = envs.dfl_delay(8, 2, num_servers=3, cell_sizes=sizes, model_bits=5e6, area_m=5000.0)
    state = env.reset(jax.random.PRNGKey(4))
    every = []
    for a in itertools.combinations(range(1, 4), 2):
        for b in itertools.combinations(range(4, 8), 2):
            row = np.zeros(8, bool)
            row[[0, *a, *b]] = True
            every.append(row)
    server = np.repeat(np.arange(3), sizes)

    for t in range(1, 6):
        best, stats, all_stats = _oracle_and_every_schedule(env, state, every, t)
        np.testing.assert_array_equal(np.bincount(server[best.selected], minlength=3), [1, 2, 2])
        np.testing.assert_array_equal(best.assignment, np.where(best.selected, server, -1))
        assert float(stats.latency) == pytest.approx(float(np.min(all_stats.latency)))
    inp = env.observe(state, 1, jax.random.PRNGKey(0))
    three = jnp.array([True, False, False, False, True, True, True, False])
    assert not bool(env.feasible(state, inp, Decision(three)))
    assert bool(env.feasible(state, inp, Decision(jnp.asarray(every[0]))))
