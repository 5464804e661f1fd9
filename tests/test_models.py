"""Models: output shapes, parameter counts from the specs, bad input, masked losses."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import losses

MNIST, CIFAR = (28, 28, 1), (32, 32, 3)


def _dense(n_in, n_out):
    return n_in * n_out + n_out


def _conv(c_in, c_out):
    return 5 * 5 * c_in * c_out + c_out


# Counts worked by hand from each spec's architecture; the spec's stated number in the comment.
PARAMETER_COUNTS = {
    # Xia/Qu multinomial LR and Tong's SVM: W 784x10 + b ("LR-MNIST 7,850").
    ("logistic_regression", MNIST): _dense(784, 10),
    ("linear_svm", MNIST): _dense(784, 10),
    # Chen: "101,770 trainable parameters".
    ("mlp_128", MNIST): _dense(784, 128) + _dense(128, 10),
    ("mlp_200", MNIST): _dense(784, 200) + _dense(200, 10),
    # Huang FMNIST: 28->24->12->8->4, 800 -> 500 -> 10 ("about 0.43M").
    ("cnn_mnist", MNIST): _conv(1, 20) + _conv(20, 50) + _dense(800, 500) + _dense(500, 10),
    # Huang CIFAR-10: 32->28->14->10->5, 1600 -> 384 -> 192 -> 10 ("about 0.80M").
    ("cnn_cifar10", CIFAR): _conv(3, 64)
    + _conv(64, 64)
    + _dense(1600, 384)
    + _dense(384, 192)
    + _dense(192, 10),
    # Qu CIFAR-10, same padding: 32->16->8, 4096 -> 384 -> 192 -> 10 ("~1.76M params").
    ("cnn_cifar10_same", CIFAR): _conv(3, 64)
    + _conv(64, 64)
    + _dense(4096, 384)
    + _dense(384, 192)
    + _dense(192, 10),
    # Chen CIFAR-10: "313,802 trainable parameters".
    ("cnn_cifar10_small", CIFAR): _conv(3, 16) + _conv(16, 20) + _dense(500, 596) + _dense(596, 10),
}
STATED = {
    "logistic_regression": 7_850,
    "mlp_128": 101_770,
    "cnn_cifar10_small": 313_802,
}


@pytest.mark.parametrize("name, shape", list(PARAMETER_COUNTS))
def test_parameter_counts_match_the_specs(name, shape):
    model = models.get(name, shape, 10)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    assert models.num_params(params) == PARAMETER_COUNTS[name, shape]
    if name in STATED:
        assert models.num_params(params) == STATED[name]


def test_rounded_counts_stated_in_specs():
    assert round(PARAMETER_COUNTS["cnn_mnist", MNIST] / 1e6, 2) == 0.43
    assert round(PARAMETER_COUNTS["cnn_cifar10", CIFAR] / 1e6, 2) == 0.80
    assert round(PARAMETER_COUNTS["cnn_cifar10_same", CIFAR] / 1e6, 2) == 1.76


@pytest.mark.parametrize(
    "name, shape, num_classes",
    [
        ("logistic_regression", (60,), 10),
        ("linear_svm", MNIST, 10),
        ("mlp_128", (8, 8, 1), 10),
        ("mlp_200", MNIST, 62),
        ("cnn_mnist", MNIST, 10),
        ("cnn_cifar10", CIFAR, 10),
        ("cnn_cifar10_same", CIFAR, 10),
        ("cnn_cifar10_small", CIFAR, 10),
    ],
)
def test_output_shapes(name, shape, num_classes):
    # Traced abstractly: shapes without compiling every network.
    model = models.get(name, shape, num_classes)
    params = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    logits = jax.eval_shape(model.apply, params, jax.ShapeDtypeStruct((3, *shape), jnp.float32))
    assert logits.shape == (3, num_classes) and logits.dtype == jnp.float32
    assert model.name == name and model.input_shape == shape
    assert model.num_classes == num_classes


@pytest.mark.parametrize("name, shape", [("mlp_128", (8, 8, 1)), ("cnn_mnist", MNIST)])
def test_apply_is_per_example(name, shape):
    # A batch's logits are the examples' logits: padding rows cannot affect real rows.
    model = models.get(name, shape, 10)
    params = jax.jit(model.init)(jax.random.PRNGKey(0))
    x = jax.random.uniform(jax.random.PRNGKey(1), (3, *shape))
    apply = jax.jit(model.apply)
    batch = apply(params, x)
    padded = apply(params, jnp.concatenate([x[:1], 1e3 * jnp.ones((2, *shape))]))
    assert batch.shape == (3, 10) and np.all(np.isfinite(batch))
    np.testing.assert_allclose(padded[0], batch[0], rtol=1e-5, atol=1e-6)


def test_linear_models_start_at_zero_unless_asked():
    params = jax.jit(models.get("linear_svm", MNIST, 10).init)(jax.random.PRNGKey(0))
    assert all(not np.any(leaf) for leaf in jax.tree_util.tree_leaves(params))
    model = models.get("logistic_regression", MNIST, 10, zero_init=False)
    params = jax.jit(model.init)(jax.random.PRNGKey(0))
    assert np.any(params["Dense_0"]["kernel"])


def test_bad_input_is_a_value_error():
    with pytest.raises(ValueError, match="unknown model 'resnet'.*valid names"):
        models.get("resnet", MNIST, 10)
    with pytest.raises(ValueError, match="needs height and width >= 16"):
        models.get("cnn_mnist", (8, 8, 1), 10)
    with pytest.raises(ValueError, match="takes images"):
        models.get("cnn_cifar10", (784,), 10)
    with pytest.raises(ValueError, match="input_shape"):
        models.get("mlp_128", (28, -1), 10)
    with pytest.raises(ValueError, match="num_classes"):
        models.get("mlp_128", MNIST, 1)
    with pytest.raises(ValueError, match="unknown option"):
        models.get("mlp_128", MNIST, 10, zero_init=True)
    # Same padding keeps the spatial size, so small images are fine there.
    models.get("cnn_cifar10_same", (8, 8, 3), 10)


def test_default_losses():
    assert models.default_loss("linear_svm") is losses.multiclass_hinge
    assert models.default_loss("cnn_mnist") is losses.softmax_cross_entropy


def test_losses_hand_worked():
    logits = jnp.array([[2.0, 1.0, 0.0]] * 3)
    labels = jnp.array([0, 1, 2])
    # Hinge max(0, 1 + max_{j != y} s_j - s_y): 0, 1 + 2 - 1 = 2, 1 + 2 - 0 = 3.
    assert losses.multiclass_hinge(logits, labels) == pytest.approx(5.0 / 3.0)
    assert losses.multiclass_hinge(logits[1:2], labels[1:2]) == pytest.approx(2.0)
    assert losses.softmax_cross_entropy(jnp.zeros((1, 2)), jnp.array([0])) == pytest.approx(
        np.log(2.0)
    )
    assert losses.accuracy(logits, labels) == pytest.approx(1.0 / 3.0)
    mask = jnp.array([True, False, False])
    assert losses.accuracy(logits, labels, mask) == 1.0
    assert losses.multiclass_hinge(logits, labels, mask) == 0.0


@pytest.mark.parametrize("loss", [losses.softmax_cross_entropy, losses.multiclass_hinge])
def test_masked_loss_ignores_padded_rows_exactly(loss):
    loss = jax.jit(loss)
    key_x, key_y = jax.random.split(jax.random.PRNGKey(0))
    logits = jax.random.normal(key_x, (5, 4))
    labels = jax.random.randint(key_y, (5,), 0, 4)
    garbage = jnp.array([[1e30, -1e30, jnp.nan, jnp.inf], [jnp.nan] * 4])
    padded_logits = jnp.concatenate([logits, garbage])
    padded_labels = jnp.concatenate([labels, jnp.array([3, 0])])
    zero_padded = jnp.concatenate([logits, jnp.zeros((2, 4))])
    mask = jnp.arange(7) < 5
    # Bit for bit whatever the padded rows hold; equal to the unpadded loss up to the
    # order of the float sum.
    assert loss(padded_logits, padded_labels, mask) == loss(zero_padded, padded_labels, mask)
    np.testing.assert_allclose(
        loss(padded_logits, padded_labels, mask), loss(logits, labels), rtol=1e-6
    )
    assert losses.accuracy(padded_logits, padded_labels, mask) == losses.accuracy(logits, labels)
    assert loss(padded_logits, padded_labels, jnp.zeros(7, bool)) == 0.0


def test_masked_gradient_ignores_padded_rows():
    model = models.get("mlp_128", (6,), 3)
    params = jax.jit(model.init)(jax.random.PRNGKey(1))
    x = jax.random.normal(jax.random.PRNGKey(2), (4, 6))
    y = jnp.array([0, 1, 2, 1])
    x_pad = jnp.concatenate([x, 1e3 * jnp.ones((3, 6))])
    y_pad = jnp.concatenate([y, jnp.array([2, 2, 2])])
    mask = jnp.arange(7) < 4

    def objective(p, xs, ys, m=None):
        return losses.softmax_cross_entropy(model.apply(p, xs), ys, m)

    g = jax.jit(jax.grad(objective))(params, x, y)
    g_pad = jax.jit(jax.grad(objective))(params, x_pad, y_pad, mask)
    for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(g_pad), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
