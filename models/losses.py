"""Losses and accuracy over a batch with padded rows masked out.

Every function takes `logits f32[B, C]`, `labels int[B]` and an optional
`mask bool[B]` (True for real examples) and averages over the real rows only: padded
rows contribute exactly nothing, whatever their values, and an all-padding batch gives 0.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import optax


def _masked_mean(values: chex.Array, mask: chex.Array | None) -> chex.Array:
    if mask is None:
        return jnp.mean(values)
    mask = mask.astype(bool)
    # `where`, not a product: a NaN or inf in a padded row must not leak into the mean.
    total = jnp.sum(jnp.where(mask, values, 0.0))
    return total / jnp.maximum(jnp.sum(mask), 1)


def softmax_cross_entropy(
    logits: chex.Array, labels: chex.Array, mask: chex.Array | None = None
) -> chex.Array:
    """Mean of `-log softmax(logits)[label]` over real rows (multinomial logistic loss),
    the default loss of local SGD (`fedjax_sel.fl.local_sgd`)."""
    return _masked_mean(optax.softmax_cross_entropy_with_integer_labels(logits, labels), mask)


def multiclass_hinge(
    logits: chex.Array, labels: chex.Array, mask: chex.Array | None = None
) -> chex.Array:
    r"""Crammer-Singer multi-class hinge loss, the linear SVM's loss (spec A15 of Tong et al.).

    `max(0, 1 + max_{j != y} s_j - s_y)` for scores `s`, averaged over real rows.
    """
    num_classes = logits.shape[-1]
    onehot = jax.nn.one_hot(labels, num_classes, dtype=logits.dtype)
    true_score = jnp.sum(logits * onehot, axis=-1)
    rival = jnp.max(jnp.where(onehot > 0, -jnp.inf, logits), axis=-1)
    return _masked_mean(jax.nn.relu(1.0 + rival - true_score), mask)


def accuracy(logits: chex.Array, labels: chex.Array, mask: chex.Array | None = None) -> chex.Array:
    """Fraction of real rows whose arg-max logit is the label."""
    correct = (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)
    return _masked_mean(correct, mask)


LOSSES = {"cross_entropy": softmax_cross_entropy, "hinge": multiclass_hinge}
