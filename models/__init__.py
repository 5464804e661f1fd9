"""Flax models used by clients, behind the pure `Model` interface.

`get(name, input_shape, num_classes)` builds a registered model; `default_loss(name)`
names the loss it is trained with; `losses` holds the masked loss and accuracy helpers.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from models import losses
from models.base import Model, Params
from models.cnn import CNN, spatial_after
from models.linear import Linear
from models.losses import LOSSES, accuracy, multiclass_hinge, softmax_cross_entropy
from models.mlp import MLP


class ModelSpec(NamedTuple):
    """A registered model.

    Attributes:
      build: `(num_classes, **options) -> flax module`.
      loss: key of `losses.LOSSES` the model is trained with.
      padding: convolution padding ("VALID"/"SAME") for CNNs, None for flat models.
    """

    build: Callable[..., nn.Module]
    loss: str
    padding: str | None = None


def _linear(num_classes: int, zero_init: bool = True) -> nn.Module:
    return Linear(num_classes=num_classes, zero_init=zero_init)


def _cnn(features, dense, padding):
    def build(num_classes: int) -> nn.Module:
        return CNN(features=features, dense=dense, num_classes=num_classes, padding=padding)

    return build


REGISTRY: dict[str, ModelSpec] = {
    "logistic_regression": ModelSpec(_linear, "cross_entropy"),
    "linear_svm": ModelSpec(_linear, "hinge"),
    "mlp_128": ModelSpec(
        lambda num_classes: MLP(hidden=(128,), num_classes=num_classes), "cross_entropy"
    ),
    "mlp_200": ModelSpec(
        lambda num_classes: MLP(hidden=(200,), num_classes=num_classes), "cross_entropy"
    ),
    "cnn_mnist": ModelSpec(_cnn((20, 50), (500,), "VALID"), "cross_entropy", "VALID"),
    "cnn_cifar10": ModelSpec(_cnn((64, 64), (384, 192), "VALID"), "cross_entropy", "VALID"),
    "cnn_cifar10_same": ModelSpec(_cnn((64, 64), (384, 192), "SAME"), "cross_entropy", "SAME"),
    "cnn_cifar10_small": ModelSpec(_cnn((16, 20), (596,), "VALID"), "cross_entropy", "VALID"),
}


def _check_shape(name: str, input_shape, padding: str | None) -> tuple[int, ...]:
    shape = tuple(input_shape) if isinstance(input_shape, (tuple, list)) else None
    if not shape or any(
        isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in shape
    ):
        raise ValueError(
            f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}."
        )
    shape = tuple(int(s) for s in shape)
    if padding is not None:
        if len(shape) != 3:
            raise ValueError(
                f"{name} takes images, input_shape (height, width, channels); got {shape}."
            )
        if min(spatial_after(shape[0], padding), spatial_after(shape[1], padding)) < 1:
            smallest = 16 if padding == "VALID" else 4
            raise ValueError(
                f"{name} needs height and width >= {smallest} for its two 5x5 convolutions "
                f"and 2x2 poolings; got input_shape {shape}."
            )
    return shape


def get(name: str, input_shape, num_classes: int, **options) -> Model:
    """Builds a registered model as pure `init`/`apply` functions.

    Args:
      name: one of `REGISTRY` (`logistic_regression`, `linear_svm`, `mlp_128`, `mlp_200`,
        `cnn_mnist`, `cnn_cifar10`, `cnn_cifar10_same`, `cnn_cifar10_small`).
      input_shape: feature shape of one example, e.g. (28, 28, 1); flat models accept
        any shape, CNNs need (height, width, channels) large enough for their layers.
      num_classes: C (>= 2).
      **options: model options; the linear models take `zero_init` (default True).

    Returns:
      The `Model`; `apply(params, x f32[B, *input_shape]) -> logits f32[B, C]`.

    Raises:
      ValueError: for an unknown name or option, or a shape the model cannot take;
        raised in Python before anything is traced.
    """
    if name not in REGISTRY:
        raise ValueError(f"unknown model {name!r}; valid names: {sorted(REGISTRY)}.")
    spec = REGISTRY[name]
    shape = _check_shape(name, input_shape, spec.padding)
    if isinstance(num_classes, bool) or not isinstance(num_classes, numbers.Integral):
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}.")
    if num_classes < 2:
        raise ValueError(f"num_classes must be an integer >= 2, got {num_classes!r}.")
    try:
        module = spec.build(int(num_classes), **options)
    except TypeError:
        raise ValueError(f"unknown option(s) {sorted(options)} for model {name!r}.") from None
    dummy = jnp.zeros((1, *shape), jnp.float32)

    def init(key: jax.Array) -> Params:
        return module.init(key, dummy)["params"]

    def apply(params: Params, x: jax.Array) -> jax.Array:
        return module.apply({"params": params}, x)

    return Model(init=init, apply=apply, name=name, input_shape=shape, num_classes=int(num_classes))


def default_loss(name: str) -> Callable[..., jax.Array]:
    """The masked loss `(logits, labels, mask) -> f32[]` a registered model is trained with."""
    if name not in REGISTRY:
        raise ValueError(f"unknown model {name!r}; valid names: {sorted(REGISTRY)}.")
    return LOSSES[REGISTRY[name].loss]


def num_params(params: Params) -> int:
    """Number of scalar parameters in a parameter pytree."""
    return sum(int(leaf.size) for leaf in jax.tree_util.tree_leaves(params))


__all__ = [
    "CNN",
    "LOSSES",
    "MLP",
    "REGISTRY",
    "Linear",
    "Model",
    "ModelSpec",
    "accuracy",
    "default_loss",
    "get",
    "losses",
    "multiclass_hinge",
    "num_params",
    "softmax_cross_entropy",
]
