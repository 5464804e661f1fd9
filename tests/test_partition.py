"""Partitioners: coverage, exact label sets, Dirichlet statistics, empty-client errors."""

import numpy as np
import pytest

from fedjax_sel.data import partition


def _pool(num_classes=10, per_class=50):
    return np.repeat(np.arange(num_classes), per_class)


def _assigned(parts):
    return np.sort(np.concatenate(parts))


def test_apportion_hand_worked():
    np.testing.assert_array_equal(partition.apportion(10, np.ones(3)), [4, 3, 3])
    # Exact shares 3.5, 1.75, 1.75: floors 3, 1, 1 and the two largest remainders round up.
    np.testing.assert_array_equal(partition.apportion(7, [0.5, 0.25, 0.25]), [3, 2, 2])
    np.testing.assert_array_equal(partition.apportion(0, [1.0, 2.0]), [0, 0])


@pytest.mark.parametrize(
    "name, kw",
    [
        ("iid", {}),
        ("unbalanced", {"sigma": 1.5}),
        ("label_shards", {"labels_per_client": 2}),
        ("label_shards", {"labels_per_client": [5, 5, 1, 1, 1, 1, 1, 1, 1, 1]}),
        ("dirichlet", {"alpha": 0.3}),
        ("mixed", {"num_iid": 3, "labels_per_client": 2}),
        ("mixed", {"num_iid": 4, "non_iid": "dirichlet", "alpha": 0.5}),
    ],
)
def test_every_sample_assigned_exactly_once_and_no_client_empty(name, kw):
    labels = _pool()
    parts = partition.PARTITIONERS[name](labels, 10, seed=3, **kw)
    assert len(parts) == 10
    assert min(len(p) for p in parts) >= 1
    np.testing.assert_array_equal(_assigned(parts), np.arange(labels.size))


@pytest.mark.parametrize("name", ["iid", "unbalanced", "label_shards", "dirichlet", "mixed"])
def test_same_seed_same_partition(name):
    labels = _pool()
    a = partition.PARTITIONERS[name](labels, 7, seed=1)
    b = partition.PARTITIONERS[name](labels, 7, seed=1)
    c = partition.PARTITIONERS[name](labels, 7, seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_iid_sizes_even_or_explicit():
    labels = _pool(per_class=7)  # n = 70
    sizes = [len(p) for p in partition.iid(labels, 8)]
    assert sorted(sizes) == [8, 8, 9, 9, 9, 9, 9, 9]
    parts = partition.iid(labels, 3, sizes=[5, 1, 20])
    assert [len(p) for p in parts] == [5, 1, 20]
    assert np.unique(np.concatenate(parts)).size == 26
    with pytest.raises(ValueError, match="sizes"):
        partition.iid(labels, 2, sizes=[50, 30])


def test_unbalanced_sizes():
    labels = _pool()
    sizes = np.array([len(p) for p in partition.unbalanced(labels, 20, sigma=2.0)])
    assert sizes.min() >= 1 and sizes.sum() == labels.size
    assert sizes.max() > 3 * np.median(sizes)
    even = [len(p) for p in partition.unbalanced(labels, 20, sigma=0.0)]
    assert set(even) == {25}


def test_label_shards_hand_worked():
    labels = np.array([0, 0, 1, 1, 2, 2, 3, 3])
    parts = partition.label_shards(labels, 4, labels_per_client=1, seed=0)
    got = sorted(tuple(sorted(p.tolist())) for p in parts)
    assert got == [(0, 1), (2, 3), (4, 5), (6, 7)]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_label_shards_exact_label_sets(k):
    labels = _pool(per_class=60)
    parts = partition.label_shards(labels, 20, labels_per_client=k, seed=k)
    holders = np.zeros(10, int)
    for p in parts:
        held = np.unique(labels[p])
        assert held.size == k
        holders[held] += 1
    assert holders.max() - holders.min() <= 1
    # Each label's 60 examples are split as evenly as possible among its holders.
    for label in range(10):
        shares = [np.sum(labels[p] == label) for p in parts if np.any(labels[p] == label)]
        assert sum(shares) == 60 and max(shares) - min(shares) <= 1


def test_label_shards_xia_fig6_split():
    labels = _pool(per_class=40)
    parts = partition.label_shards(labels, 10, labels_per_client=[5, 5] + [1] * 8, seed=0)
    sets = [set(np.unique(labels[p]).tolist()) for p in parts]
    assert len(sets[0]) == len(sets[1]) == 5 and not sets[0] & sets[1]
    assert sets[0] | sets[1] == set(range(10))
    singles = [s.pop() for s in sets[2:]]
    assert len(singles) == len(set(singles)) == 8
    for p in parts[2:]:
        assert len(p) == 20  # half of the label's 40 examples


def test_label_shards_errors():
    labels = np.array([0] * 10 + [1])
    with pytest.raises(ValueError, match="label 1 has 1 examples but 2 clients"):
        partition.label_shards(labels, 4, labels_per_client=1)
    with pytest.raises(ValueError, match="labels_per_client"):
        partition.label_shards(_pool(), 4, labels_per_client=11)


def test_num_clients_larger_than_pool_is_an_error():
    with pytest.raises(ValueError, match="num_clients"):
        partition.iid(np.arange(5) % 2, 6)


def test_dirichlet_per_class_share_variance_matches_beta():
    # Client i's share of label c is Beta(alpha, (N - 1) alpha): mean 1/N,
    # variance (1/N)(1 - 1/N) / (N alpha + 1). Labels are independent, so the
    # per-label mean squared deviation V_c is i.i.d. over c, and its average is
    # tested against the variance within 4 standard errors.
    num_classes, per_class, n, alpha = 60, 1000, 10, 0.5
    labels = _pool(num_classes, per_class)
    parts = partition.dirichlet(labels, n, alpha=alpha, seed=0)
    shares = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts]) / per_class
    np.testing.assert_allclose(shares.sum(axis=0), 1.0)
    v = np.mean((shares - 1 / n) ** 2, axis=0)
    expected = (1 / n) * (1 - 1 / n) / (n * alpha + 1)
    stderr = v.std(ddof=1) / np.sqrt(num_classes)
    assert abs(v.mean() - expected) < 4 * stderr
    # The band is narrow enough to tell alpha = 0.5 from alpha = 1.
    assert abs(v.mean() - (1 / n) * (1 - 1 / n) / (n * 1.0 + 1)) > 4 * stderr


def test_dirichlet_large_alpha_is_iid_within_rounding():
    labels = _pool(10, 600)
    parts = partition.dirichlet(labels, 6, alpha=1e6, seed=0)
    counts = np.stack([np.bincount(labels[p], minlength=10) for p in parts])
    # Shares deviate from 1/N by sd sqrt((1/N)(1-1/N)/(N alpha)) ~ 1.5e-4: < 0.1 example.
    assert np.abs(counts - 100).max() <= 1


def test_dirichlet_per_client_proportion_variance():
    # r_ic = counts_ic / m with q_i ~ Dir_C(alpha), counts ~ Multinomial(m, q_i):
    # Var(r) = v + (1/C - v - 1/C^2) / m, v = (1/C)(1 - 1/C) / (C alpha + 1).
    c, m, n, alpha = 10, 100, 200, 1.0
    labels = _pool(c, 3000)
    parts = partition.dirichlet(
        labels, n, alpha=alpha, mode="per_client", samples_per_client=m, seed=1
    )
    assert all(len(p) == m and np.unique(p).size == m for p in parts)
    r = np.stack([np.bincount(labels[p], minlength=c) for p in parts]) / m
    v_client = np.mean((r - 1 / c) ** 2, axis=1)
    v = (1 / c) * (1 - 1 / c) / (c * alpha + 1)
    expected = v + (1 / c - v - 1 / c**2) / m
    stderr = v_client.std(ddof=1) / np.sqrt(n)
    assert abs(v_client.mean() - expected) < 4 * stderr


def test_dirichlet_errors():
    labels = _pool(2, 10)
    with pytest.raises(ValueError, match="at least 2 examples"):
        partition.dirichlet(labels, 10, alpha=0.01, min_size=2, max_attempts=3)
    with pytest.raises(ValueError, match="pool has 10"):
        partition.dirichlet(labels, 2, alpha=0.01, mode="per_client", samples_per_client=15)
    with pytest.raises(ValueError, match="alpha"):
        partition.dirichlet(labels, 2, alpha=0.0)
    with pytest.raises(ValueError, match="mode"):
        partition.dirichlet(labels, 2, mode="both")


def test_mixed_iid_clients_first():
    labels = _pool(10, 100)
    parts = partition.mixed(labels, 10, num_iid=4, labels_per_client=1, seed=0)
    for p in parts[:4]:
        assert np.unique(labels[p]).size == 10
    for p in parts[4:]:
        assert np.unique(labels[p]).size == 1
    assert sum(len(p) for p in parts[:4]) == 400  # iid_share defaults to num_iid / N


def test_mixed_errors():
    with pytest.raises(ValueError, match="non_iid"):
        partition.mixed(_pool(), 5, num_iid=2, non_iid="mixed")
    with pytest.raises(ValueError, match="each client needs at least one"):
        partition.mixed(_pool(), 5, num_iid=2, iid_share=0.0)


def test_mixed_sizes_gives_unequal_iid_then_two_label_clients():
    labels = _pool(10, 600)
    parts = partition.mixed_sizes(labels, 20, num_iid=5, seed=0)
    sizes = np.array([len(p) for p in parts])
    everything = np.concatenate(parts)
    assert everything.size == np.unique(everything).size  # without replacement
    # Spec A14's Uniform{1000..4000} at N = 20, scaled by n / 60,000 = 0.1.
    assert sizes.min() >= 100 and sizes.max() <= 400 and np.unique(sizes).size > 10
    assert all(np.unique(labels[p]).size == 10 for p in parts[:5])
    for p in parts[5:]:
        held = np.unique(labels[p], return_counts=True)[1]
        assert held.size == 2 and held.max() - held.min() <= 1  # split evenly
    again = partition.mixed_sizes(labels, 20, num_iid=5, seed=0)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = partition.mixed_sizes(labels, 20, num_iid=5, seed=1)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))
    given = partition.mixed_sizes(labels, 4, num_iid=1, sizes=np.array([5, 6, 7, 8]))
    assert [len(p) for p in given] == [5, 6, 7, 8]


def test_mixed_sizes_errors():
    labels = _pool(3, 30)
    with pytest.raises(ValueError, match="sizes"):
        partition.mixed_sizes(labels, 3, num_iid=1, sizes=np.array([30, 30, 31]))
    with pytest.raises(ValueError, match="sizes"):
        partition.mixed_sizes(labels, 3, num_iid=1, sizes=np.array([1.5, 2.0, 2.0]))
    # The first client takes 23 and 22 of two labels; the two with the most left hold 38.
    with pytest.raises(ValueError, match="the most left hold 38"):
        partition.mixed_sizes(labels, 2, num_iid=0, sizes=np.array([45, 45]))
