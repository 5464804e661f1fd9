"""Linear classifiers: multinomial logistic regression and the multi-class linear SVM.

Both are one affine map `x -> W^T vec(x) + b` over the flattened input; they differ in
the loss they are trained with (`models.losses.softmax_cross_entropy` for logistic
regression, `models.losses.multiclass_hinge` for the SVM).
"""

from __future__ import annotations

import flax.linen as nn
import jax.numpy as jnp


class Linear(nn.Module):
    """`logits = vec(x) W + b`, W f32[prod(input_shape), C], b f32[C].

    Attributes:
      num_classes: C.
      zero_init: start from W = 0, b = 0 (the specs' reading for Xia et al.'s logistic
        regression and Tong et al.'s SVM, A15), else LeCun-normal W and zero b.
    """

    num_classes: int
    zero_init: bool = True

    @nn.compact
    def __call__(self, x: jnp.ndarray) -> jnp.ndarray:
        kernel_init = nn.initializers.zeros if self.zero_init else nn.initializers.lecun_normal()
        return nn.Dense(self.num_classes, kernel_init=kernel_init)(x.reshape(x.shape[0], -1))
