"""Synthetic sources, generated in JAX from a seed: no files, same seed, same data."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel import validation
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.data.packing import CentralData, pad_clients


def synthetic_leaf(
    num_clients: int,
    *,
    seed: int = 0,
    alpha: float = 1.0,
    beta: float = 1.0,
    iid: bool = False,
    samples_per_client: int | None = None,
    dimension: int = 60,
    num_classes: int = 10,
    heldout_fraction: float = 0.1,
) -> FederatedData:
    r"""Synthetic(alpha, beta), the FedProx/LEAF benchmark, split by the clients that made it.

    Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020, Sec. 5.1).
    Client k draws `u_k ~ N(0, alpha)`, `B_k ~ N(0, beta)`, then
    `W_k ~ N(u_k, 1)^{d x C}`, `b_k ~ N(u_k, 1)^C`, `v_k ~ N(B_k, 1)^d`, and examples
    `x ~ N(v_k, Sigma)` with `Sigma = diag(j^{-1.2})`, labelled
    `y = argmax(softmax(W_k^T x + b_k))`. alpha controls how much the local models differ,
    beta how much the local inputs differ. With `iid=True` (the paper's Synthetic-IID)
    every client shares one `W, b ~ N(0, 1)` and draws `x ~ N(0, Sigma)`. As in the
    authors' generator, the second argument of N is a standard deviation.

    The partition is the natural one (client k owns what it generated). Sizes follow the
    generator, `floor(LogNormal(4, 2)) + 50`, unless `samples_per_client` fixes them. Each
    client keeps the first `floor((1 - heldout_fraction) n_k)` examples for training and
    holds out the rest (LEAF's 90/10 split); the global test set is the union of the
    held-out examples, which is how FedProx reports test accuracy.

    Args:
      num_clients: N (the paper uses 30).
      seed: seed of everything.
      alpha: spread of the local models (>= 0).
      beta: spread of the local input means (>= 0).
      iid: generate Synthetic-IID instead.
      samples_per_client: fixed n_k (>= 2) instead of the log-normal sizes.
      dimension: d (60 in the paper).
      num_classes: C (10 in the paper).
      heldout_fraction: fraction of each client's examples held out, in (0, 1).

    Returns:
      The `FederatedData`, features f32[dimension].
    """
    num_clients = validation.positive_int("num_clients", num_clients)
    alpha = validation.float_in_range("alpha", alpha, 0.0, float("inf"))
    beta = validation.float_in_range("beta", beta, 0.0, float("inf"))
    dimension = validation.positive_int("dimension", dimension)
    num_classes = validation.int_in_range("num_classes", num_classes, 2, 1 << 16)
    iid = validation.boolean("iid", iid)
    fraction = validation.float_in_range("heldout_fraction", heldout_fraction, 0.0, 1.0)
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"heldout_fraction must lie in (0, 1), got {heldout_fraction!r}.")
    keys = jax.random.split(jax.random.PRNGKey(validation.seed("seed", seed)), 2)
    if samples_per_client is None:
        log_sizes = 4.0 + 2.0 * jax.random.normal(keys[0], (num_clients,))
        sizes = np.floor(np.exp(np.asarray(log_sizes, np.float64))).astype(np.int64) + 50
    else:
        m = validation.int_in_range("samples_per_client", samples_per_client, 2, 1 << 24)
        sizes = np.full(num_clients, m, np.int64)
    n_train = np.maximum(np.floor((1.0 - fraction) * sizes).astype(np.int64), 1)
    n_train = np.minimum(n_train, sizes - 1)
    n_max = int(sizes.max())

    x, y = _leaf_examples(keys[1], alpha, beta, iid, num_clients, n_max, dimension, num_classes)
    x, y = np.asarray(x, np.float32), np.asarray(y, np.int32)

    # Client k's rows [0, n_train_k) train, [n_train_k, n_k) are held out.
    flat_x = x.reshape(num_clients * n_max, dimension)
    flat_y = y.reshape(-1)
    starts = np.arange(num_clients) * n_max
    train = [s + np.arange(t) for s, t in zip(starts, n_train, strict=True)]
    heldout = [s + np.arange(t, n) for s, t, n in zip(starts, n_train, sizes, strict=True)]
    x_tr, y_tr, counts = pad_clients(flat_x, flat_y, train)
    x_ho, y_ho, ho_counts = pad_clients(flat_x, flat_y, heldout)
    test = np.concatenate(heldout)
    return FederatedData(
        x=jnp.asarray(x_tr),
        y=jnp.asarray(y_tr),
        counts=jnp.asarray(counts),
        x_heldout=jnp.asarray(x_ho),
        y_heldout=jnp.asarray(y_ho),
        heldout_counts=jnp.asarray(ho_counts),
        x_test=jnp.asarray(flat_x[test]),
        y_test=jnp.asarray(flat_y[test]),
        num_classes=num_classes,
    )


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6, 7))
def _leaf_examples(key, alpha, beta, iid, num_clients, n_max, dimension, num_classes):
    """Draws `n_max` examples per client: `(x f32[N, n_max, d], y int32[N, n_max])`."""
    # One draw, cut into the model's pieces: a single threefry call compiles much faster.
    shapes = {
        "u": (num_clients,),
        "b_mean": (num_clients,),
        "v": (num_clients, dimension),
        "w": (num_clients, dimension, num_classes),
        "b": (num_clients, num_classes),
        "x": (num_clients, n_max, dimension),
    }
    sizes = [math.prod(shape) for shape in shapes.values()]
    flat = jax.random.normal(key, (sum(sizes),))
    z = {
        name: part.reshape(shape)
        for (name, shape), part in zip(
            shapes.items(), jnp.split(flat, np.cumsum(sizes)[:-1]), strict=True
        )
    }
    if iid:
        v = jnp.zeros((num_clients, dimension))
        w = jnp.broadcast_to(z["w"][0], (num_clients, dimension, num_classes))
        b = jnp.broadcast_to(z["b"][0], (num_clients, num_classes))
    else:
        u = alpha * z["u"]
        v = beta * z["b_mean"][:, None] + z["v"]
        w = u[:, None, None] + z["w"]
        b = u[:, None] + z["b"]
    scale = jnp.arange(1, dimension + 1, dtype=jnp.float32) ** -0.6  # sqrt(Sigma_jj), j^-1.2
    x = v[:, None, :] + scale * z["x"]
    y = jnp.argmax(jnp.einsum("nmd,ndc->nmc", x, w) + b[:, None, :], axis=-1)
    return x, y.astype(jnp.int32)


def gaussian_mixture(
    *,
    seed: int = 0,
    num_train: int = 6000,
    num_test: int = 1000,
    num_classes: int = 10,
    image_shape: tuple[int, int, int] = (28, 28, 1),
    template_size: int = 7,
    noise: float = 8.0,
) -> CentralData:
    """An image-like Gaussian mixture: each class is a smooth template plus pixel noise.

    Class c has a template `mu_c`: an i.i.d. N(0, 1) image of `template_size^2` pixels
    per channel, resized (bilinear) to `image_shape` and rescaled to unit RMS, so the
    classes are spatially correlated patterns rather than isolated pixels. An example of
    class c is `mu_c + noise * eps`, `eps ~ N(0, I)`. Labels are balanced. With the
    default shape the MNIST models apply unchanged; `noise` sets the difficulty: with
    seed 0 the nearest-template accuracy is 1.00 at noise 4, 0.95 at 8 (the default)
    and 0.86 at 10.

    Args:
      seed: seed of templates and examples.
      num_train: size of the training pool (>= num_classes).
      num_test: size of the test set (>= 1).
      num_classes: C (>= 2).
      image_shape: (height, width, channels).
      template_size: resolution of the templates before resizing (>= 1).
      noise: standard deviation of the pixel noise (> 0).

    Returns:
      The centralised pool, to be partitioned.
    """
    num_classes = validation.int_in_range("num_classes", num_classes, 2, 1 << 16)
    num_train = validation.int_in_range("num_train", num_train, num_classes, 1 << 24)
    num_test = validation.positive_int("num_test", num_test)
    template_size = validation.positive_int("template_size", template_size)
    noise = validation.positive_float("noise", noise)
    if len(image_shape) != 3 or any(
        not isinstance(s, int) or isinstance(s, bool) or s < 1 for s in image_shape
    ):
        raise ValueError(f"image_shape must be (height, width, channels) >= 1, got {image_shape}.")
    x, y, x_test, y_test = _mixture_examples(
        jax.random.PRNGKey(validation.seed("seed", seed)),
        noise,
        num_train,
        num_test,
        num_classes,
        tuple(image_shape),
        template_size,
    )
    x, y = np.asarray(x, np.float32), np.asarray(y, np.int32)
    x_test, y_test = np.asarray(x_test, np.float32), np.asarray(y_test, np.int32)
    return CentralData(x, y, x_test, y_test, num_classes)


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _mixture_examples(key, noise, num_train, num_test, num_classes, image_shape, template_size):
    """Draws the templates, then balanced train and test examples of each class."""
    k_mu, k_eps, k_train, k_test = jax.random.split(key, 4)
    h, w, ch = image_shape
    small = jax.random.normal(k_mu, (num_classes, template_size, template_size, ch))
    mu = jax.image.resize(small, (num_classes, h, w, ch), "bilinear")
    mu = mu / jnp.sqrt(jnp.mean(mu**2, axis=(1, 2, 3), keepdims=True))
    # Labels cycle through the classes (balanced), then are shuffled.
    y = jnp.concatenate(
        [
            jax.random.permutation(k_train, jnp.arange(num_train) % num_classes),
            jax.random.permutation(k_test, jnp.arange(num_test) % num_classes),
        ]
    ).astype(jnp.int32)
    x = mu[y] + noise * jax.random.normal(k_eps, (num_train + num_test, h, w, ch))
    return x[:num_train], y[:num_train], x[num_train:], y[num_train:]
