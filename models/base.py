"""The model interface used by clients: pure `init` and `apply`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex

Params = Any


class Model(NamedTuple):
    """A classifier as pure functions (a flax module behind them).

    Attributes:
      init: `key -> params`.
      apply: `(params, x f32[B, *feature_shape]) -> logits f32[B, num_classes]`.
      name: the registered name.
      input_shape: feature shape of one example.
      num_classes: number of classes.
    """

    init: Callable[[chex.PRNGKey], Params]
    apply: Callable[[Params, chex.Array], chex.Array]
    name: str
    input_shape: tuple[int, ...]
    num_classes: int
