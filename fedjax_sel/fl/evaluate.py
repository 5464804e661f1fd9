"""Evaluation of a model on padded example arrays: masked loss and accuracy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import chex
import jax
import jax.numpy as jnp
import optax

Params = Any


def evaluate(
    apply_fn: Callable[[Params, chex.Array], chex.Array],
    params: Params,
    x: chex.Array,
    y: chex.Array,
    count: chex.Array | None = None,
) -> tuple[chex.Array, chex.Array]:
    """Mean cross-entropy and accuracy over the first `count` examples.

    Args:
      apply_fn: `(params, x f32[n, ...]) -> logits f32[n, C]`.
      params: the model.
      x: f32[n, ...] inputs.
      y: int32[n] labels.
      count: int32[] real examples (the rest is padding), None for all n.

    Returns:
      (loss f32[], accuracy f32[]), both 0 when `count` is 0.
    """
    logits = apply_fn(params, x)
    mask = jnp.ones(y.shape, jnp.float32)
    if count is not None:
        mask = (jnp.arange(y.shape[0]) < count).astype(jnp.float32)
    total = jnp.maximum(jnp.sum(mask), 1.0)
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    correct = (jnp.argmax(logits, axis=-1) == y).astype(jnp.float32)
    return jnp.sum(losses * mask) / total, jnp.sum(correct * mask) / total


def evaluate_clients(
    apply_fn: Callable[[Params, chex.Array], chex.Array],
    params: Params,
    x: chex.Array,
    y: chex.Array,
    counts: chex.Array,
) -> tuple[chex.Array, chex.Array]:
    """Per-client (loss f32[N], accuracy f32[N]) of one model on padded `x[N, n, ...]`."""
    return jax.vmap(lambda xi, yi, ci: evaluate(apply_fn, params, xi, yi, ci))(x, y, counts)
