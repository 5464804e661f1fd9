"""The exchange-time environment of Huang et al. (IEEE TPDS 2021), Sec. 6.1."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import envs
from fedjax_sel.types import Decision

N, M = 40, 8


def test_table_one_coefficients():
    theta = envs.true_coefficients(40, "2")
    np.testing.assert_array_equal(theta[:, 0], np.repeat([1.0, 2.0, 3.0, 4.0], 10))
    np.testing.assert_array_equal(theta[:, 1], 1.0)
    np.testing.assert_allclose(theta[::10, 2], 1.0 / np.log2([1001.0, 101.0, 11.0, 2.0]), rtol=1e-6)
    np.testing.assert_allclose(
        envs.true_coefficients(4, "e")[:, 2], 1.0 / np.log([1001.0, 101.0, 11.0, 2.0]), rtol=1e-6
    )


@pytest.fixture(scope="module")
def draws():
    """Contexts, availability and exchange times of 2000 independent rounds, with every
    other client selected in the previous round."""
    env = envs.exchange_time()
    previous = jnp.arange(N) % 2 == 0
    state = env.reset(jax.random.key(0))._replace(previous=previous)
    selected = jnp.arange(N) < 5

    @jax.jit
    @jax.vmap
    def one(key):
        k_obs, k_step = jax.random.split(key)
        inp = env.observe(state, 1, k_obs)
        feedback, new_state, stats = env.step(state, inp, Decision(selected), k_step)
        oracle = env.oracle(state, inp).selected
        return inp, feedback, new_state, stats, oracle

    return state, selected, one(jax.random.split(jax.random.key(1), 2000))


def test_contexts_follow_section_6_1(draws):
    state, _, (inp, _, _, _, _) = draws
    c = np.asarray(inp.context)
    assert c.shape == (2000, N, 3)
    assert c[..., 0].min() >= 0.5 and c[..., 0].max() <= 2.0  # 1 / mu, mu in [0.5, 2]
    assert c[..., 2].min() >= 5.0 and c[..., 2].max() <= 10.0  # 20 Mb / B, B in [2, 4] MHz
    # Cold-start reading: s = 1 exactly for the clients not selected in the last round.
    np.testing.assert_array_equal(
        c[..., 1], np.broadcast_to(~np.asarray(state.previous), (2000, N))
    )
    # E[1/mu] = ln 4 / 1.5 and E[20/B] = 10 ln 2 for the uniform draws (spec Sec. 5.1).
    sd = c[..., 0].std() / np.sqrt(c[..., 0].size)
    assert abs(c[..., 0].mean() - np.log(4.0) / 1.5) < 4 * sd
    sd = c[..., 2].std() / np.sqrt(c[..., 2].size)
    assert abs(c[..., 2].mean() - 10.0 * np.log(2.0)) < 4 * sd


def test_availability_is_bernoulli_0_8(draws):
    avail = np.asarray(draws[2][0].available)
    assert abs(avail.mean() - 0.8) < 4 * np.sqrt(0.16 / avail.size)


def test_exchange_times_and_round_time(draws):
    state, selected, (inp, feedback, new_state, stats, oracle) = draws
    expected = np.einsum("bnd,nd->bn", np.asarray(inp.context), np.asarray(state.coefficients))
    ratio = np.asarray(feedback.latency) / expected  # 2u with u ~ U(0, 1)
    assert ratio.min() >= 0.0 and ratio.max() < 2.0
    assert abs(ratio.mean() - 1.0) < 4 * np.sqrt(1.0 / 3.0 / ratio.size)
    sel = np.asarray(selected)
    np.testing.assert_array_equal(stats.latency, np.asarray(feedback.latency)[:, sel].max(1))
    # Five clients where min(m, |A|) > 5 slots could be filled: the empty slots count as
    # the slowest available client (envs.cohort), in the expected and realised reward.
    avail = np.asarray(inp.available)
    short = np.minimum(avail.sum(1), M) > sel.sum()
    charged = sel | (short[:, None] & avail)
    assert short.mean() > 0.99
    np.testing.assert_allclose(
        stats.expected_reward, -np.where(charged, expected, 0.0).max(1), rtol=1e-6
    )
    tau = np.asarray(feedback.latency)
    np.testing.assert_allclose(stats.reward, -np.where(charged, tau, 0.0).max(1), rtol=1e-6)
    # The oracle: the min(m, available) available clients of smallest expected time.
    masked = np.where(avail, expected, np.inf)
    kth = np.sort(masked, axis=1)[:, M - 1 : M]
    np.testing.assert_array_equal(oracle, avail & (masked <= kth))
    np.testing.assert_array_equal(new_state.previous, np.broadcast_to(sel, (2000, N)))
    # Queues (eq. 6) from zero: beta for the unselected, 0 for the selected.
    np.testing.assert_allclose(new_state.queue[0], np.where(sel, 0.0, 0.15), atol=1e-7)


def test_participated_reading_and_empty_round():
    env = envs.exchange_time(
        cold_start="participated", num_clients=8, num_selected=2, fairness_rate=0.1
    )
    state = env.reset(jax.random.key(0))
    inp = env.observe(state, 1, jax.random.key(1))
    np.testing.assert_array_equal(inp.context[:, 1], 0.0)  # nobody trained before round 1
    nobody = Decision(jnp.zeros((8,), bool))
    _, state, stats = env.step(state, inp, nobody, jax.random.key(2))
    assert float(stats.latency) == 0.0
    chosen = Decision(jnp.arange(8) < 3)
    _, state, _ = env.step(
        state, env.observe(state, 2, jax.random.key(3)), chosen, jax.random.key(4)
    )
    np.testing.assert_array_equal(
        env.observe(state, 3, jax.random.key(5)).context[:, 1],
        (jnp.arange(8) < 3).astype(jnp.float32),
    )
