"""Local SGD and aggregation: vmap against loops, padding, hand-worked aggregations."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import models
from fedjax_sel import fl
from fedjax_sel.fl import client as client_lib

FEATURES, CLASSES = 5, 3


@pytest.fixture(scope="module")
def model():
    return models.get("mlp_128", (FEATURES,), CLASSES)


@pytest.fixture(scope="module")
def clients():
    rng = np.random.default_rng(0)
    n, n_max = 4, 11
    counts = np.array([11, 7, 1, 4], np.int32)
    x = rng.normal(size=(n, n_max, FEATURES)).astype(np.float32)
    y = rng.integers(0, CLASSES, size=(n, n_max)).astype(np.int32)
    pad = np.arange(n_max)[None, :] >= counts[:, None]
    x[pad], y[pad] = 0.0, 0
    return x, y, counts


def _tree_allclose(a, b, **kw):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), **kw)


@pytest.mark.parametrize("mode", [{"num_epochs": 2}, {"num_epochs": None, "num_steps": 3}])
def test_vmapped_update_equals_sequential_loop(model, clients, mode):
    x, y, counts = clients
    update = fl.local_sgd(model.apply, learning_rate=0.3, batch_size=3, **mode)
    params = model.init(jax.random.PRNGKey(0))
    keys = jax.random.split(jax.random.PRNGKey(1), len(counts))
    clients = np.arange(len(counts))
    batched = jax.jit(jax.vmap(update, in_axes=(None, None, None, 0, 0, 0)))(
        params, x, y, clients, counts, keys
    )
    single = jax.jit(update)
    for i in range(len(counts)):
        one = single(params, x[i : i + 1], y[i : i + 1], 0, counts[i], keys[i])
        _tree_allclose(
            jax.tree.map(lambda d, i=i: d[i], batched.delta), one.delta, rtol=1e-5, atol=1e-6
        )
        np.testing.assert_allclose(batched.loss[i], one.loss, rtol=1e-5)
        assert float(one.num_steps) > 0
        assert any(float(jnp.abs(d).max()) > 0 for d in jax.tree.leaves(one.delta))


def test_cohort_in_chunks_equals_the_vmap_layout_and_a_loop(model, clients):
    # 2 trials x 3 clients, each slot from its own model and on `used` of its examples:
    # chunks of the flattened (trial, client) axis (4 leaves a remainder of 2), the full
    # `vmap` and a plain loop over trials and clients agree up to float32 rounding.
    x, y, counts = clients
    update = fl.local_sgd(model.apply, learning_rate=0.3, batch_size=3, num_epochs=2)
    starts = jax.vmap(jax.vmap(model.init))(
        jax.random.split(jax.random.PRNGKey(0), 6).reshape(2, 3, -1)
    )
    slots = np.array([[0, 1, 3], [2, 0, 1]], np.int32)
    keys = jax.random.split(jax.random.PRNGKey(1), 6).reshape(2, 3, -1)
    used = np.array([[5, 2, 1], [9, 11, 3]], np.int32)
    args = (starts, x, y, slots, counts[slots], keys, used)
    pick = lambda i: tuple(a if a is x or a is y else jax.tree.map(lambda b: b[i], a) for a in args)
    chunk = 4
    in_axes = (0, None, None, 0, 0, 0, 0)
    chunked = jax.jit(jax.vmap(fl.cohort_update(update, chunk), in_axes=in_axes))(*args)
    vmapped = jax.jit(jax.vmap(fl.cohort_update(update), in_axes=in_axes))(*args)
    _tree_allclose(chunked, vmapped, rtol=1e-5, atol=1e-6)
    single = jax.jit(update)
    for t, j in np.ndindex(2, 3):
        one = single(*pick((t, j)))
        row = jax.tree.map(lambda a, t=t, j=j: a[t, j], chunked)
        _tree_allclose(row, one, rtol=1e-5, atol=1e-6)
    # Unbatched, and with per-trial client data (chunks within each trial).
    alone = jax.jit(fl.cohort_update(update, chunk))(*pick(1))
    _tree_allclose(alone, jax.tree.map(lambda a: a[1], vmapped), rtol=1e-5, atol=1e-6)
    per_trial = (0, 0, 0, 0, 0, 0, 0)
    stacked = (starts, np.stack([x, x]), np.stack([y, y]), *args[3:])
    by_trial = jax.jit(jax.vmap(fl.cohort_update(update, chunk), in_axes=per_trial))(*stacked)
    _tree_allclose(by_trial, vmapped, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="chunk"):
        fl.cohort_update(update, 0)


@pytest.mark.parametrize("mode", [{"num_epochs": 3}, {"num_epochs": None, "num_steps": 4}])
def test_padded_client_trains_exactly_as_unpadded(model, clients, mode):
    x, y, counts = clients
    # Adam has step counters: a skipped all-padding batch must not advance them.
    update = fl.local_sgd(model.apply, 0.1, 3, optimizer=optax.adam(0.05), **mode)
    params = model.init(jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(7)
    c = int(counts[1])
    padded = update(params, x, y, 1, counts[1], key)
    unpadded = update(params, x[1:2, :c], y[1:2, :c], 0, c, key)
    more = update(
        params, np.pad(x, ((0, 0), (0, 9), (0, 0))), np.pad(y, ((0, 0), (0, 9))), 1, c, key
    )
    _tree_allclose(padded.delta, unpadded.delta, rtol=1e-6, atol=1e-7)
    _tree_allclose(more.delta, unpadded.delta, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(padded.num_steps, unpadded.num_steps)
    expected_steps = 3 * -(-c // 3) if "num_steps" not in mode else 4
    assert float(unpadded.num_steps) == expected_steps


def test_empty_client_returns_zero_update(model, clients):
    x, y, _ = clients
    update = fl.local_sgd(model.apply, 0.5, 4, num_epochs=2)
    result = update(model.init(jax.random.PRNGKey(0)), x, y, 0, 0, jax.random.PRNGKey(0))
    assert all(np.all(np.asarray(d) == 0.0) for d in jax.tree.leaves(result.delta))
    assert float(result.num_steps) == 0.0 and float(result.loss) == 0.0
    assert float(result.loss_rms) == 0.0 and float(result.last_loss_rms) == 0.0


def _per_example_losses(logits, labels, loss_name):
    """f64[B] in NumPy: cross-entropy or Crammer-Singer hinge of each row alone."""
    s = np.asarray(logits, np.float64)
    true = s[np.arange(len(labels)), labels]
    if loss_name == "cross_entropy":
        top = s.max(1)
        return top + np.log(np.exp(s - top[:, None]).sum(1)) - true
    rival = np.where(np.eye(s.shape[1], dtype=bool)[labels], -np.inf, s).max(1)
    return np.maximum(0.0, 1.0 + rival - true)


def _reference_update(model, loss_name, x, y, client, count, key, lr, batch_size, mode):
    """A plain loop of SGD steps over the same minibatches: (delta, mean minibatch loss,
    the per-example losses of every step taken, in order)."""
    loss = models.LOSSES[loss_name]
    n_max = x.shape[1]
    if mode.get("num_steps"):
        index, valid = client_lib._sampled_batches(key, count, mode["num_steps"], batch_size)
        batches = list(zip(np.asarray(index), np.asarray(valid), strict=True))
    else:
        batches = []
        for e in range(mode["num_epochs"]):
            index, valid = client_lib._epoch_batches(
                jax.random.fold_in(key, e), count, n_max, batch_size
            )
            batches += list(zip(np.asarray(index), np.asarray(valid), strict=True))
    start = params = model.init(jax.random.PRNGKey(0))
    steps = []
    for index, valid in batches:
        if not valid.any():
            continue
        xb, yb = x[client, index[valid]], y[client, index[valid]]
        steps.append(_per_example_losses(model.apply(params, xb), yb, loss_name))
        mean = lambda p, xb=xb, yb=yb: loss(model.apply(p, xb), yb, np.ones(len(yb)))
        params = jax.tree.map(lambda p, g: p - lr * g, params, jax.grad(mean)(params))
    delta = jax.tree.map(jnp.subtract, params, start)
    return delta, np.mean([s.mean() for s in steps]), steps


@pytest.mark.parametrize(
    "loss_name, mode",
    [("cross_entropy", {"num_epochs": 2}), ("hinge", {"num_epochs": None, "num_steps": 3})],
)
def test_loss_rms_against_a_per_example_loop(model, clients, loss_name, mode):
    x, y, counts = clients
    lr, batch_size, key = 0.1, 3, jax.random.PRNGKey(9)
    loss = models.LOSSES[loss_name]
    update = jax.jit(fl.local_sgd(model.apply, lr, batch_size, loss=loss, **mode))
    params = model.init(jax.random.PRNGKey(0))
    # Client 1 holds 7 examples: batches of 3, 3 and 1 per epoch.
    got = update(params, x, y, 1, counts[1], key)
    delta, mean_loss, steps = _reference_update(
        model, loss_name, x, y, 1, int(counts[1]), key, lr, batch_size, mode
    )
    _tree_allclose(got.delta, delta, rtol=1e-4, atol=1e-6)
    every = np.concatenate(steps)
    # float32 cross-entropy near 0 is exact to its logits' rounding, ~1e-7 absolute.
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    close(got.loss, mean_loss)
    close(got.loss_rms, np.sqrt(np.mean(every**2)))
    close(got.last_loss_rms, np.sqrt(np.mean(steps[-1] ** 2)))
    if "num_steps" not in mode:
        assert len(steps[-1]) == 1 and len(every) == 2 * 7
    # The root mean square bounds the mean (Jensen), strictly unless all losses agree (a
    # last batch of one example: equal, up to float32 rounding).
    assert float(got.loss_rms) > every.mean() and float(got.last_loss_rms) > 0.1
    assert float(got.last_loss_rms) >= steps[-1].mean() * (1 - 1e-6)
    # The same client padded to a larger n_max reports the same numbers.
    wide = update(
        params, np.pad(x, ((0, 0), (0, 9), (0, 0))), np.pad(y, ((0, 0), (0, 9))), 1, 7, key
    )
    for field in ("loss", "num_steps", "loss_rms", "last_loss_rms"):
        np.testing.assert_allclose(getattr(wide, field), getattr(got, field), rtol=1e-6)


def _cohort(valid, arrived, num_examples, group=None, latency=None):
    k = len(valid)
    return fl.Cohort(
        valid=jnp.asarray(valid),
        arrived=jnp.asarray(arrived),
        num_examples=jnp.asarray(num_examples, jnp.float32),
        group=jnp.asarray(group if group is not None else [0] * k, jnp.int32),
        latency=jnp.asarray(latency if latency is not None else [1.0] * k, jnp.float32),
    )


def test_fedavg_by_hand():
    params = {"w": jnp.array([1.0, -1.0])}
    deltas = {"w": jnp.array([[1.0, 2.0], [3.0, 4.0], [100.0, 100.0], [50.0, 50.0]])}
    # Slot 2 is empty, slot 3 missed the deadline.
    cohort = _cohort([True, True, False, True], [True, True, True, False], [1, 3, 9, 5])
    got = fl.fedavg().update(params, deltas, cohort)["w"]
    np.testing.assert_allclose(got, [1 + (1 + 9) / 4, -1 + (2 + 12) / 4], rtol=1e-6)
    kept = fl.fedavg(drop_late=False).update(params, deltas, cohort)["w"]
    np.testing.assert_allclose(kept, [1 + (1 + 9 + 250) / 9, -1 + (2 + 12 + 250) / 9], rtol=1e-6)
    uniform = fl.fedavg("uniform").update(params, deltas, cohort)["w"]
    np.testing.assert_allclose(uniform, [1 + 2.0, -1 + 3.0], rtol=1e-6)
    nobody = _cohort([True, False], [False, True], [1, 1])
    two = {"w": deltas["w"][:2]}
    np.testing.assert_array_equal(fl.fedavg().update(params, two, nobody)["w"], params["w"])


def test_fedsgd_step_by_hand():
    """One local step of batch 1 + FedAvg is Xia et al. eq. (3), worked in numpy."""
    model = models.get("logistic_regression", (2,), 2)
    params = jax.tree.map(jnp.zeros_like, model.init(jax.random.PRNGKey(0)))
    gamma = 0.5
    xs = np.array([[[1.0, 2.0]], [[-1.0, 0.5]]], np.float32)
    ys = np.array([[0], [1]], np.int32)
    weights = np.array([2.0, 6.0])
    update = fl.local_sgd(model.apply, gamma, batch_size=1, num_epochs=None, num_steps=1)
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    result = jax.vmap(update, in_axes=(None, None, None, 0, 0, 0))(
        params, xs, ys, jnp.arange(2), jnp.array([1, 1]), keys
    )
    new = fl.fedavg().update(params, result.delta, _cohort([True, True], [True, True], weights))
    # Zero weights: softmax is uniform, grad_W = (p - onehot) x^T, grad_b = p - onehot.
    grads_w, grads_b = [], []
    for x, y in zip(xs[:, 0], ys[:, 0], strict=True):
        err = np.full(2, 0.5) - np.eye(2)[y]
        grads_w.append(np.outer(x, err))
        grads_b.append(err)
    v_w = (weights[:, None, None] * np.array(grads_w)).sum(0) / weights.sum()
    v_b = (weights[:, None] * np.array(grads_b)).sum(0) / weights.sum()
    dense = new["Dense_0"]
    np.testing.assert_allclose(dense["kernel"], -gamma * v_w, rtol=1e-6)
    np.testing.assert_allclose(dense["bias"], -gamma * v_b, rtol=1e-6)


def test_hierarchical_by_hand():
    agg = fl.hierarchical(num_edges=2, period=2, min_updates=1)
    state = agg.init({"w": jnp.array(0.0)})
    deltas = {"w": jnp.array([2.0, 4.0, 10.0, 20.0, 99.0])}
    # Edge 0: slots 0, 1 arrive (mean 3). Edge 1: slots 2, 3 are late, slot 4 empty;
    # with Z = 1 the edge waits for its fastest selected client, slot 3.
    cohort = _cohort(
        valid=[True, True, True, True, False],
        arrived=[True, True, False, False, True],
        num_examples=[1, 1, 1, 1, 1],
        group=[0, 0, 1, 1, 1],
        latency=[1.0, 2.0, 9.0, 7.0, 0.1],
    )
    state = agg.update(state, deltas, cohort)
    np.testing.assert_allclose(state.edge_params["w"], [3.0, 20.0])
    np.testing.assert_allclose(agg.global_params(state)["w"], 11.5)
    starts = agg.client_params(state, jnp.array([1, 0, 1]))["w"]
    np.testing.assert_allclose(starts, [20.0, 3.0, 20.0])
    # Round 2 (= T_ES): edge 0 gets nobody and keeps 3; edge 1 adds 1; cloud averages.
    cohort2 = cohort._replace(valid=jnp.array([False, False, True, False, False]))
    state = agg.update(state, {"w": jnp.ones(5)}, cohort2)
    np.testing.assert_allclose(state.edge_params["w"], [12.0, 12.0])
    assert int(state.round) == 2


def test_decentralized_by_hand():
    deltas = {"w": jnp.array([[1.0], [3.0], [10.0]])}
    cohort = _cohort([True, True, True], [True, True, False], [1, 3, 4], group=[0, 0, 1])
    exact = fl.decentralized(num_servers=2)
    state = exact.update(exact.init({"w": jnp.zeros(1)}), deltas, cohort)
    # Eq. (4): server 0 -> (1 + 9) / 4 = 2.5 over n_0 = 4; server 1 -> 10 over n_1 = 4.
    # Eq. (5): (4 * 2.5 + 4 * 10) / 8 = 6.25, equal to FedAvg over all scheduled clients.
    np.testing.assert_allclose(state["w"], [[6.25], [6.25]])
    fedavg = fl.fedavg(drop_late=False).update({"w": jnp.zeros(1)}, deltas, cohort)
    np.testing.assert_allclose(exact.global_params(state)["w"], fedavg["w"], rtol=1e-6)
    ring = np.array([[0.75, 0.25], [0.5, 0.5]])
    mixed = fl.decentralized(2, mixing=ring)
    state = mixed.update(mixed.init({"w": jnp.zeros(1)}), deltas, cohort)
    np.testing.assert_allclose(state["w"], [[0.75 * 2.5 + 2.5], [1.25 + 5.0]])
    np.testing.assert_allclose(mixed.global_params(state)["w"], [(4.375 + 6.25) / 2])
    late = fl.decentralized(2, drop_late=True).update(
        mixed.init({"w": jnp.zeros(1)}), deltas, cohort
    )
    np.testing.assert_allclose(late["w"], [[2.5], [2.5]])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"num_epochs": 0}, "num_epochs"),
        ({"num_epochs": None, "num_steps": 0}, "num_steps"),
        ({"num_epochs": 2, "num_steps": 2}, "exactly one"),
        ({"batch_size": 0}, "batch_size"),
        ({"optimizer": "adam"}, "optimizer"),
    ],
)
def test_local_sgd_rejects_bad_arguments(model, kwargs, match):
    with pytest.raises(ValueError, match=match):
        fl.local_sgd(model.apply, **kwargs)


def test_aggregators_reject_bad_arguments():
    with pytest.raises(ValueError, match="weighting"):
        fl.fedavg("median")
    with pytest.raises(ValueError, match="period"):
        fl.hierarchical(2, period=0)
    with pytest.raises(ValueError, match="min_updates"):
        fl.hierarchical(2, min_updates=0)
    with pytest.raises(ValueError, match="rows that sum to 1"):
        fl.decentralized(2, mixing=[[0.5, 0.2], [0.5, 0.5]])
    with pytest.raises(ValueError, match="shape"):
        fl.decentralized(3, mixing=np.eye(2))


def test_num_used_trains_on_exactly_that_many_examples():
    # One-hot examples and a linear model without bias: example i only moves row i of the
    # weights, so the rows that moved are the examples trained on. From zero weights one
    # step of the D used examples moves row i by -lr / D (1/C - onehot(y_i)), eq. (3).
    n_max, count, classes, lr = 12, 10, 3, 0.5
    x = jnp.eye(n_max)[None]
    y = jnp.arange(n_max)[None] % classes
    apply = lambda p, xb: xb @ p
    zeros = jnp.zeros((n_max, classes))
    one_step = client_lib.local_sgd(apply, lr, batch_size=n_max)
    two_epochs = client_lib.local_sgd(apply, lr, batch_size=2, num_epochs=2)
    run = jax.jit(
        jax.vmap(
            lambda upd, key, used: upd(zeros, x, y, 0, count, key, used).delta,
            in_axes=(None, 0, None),
        ),
        static_argnums=0,
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    for used in (1, 4, 10, 11):
        trained = min(used, count)
        deltas = np.asarray(run(one_step, keys, used))
        moved = np.any(deltas != 0, axis=2)
        np.testing.assert_array_equal(moved.sum(1), trained)
        assert not moved[:, count:].any()
        step = -lr / trained * (1 / classes - np.eye(classes)[np.asarray(y[0])])
        np.testing.assert_allclose(deltas, np.where(moved[..., None], step, 0.0), atol=1e-6)
        # A uniform subset: each example is used w.p. D / count (standard error <= 0.0112).
        np.testing.assert_allclose(moved[:, :count].mean(0), trained / count, atol=0.045)
        # Two epochs of batch 2 revisit the same subset.
        moved = np.any(np.asarray(run(two_epochs, keys[:50], used)) != 0, axis=2)
        np.testing.assert_array_equal(moved.sum(1), trained)
