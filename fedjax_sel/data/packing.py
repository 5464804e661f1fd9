"""Packing: per-client index lists into a padded, fixed-shape `FederatedData`."""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.data.federated import FederatedData


class CentralData(NamedTuple):
    """A centralised dataset before partitioning (host numpy arrays).

    Attributes:
      x: f32[n, *feature_shape], training pool.
      y: int[n], training labels in [0, num_classes).
      x_test: f32[n_test, *feature_shape], test inputs.
      y_test: int[n_test], test labels.
      num_classes: number of classes.
    """

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


def pad_clients(
    x: np.ndarray, y: np.ndarray, client_indices: list[np.ndarray], min_rows: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gathers each client's examples into zero-padded rows.

    Args:
      x: f32[n, *feature_shape], the pool.
      y: int[n], its labels.
      client_indices: N index arrays into the pool.
      min_rows: smallest padded length (so that empty held-out sets keep a real axis).

    Returns:
      `(x f32[N, n_max, *feature_shape], y int32[N, n_max], counts int32[N])` with
      `n_max = max(min_rows, max_i |client_indices[i]|)`; client i's examples fill rows
      `0..counts[i]-1` in the given order and the rest are zeros.
    """
    counts = np.array([len(ix) for ix in client_indices], np.int64)
    n_max = max(min_rows, int(counts.max(initial=0)))
    flat = np.concatenate([np.asarray(ix, np.int64) for ix in client_indices] + [np.zeros(0, int)])
    rows = np.repeat(np.arange(counts.size), counts)
    cols = np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts)
    xp = np.zeros((counts.size, n_max) + x.shape[1:], np.float32)
    yp = np.zeros((counts.size, n_max), np.int32)
    xp[rows, cols] = x[flat]
    yp[rows, cols] = y[flat]
    return xp, yp, counts.astype(np.int32)


def pack(
    data: CentralData,
    client_indices: list[np.ndarray],
    *,
    seed: int = 0,
    heldout_fraction: float = 0.0,
    heldout_from_test: bool = False,
) -> FederatedData:
    """Packs a partition of `data` into padded client arrays with held-out sets.

    Held-out data is either a fraction of each client's own examples (same distribution
    as its training data) or, with `heldout_from_test`, one of N disjoint IID slices of
    the global test set (the local test sets of Tong et al., spec A13). The global test
    set is kept whole in both cases.

    Args:
      data: the centralised pool and test set.
      client_indices: N index arrays into `data.x` (from a partitioner).
      seed: seed of the held-out draws.
      heldout_fraction: fraction of each client's examples held out, rounded down and
        capped so that at least one training example remains; in [0, 1).
      heldout_from_test: hold out test-set slices instead (needs heldout_fraction = 0).

    Returns:
      The padded `FederatedData`.

    Raises:
      ValueError: if a client has no examples or the arguments are out of range.
    """
    fraction = validation.float_in_range("heldout_fraction", heldout_fraction, 0.0, 1.0)
    if fraction >= 1.0:
        raise ValueError(f"heldout_fraction must lie in [0, 1), got {heldout_fraction!r}.")
    heldout_from_test = validation.boolean("heldout_from_test", heldout_from_test)
    if heldout_from_test and fraction > 0:
        raise ValueError("heldout_from_test and heldout_fraction > 0 are exclusive; pick one.")
    num_clients = len(client_indices)
    sizes = np.array([len(ix) for ix in client_indices])
    if num_clients == 0 or sizes.min() < 1:
        empty = np.flatnonzero(sizes == 0)[:10].tolist()
        raise ValueError(f"every client needs at least one example; empty clients: {empty}.")
    rng = np.random.default_rng(validation.seed("seed", seed))
    shuffled = [rng.permutation(np.asarray(ix)) for ix in client_indices]
    if heldout_from_test:
        if data.y_test.size < num_clients:
            raise ValueError(
                f"heldout_from_test needs at least {num_clients} test examples, "
                f"got {data.y_test.size}."
            )
        train = shuffled
        slices = np.array_split(rng.permutation(data.y_test.size), num_clients)
        x_ho, y_ho, ho_counts = pad_clients(data.x_test, data.y_test, slices)
    else:
        n_ho = np.minimum(np.floor(fraction * sizes).astype(int), sizes - 1)
        train = [ix[h:] for ix, h in zip(shuffled, n_ho, strict=True)]
        heldout = [ix[:h] for ix, h in zip(shuffled, n_ho, strict=True)]
        x_ho, y_ho, ho_counts = pad_clients(data.x, data.y, heldout)
    x, y, counts = pad_clients(data.x, data.y, train)
    return FederatedData(
        x=jnp.asarray(x),
        y=jnp.asarray(y),
        counts=jnp.asarray(counts),
        x_heldout=jnp.asarray(x_ho),
        y_heldout=jnp.asarray(y_ho),
        heldout_counts=jnp.asarray(ho_counts),
        x_test=jnp.asarray(data.x_test, jnp.float32),
        y_test=jnp.asarray(data.y_test, jnp.int32),
        num_classes=int(data.num_classes),
    )
