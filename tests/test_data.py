"""Packing, synthetic sources, tfds under mock data, digits, and the `load` entry point."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow_datasets as tfds

from fedjax_sel import data
from fedjax_sel.data import CentralData


def _ids_pool(n=12, n_test=5):
    """Examples whose single feature is their own index, so packing can be traced back."""
    x = np.arange(n, dtype=np.float32)[:, None] + 1.0  # +1 so no real row is all zeros
    y = np.arange(n, dtype=np.int32) % 3
    x_test = -np.arange(n_test, dtype=np.float32)[:, None] - 1.0
    return CentralData(x, y, x_test, np.arange(n_test, dtype=np.int32) % 3, 3)


def test_pad_clients_hand_worked():
    pool = _ids_pool()
    x, y, counts = data.pad_clients(
        pool.x, pool.y, [np.array([3, 1]), np.array([4]), np.array([0, 2, 5])]
    )
    np.testing.assert_array_equal(counts, [2, 1, 3])
    np.testing.assert_array_equal(x[..., 0], [[4, 2, 0], [5, 0, 0], [1, 3, 6]])
    np.testing.assert_array_equal(y, [[0, 1, 0], [1, 0, 0], [0, 2, 2]])
    assert x.dtype == np.float32 and y.dtype == np.int32


def test_pack_splits_each_client_once_and_pads_with_zeros():
    pool = _ids_pool(n=30)
    parts = [np.arange(0, 10), np.arange(10, 13), np.arange(13, 30)]
    fd = data.pack(pool, parts, heldout_fraction=0.3, seed=0)
    np.testing.assert_array_equal(fd.counts, [7, 3, 12])
    np.testing.assert_array_equal(fd.heldout_counts, [3, 0, 5])
    assert fd.x.shape == (3, 12, 1) and fd.x_heldout.shape == (3, 5, 1)
    for i, part in enumerate(parts):
        train = np.asarray(fd.x[i, : fd.counts[i], 0]) - 1
        held = np.asarray(fd.x_heldout[i, : fd.heldout_counts[i], 0]) - 1
        np.testing.assert_array_equal(np.sort(np.concatenate([train, held])), part)
        np.testing.assert_array_equal(fd.y[i, : fd.counts[i]], pool.y[train.astype(int)])
        assert np.all(np.asarray(fd.x[i, fd.counts[i] :]) == 0)
        assert np.all(np.asarray(fd.y[i, fd.counts[i] :]) == 0)
        assert np.all(np.asarray(fd.x_heldout[i, fd.heldout_counts[i] :]) == 0)
    np.testing.assert_array_equal(fd.x_test, pool.x_test)
    assert fd.num_classes == 3


def test_pack_heldout_from_test_slices():
    pool = _ids_pool(n=12, n_test=5)
    fd = data.pack(pool, [np.arange(6), np.arange(6, 12)], heldout_from_test=True)
    np.testing.assert_array_equal(fd.counts, [6, 6])
    np.testing.assert_array_equal(np.sort(fd.heldout_counts), [2, 3])
    held = np.concatenate([fd.x_heldout[i, : fd.heldout_counts[i], 0] for i in range(2)])
    np.testing.assert_array_equal(np.sort(held), np.sort(pool.x_test[:, 0]))


def test_pack_errors():
    pool = _ids_pool()
    with pytest.raises(ValueError, match="empty clients: \\[1\\]"):
        data.pack(pool, [np.arange(3), np.arange(0)])
    with pytest.raises(ValueError, match="heldout_fraction"):
        data.pack(pool, [np.arange(3)], heldout_fraction=1.0)
    with pytest.raises(ValueError, match="exclusive"):
        data.pack(pool, [np.arange(3)], heldout_fraction=0.5, heldout_from_test=True)


def test_synthetic_is_deterministic_by_seed():
    # Shapes shared with the other tests so that one compilation serves them all.
    a = data.synthetic_leaf(40, seed=4, samples_per_client=50)
    b = data.synthetic_leaf(40, seed=4, samples_per_client=50)
    c = data.synthetic_leaf(40, seed=5, samples_per_client=50)
    for field in ("x", "y", "x_heldout", "y_heldout", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.x, c.x)


def test_synthetic_layout_follows_leaf():
    fd = data.synthetic_leaf(5, seed=0)  # log-normal sizes, 90/10 split per client
    sizes = np.asarray(fd.counts) + np.asarray(fd.heldout_counts)
    assert sizes.min() >= 50
    np.testing.assert_array_equal(fd.counts, np.floor(0.9 * sizes).astype(int))
    assert fd.x.shape == (5, int(fd.counts.max()), 60)
    assert fd.x_test.shape[0] == int(fd.heldout_counts.sum())
    test = np.concatenate([fd.x_heldout[i, : fd.heldout_counts[i]] for i in range(5)])
    np.testing.assert_array_equal(fd.x_test, test)
    for i in range(5):
        assert np.all(np.asarray(fd.x[i, fd.counts[i] :]) == 0)
    assert set(np.unique(fd.y_test)) <= set(range(10))


def test_synthetic_beta_spreads_client_inputs():
    # x ~ N(v_k, Sigma) with v_k ~ N(B_k, 1), B_k ~ N(0, beta): the client means of the
    # first feature spread with sd sqrt(beta^2 + 1); Synthetic-IID has them all at 0.
    def client_means(fd):
        return np.asarray(fd.x[:, :, 0].sum(axis=1) / fd.counts)

    spread = data.synthetic_leaf(40, seed=0, beta=10.0, samples_per_client=50)
    iid = data.synthetic_leaf(40, seed=0, iid=True, samples_per_client=50)
    assert client_means(spread).std() > 5.0
    assert client_means(iid).std() < 0.5  # sd 1/sqrt(45) ~ 0.15


def test_gaussian_mixture_deterministic_and_balanced():
    a = data.gaussian_mixture(seed=1, num_train=400, num_test=50)
    b = data.gaussian_mixture(seed=1, num_train=400, num_test=50)
    c = data.gaussian_mixture(seed=2, num_train=400, num_test=50)
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.x, c.x)
    assert a.x.shape == (400, 28, 28, 1) and a.x_test.shape == (50, 28, 28, 1)
    np.testing.assert_array_equal(np.bincount(a.y), [40] * 10)
    np.testing.assert_array_equal(np.bincount(a.y_test), [5] * 10)


def test_digits_offline():
    fd = data.load("digits", 10, "label_shards", labels_per_client=2, heldout_fraction=0.2)
    assert fd.x.shape[0] == 10 and fd.x.shape[2:] == (8, 8, 1)
    total = int(fd.counts.sum() + fd.heldout_counts.sum()) + fd.y_test.shape[0]
    assert total == 1797
    assert float(fd.x.max()) <= 1.0 and float(fd.x.min()) >= 0.0
    for i in range(10):
        assert np.unique(np.asarray(fd.y[i, : fd.counts[i]])).size <= 2


@pytest.mark.parametrize(
    "name, shape, num_classes",
    [
        ("mnist", (28, 28, 1), 10),
        ("fashion_mnist", (28, 28, 1), 10),
        ("cifar10", (32, 32, 3), 10),
        ("emnist", (28, 28, 1), 62),
    ],
)
def test_tfds_path_under_mock_data(tmp_path, name, shape, num_classes):
    with tfds.testing.mock_data(num_examples=24):
        fd = data.load(name, 4, "iid", data_dir=str(tmp_path))
        source = tfds.data_source(name, split="train", data_dir=str(tmp_path))
        images = np.stack([np.asarray(source[i]["image"]) for i in range(len(source))])
    assert fd.x.shape == (4, 6) + shape and fd.num_classes == num_classes
    np.testing.assert_array_equal(fd.counts, [6, 6, 6, 6])
    assert fd.x_test.shape == (24,) + shape
    packed = np.asarray(fd.x).reshape(24, -1)
    expected = images.astype(np.float32) / 255.0
    if name == "emnist":
        expected = np.swapaxes(expected, 1, 2)
    # The clients together hold exactly the 24 mock images, once each.
    order = lambda a: a[np.lexsort(a.T[::-1])]
    np.testing.assert_array_equal(order(packed), order(expected.reshape(24, -1)))


def test_missing_tfds_dataset_says_how_to_prepare(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        data.load("fashion_mnist", 2, data_dir=str(tmp_path))
    message = str(err.value)
    assert f"tfds build fashion_mnist --data_dir={tmp_path} --file_format=array_record" in message


def test_import_downloads_and_imports_nothing_heavy():
    code = (
        "import sys, fedjax_sel.data, models; "
        "assert 'tensorflow_datasets' not in sys.modules; assert 'sklearn' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_load_errors_name_the_valid_choices():
    with pytest.raises(ValueError, match="valid names: .*'digits'.*'mnist'"):
        data.load("imagenet", 10)
    with pytest.raises(ValueError, match="unknown partition 'shards'"):
        data.load("digits", 10, "shards")
    with pytest.raises(ValueError, match="unknown argument\\(s\\) \\['labels_per_clients'\\]"):
        data.load("digits", 10, "label_shards", labels_per_clients=2)
    with pytest.raises(ValueError, match="natural"):
        data.load("synthetic", 10, "iid")
    with pytest.raises(ValueError, match="num_clients"):
        data.load("digits", 0)
    with pytest.raises(ValueError, match="config"):
        data.load("mnist", 2, config="letters")


def test_load_synthetic_and_mixture_by_name():
    fd = data.load("synthetic", 40, seed=0, alpha=0.5, beta=0.5, samples_per_client=50)
    assert fd.x.shape == (40, 45, 60) and fd.x_heldout.shape == (40, 5, 60)
    fd = data.load(
        "gaussian_mixture", 8, "dirichlet", seed=0, alpha=1.0, num_train=400, num_test=50
    )
    assert int(fd.counts.sum()) == 400 and fd.x.shape[2:] == (28, 28, 1)
