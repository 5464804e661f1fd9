"""A federated dataset as padded, fixed-shape arrays."""

from __future__ import annotations

from typing import NamedTuple

import chex


class FederatedData(NamedTuple):
    """N clients' examples as padded arrays, plus a global test set.

    Client `i` owns `x[i, :counts[i]]`, `y[i, :counts[i]]`; rows past `counts[i]` are
    padding (zeros) and must be masked. Its held-out examples are
    `x_heldout[i, :heldout_counts[i]]`.

    Attributes:
      x: f32[N, n_max, *feature_shape], training inputs.
      y: int32[N, n_max], training labels.
      counts: int32[N], real examples per client (>= 1).
      x_heldout: f32[N, h_max, *feature_shape], per-client held-out inputs.
      y_heldout: int32[N, h_max], per-client held-out labels.
      heldout_counts: int32[N], real held-out examples per client (may be 0).
      x_test: f32[n_test, *feature_shape], global test inputs.
      y_test: int32[n_test], global test labels.
      num_classes: static number of classes.
    """

    x: chex.Array
    y: chex.Array
    counts: chex.Array
    x_heldout: chex.Array
    y_heldout: chex.Array
    heldout_counts: chex.Array
    x_test: chex.Array
    y_test: chex.Array
    num_classes: int
