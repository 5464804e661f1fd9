"""Per-group (per edge server) selection ops against a plain loop over groups."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import ops


def test_grouped_ops_equal_a_loop_over_groups():
    num_groups, size, k = 3, 5, 2
    key = jax.random.PRNGKey(7)
    scores = jax.random.normal(jax.random.PRNGKey(0), (num_groups * size,))
    scores = scores.at[3].set(scores[1])  # a tie inside group 0
    mask = jnp.arange(num_groups * size) != 11  # group 2 has 4 eligible clients
    keys = jax.random.split(key, num_groups)
    blocks = lambda x: x.reshape(num_groups, size)
    s, m = blocks(scores), blocks(mask)
    groups = range(num_groups)
    loop_top = np.concatenate([ops.masked_top_k(s[g], m[g], k, keys[g]) for g in groups])
    loop_sub = np.concatenate([ops.uniform_subset(m[g], k, keys[g]) for g in groups])
    loop_det = np.concatenate([ops.top_k_mask(s[g], m[g], k) for g in groups])
    np.testing.assert_array_equal(
        ops.grouped_masked_top_k(scores, mask, k, key, num_groups), loop_top
    )
    np.testing.assert_array_equal(ops.grouped_uniform_subset(mask, k, key, num_groups), loop_sub)
    np.testing.assert_array_equal(ops.grouped_top_k_mask(scores, mask, k, num_groups), loop_det)
    for chosen in (loop_top, loop_sub, loop_det):
        np.testing.assert_array_equal(blocks(jnp.asarray(chosen)).sum(1), [k] * num_groups)
        assert not chosen[11]


def test_grouped_uniform_subset_is_uniform_within_each_group():
    # 4 groups of 4 clients, 1 of each group ineligible, k = 2: each eligible client is
    # picked with probability 2/3; 3000 draws give a standard error of 0.0086.
    mask = jnp.tile(jnp.array([True, True, False, True]), 4)
    draws = jax.vmap(lambda key: ops.grouped_uniform_subset(mask, 2, key, 4))(
        jax.random.split(jax.random.PRNGKey(0), 3000)
    )
    freq = np.asarray(draws).mean(0)
    np.testing.assert_allclose(freq[np.asarray(mask)], 2 / 3, atol=4 * np.sqrt(2 / 9 / 3000))
    np.testing.assert_array_equal(freq[~np.asarray(mask)], 0.0)


def test_unequal_groups_equal_a_loop_over_padded_groups():
    # Groups of 2, 5 and 3 clients, padded to 5: each group's op runs on its slice padded
    # with ineligible slots, with the group's own key.
    sizes, k = (2, 5, 3), 3
    key = jax.random.PRNGKey(3)
    scores = jax.random.normal(jax.random.PRNGKey(1), (10,))
    scores = scores.at[4].set(scores[5])  # a tie inside group 1
    mask = jnp.arange(10) != 8
    keys = jax.random.split(key, 3)
    starts = np.cumsum(sizes) - np.array(sizes)

    def loop(op, *arrays):
        out = []
        for g, (start, size) in enumerate(zip(starts, sizes, strict=True)):
            cut = slice(start, start + size)
            padded = [jnp.concatenate([a[cut], jnp.zeros(5 - size)]) for a in arrays]
            valid = jnp.concatenate([mask[cut], jnp.zeros(5 - size, bool)])
            out.append(op(*padded, valid, keys[g])[:size])
        return np.concatenate(out)

    np.testing.assert_array_equal(
        ops.grouped_masked_top_k(scores, mask, k, key, 3, sizes),
        loop(lambda s, m, kk: ops.masked_top_k(s, m, k, kk), scores),
    )
    np.testing.assert_array_equal(
        ops.grouped_uniform_subset(mask, k, key, 3, sizes),
        loop(lambda m, kk: ops.uniform_subset(m, k, kk)),
    )
    det = ops.grouped_top_k_mask(scores, mask, k, 3, sizes)
    np.testing.assert_array_equal(det, loop(lambda s, m, kk: ops.top_k_mask(s, m, k), scores))
    # Brute force: each group's min(k, eligible) highest eligible scores.
    for start, size in zip(starts, sizes, strict=True):
        s, m = np.asarray(scores[start : start + size]), np.asarray(mask[start : start + size])
        best = np.argsort(-np.where(m, s, -np.inf), kind="stable")[: min(k, m.sum())]
        np.testing.assert_array_equal(np.flatnonzero(det[start : start + size]), np.sort(best))


def test_equal_sizes_give_the_equal_groups():
    key, mask = jax.random.PRNGKey(0), jnp.arange(12) % 5 != 0
    scores = jax.random.normal(key, (12,))
    np.testing.assert_array_equal(
        ops.grouped_masked_top_k(scores, mask, 2, key, 3, (4, 4, 4)),
        ops.grouped_masked_top_k(scores, mask, 2, key, 3),
    )


def test_group_sizes_must_cover_the_clients():
    mask = jnp.ones(6, bool)
    for sizes in ((2, 3), (3, 3, 1), (0, 3, 3), (3, 4, -1)):
        with pytest.raises(ValueError, match="sizes"):
            ops.grouped_uniform_subset(mask, 1, jax.random.PRNGKey(0), 3, sizes)
