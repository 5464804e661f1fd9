"""The selection kernels compile to neither a sort nor XLA's TopK, and stay exact."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bandits import kernels

N, K, B = 16, 4, 64


def _hlo(fn, *args):
    return jax.jit(jax.vmap(fn)).lower(*args).compile().as_text()


@pytest.mark.parametrize("name", ["masked_top_k", "uniform_subset", "gumbel_top_k", "top_k_mask"])
def test_no_sort_in_compiled_kernel(name):
    scores = jnp.zeros((B, N))
    mask = jnp.ones((B, N), bool)
    keys = jax.random.split(jax.random.PRNGKey(0), B)
    fn = {
        "masked_top_k": lambda s, m, k: kernels.masked_top_k(s, m, K, k),
        "uniform_subset": lambda s, m, k: kernels.uniform_subset(m, K, k),
        "gumbel_top_k": lambda s, m, k: kernels.gumbel_top_k(s, m, K, k),
        "top_k_mask": lambda s, m, k: kernels.top_k_mask(s, m, K),
    }[name]
    text = _hlo(fn, scores, mask, keys)
    assert " sort(" not in text
    assert "topk" not in text.lower()


def test_masked_top_k_matches_brute_force():
    # Scores on a small grid (many ties, some +-inf), random masks: against a plain loop,
    # the selection holds every client strictly above the k-th masked score, and the
    # right number of the tied ones.
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 3, (B, N)).astype(np.float32)
    scores[rng.random((B, N)) < 0.1] = np.inf
    scores[rng.random((B, N)) < 0.1] = -np.inf
    mask = rng.random((B, N)) < rng.random((B, 1))
    keys = jax.random.split(jax.random.PRNGKey(1), B)
    got = np.asarray(
        jax.jit(jax.vmap(lambda s, m, k: kernels.masked_top_k(s, m, K, k)))(scores, mask, keys)
    )
    for b in range(B):
        eligible = [i for i in range(N) if mask[b, i]]
        ranked = sorted((scores[b, i] for i in eligible), reverse=True)
        take = min(K, len(eligible))
        assert got[b].sum() == take and not np.any(got[b] & ~mask[b])
        if take == 0:
            continue
        kth = ranked[take - 1]
        above = [i for i in eligible if scores[b, i] > kth]
        tied = [i for i in eligible if scores[b, i] == kth]
        assert all(got[b, i] for i in above)
        assert sum(got[b, i] for i in tied) == take - len(above)


def test_tie_break_is_uniform():
    # Four tied clients, two slots: each of the 6 pairs with probability 1/6.
    draws = 3000
    keys = jax.random.split(jax.random.PRNGKey(2), draws)
    mask = jnp.ones(4, bool)
    got = np.asarray(
        jax.jit(jax.vmap(lambda k: kernels.masked_top_k(jnp.ones(4), mask, 2, k)))(keys)
    )
    pairs = list(itertools.combinations(range(4), 2))
    counts = np.array([np.sum(got[:, i] & got[:, j]) for i, j in pairs])
    assert counts.sum() == draws
    tolerance = 4 * np.sqrt(draws * (1 / 6) * (5 / 6))
    np.testing.assert_array_less(np.abs(counts - draws / 6), tolerance)
