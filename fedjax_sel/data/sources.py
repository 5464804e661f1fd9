"""Real datasets: tensorflow-datasets (array_record, no TensorFlow) and scikit-learn digits.

Both libraries are imported inside the functions, so importing `fedjax_sel.data` never
needs them and never downloads anything.
"""

from __future__ import annotations

import numpy as np

from fedjax_sel import validation
from fedjax_sel.data.packing import CentralData

TFDS_DATASETS = ("mnist", "fashion_mnist", "cifar10", "emnist")
EMNIST_CONFIGS = ("byclass", "bymerge", "balanced", "letters", "digits", "mnist")


def _prepare_command(tfds_name: str, data_dir: str | None) -> str:
    dir_flag = f" --data_dir={data_dir}" if data_dir is not None else ""
    return f"tfds build {tfds_name}{dir_flag} --file_format=array_record"


def load_tfds(name: str, *, data_dir: str | None = None, config: str | None = None) -> CentralData:
    """Loads a prepared tensorflow-datasets image dataset through `tfds.data_source`.

    Pixels are scaled to [0, 1] and kept as images `f32[n, H, W, C]`. EMNIST images are
    transposed to the upright orientation of MNIST (tfds stores them transposed).
    Nothing is downloaded: a dataset that is not prepared in `data_dir` raises an
    error that gives the command preparing it.

    Args:
      name: one of `TFDS_DATASETS`.
      data_dir: tfds data directory (default: tfds's own, `~/tensorflow_datasets`).
      config: EMNIST split, one of `EMNIST_CONFIGS` (default "byclass", 62 classes);
        only for emnist.

    Returns:
      The train split as the pool and the test split as the test set.

    Raises:
      ValueError: for an unknown name or config.
      FileNotFoundError: if the dataset is not prepared in array_record format.
    """
    if name not in TFDS_DATASETS:
        raise ValueError(f"name must be one of {TFDS_DATASETS}, got {name!r}.")
    tfds_name = name
    if name == "emnist":
        config = "byclass" if config is None else config
        if config not in EMNIST_CONFIGS:
            raise ValueError(f"config must be one of {EMNIST_CONFIGS}, got {config!r}.")
        tfds_name = f"emnist/{config}"
    elif config is not None:
        raise ValueError(f"config applies to emnist only, got config={config!r} for {name}.")
    import tensorflow_datasets as tfds

    try:
        train, test = tfds.data_source(
            tfds_name, split=["train", "test"], data_dir=data_dir, download=False
        )
    except (NotImplementedError, FileNotFoundError, ValueError, AssertionError) as err:
        where = data_dir if data_dir is not None else "the default tfds data_dir"
        raise FileNotFoundError(
            f"tfds dataset {tfds_name!r} is not prepared in array_record format in {where}. "
            f"Prepare it once, on a machine with network access, with:\n"
            f"    {_prepare_command(tfds_name, data_dir)}\n"
            "(tfds encodes images with TensorFlow while building, so the build may need "
            "`pip install tensorflow`; reading the prepared files here does not)."
        ) from err
    num_classes = int(train.dataset_info.features["label"].num_classes)

    def read(source):
        # One record at a time: batched `__getitems__` is not mocked by tfds.testing.
        examples = [source[i] for i in range(len(source))]
        x = np.stack([np.asarray(e["image"]) for e in examples]).astype(np.float32) / 255.0
        y = np.array([int(e["label"]) for e in examples], np.int32)
        if name == "emnist":
            x = np.swapaxes(x, 1, 2)
        return x, y

    x, y = read(train)
    x_test, y_test = read(test)
    return CentralData(x, y, x_test, y_test, num_classes)


def load_digits(*, seed: int = 0, test_fraction: float = 0.2) -> CentralData:
    """scikit-learn's bundled handwritten digits (1,797 8x8 images, 10 classes), offline.

    Pixels (0..16) are scaled to [0, 1] and shaped `f32[n, 8, 8, 1]`. A random
    `test_fraction` of the images is the test set; the rest is the pool.

    Args:
      seed: seed of the train/test cut.
      test_fraction: share of images in the test set, in (0, 1).

    Returns:
      The centralised pool and test set.

    Raises:
      ImportError: if scikit-learn is missing (install the `sklearn` extra).
    """
    fraction = validation.float_in_range("test_fraction", test_fraction, 0.0, 1.0, low_open=True)
    if fraction >= 1.0:
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}.")
    try:
        from sklearn import datasets
    except ImportError as err:
        raise ImportError(
            "the digits dataset needs scikit-learn: pip install 'fedjax-sel[sklearn]'."
        ) from err
    bunch = datasets.load_digits()
    x = (bunch.images / 16.0).astype(np.float32)[..., None]
    y = bunch.target.astype(np.int32)
    perm = np.random.default_rng(validation.seed("seed", seed)).permutation(y.size)
    n_test = max(1, int(round(fraction * y.size)))
    test, train = perm[:n_test], perm[n_test:]
    return CentralData(x[train], y[train], x[test], y[test], 10)
