"""Client update: local minibatch SGD as a pure function of one client's padded data.

Client `c` owns `x[c, :count]`, `y[c, :count]` of arrays padded to `n_max` rows. Its update
runs either E epochs of shuffled minibatches or a fixed number of minibatch steps with
an optax optimizer, starting from the model it downloaded, and returns the change of
its parameters. Padding never reaches the loss: each minibatch carries a validity mask,
and a minibatch with no valid example leaves parameters and optimizer state unchanged,
so a client padded to any `n_max` trains exactly as the same client unpadded. A client
with `count = 0` (an empty cohort slot) returns a zero update. Given `num_used`, the client
trains on a uniformly random subset of `min(num_used, count)` of its examples, the same in
every epoch (Chen et al.'s D_k(t) samples of round t, their eq. 11 and spec A6).

Along the way the update records each real example's loss, from the forward pass of the
step that trains on it, for the root-mean-square statistics of Oort's utility
(`ClientResult.loss_rms`, `last_loss_rms`).

Shuffles and minibatch draws are built from `fold_in(key, i)` per position `i`, so they
depend on the key and the count only, never on `n_max`. The update reads its minibatches
straight from the shared arrays of all clients, so a cohort of k clients `vmap`-ed over
M trials holds M x k models and minibatches, never copies of the clients' data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import optax
from jax import lax

from fedjax_sel import validation
from models import losses

Params = Any


class ClientResult(NamedTuple):
    """What one client sends back.

    The per-example statistics are those of Oort's statistical utility (Lai et al., OSDI
    2021, eq. 1: `|B_i| sqrt(1/|B_i| sum_{k in B_i} loss(k)^2)`). Each example's loss is
    taken, like the minibatch loss, from the forward pass of the step that trains on it
    (the model before that step's update); padding never counts.

    Attributes:
      delta: pytree like the parameters, trained minus downloaded parameters.
      loss: f32[], mean minibatch training loss over the steps taken (0 if none).
      num_steps: f32[], minibatch steps that held at least one real example.
      loss_rms: f32[], `sqrt(mean loss(k)^2)` over every example of every step taken
        (an example drawn twice counts twice; 0 if none): the paper's utility per example.
      last_loss_rms: f32[], the same over the last step taken alone (0 if none): what
        FedScale's client reports (`loss_squared` of its last minibatch).
    """

    delta: Params
    loss: chex.Array
    num_steps: chex.Array
    loss_rms: chex.Array
    last_loss_rms: chex.Array


ClientUpdate = Callable[
    [Params, chex.Array, chex.Array, chex.Array, chex.Array, chex.PRNGKey], ClientResult
]


def _uniform_per_position(key: chex.PRNGKey, size: int) -> chex.Array:
    """f32[size] uniforms whose i-th value depends on (key, i) only, not on `size`."""
    return jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(jnp.arange(size))


def _shuffled(key, count, n_max):
    """int32[n_max]: the `count` real positions in a uniformly random order, then padding."""
    position = jnp.arange(n_max)
    priority = jnp.where(position < count, _uniform_per_position(key, n_max), 2.0 + position)
    return jnp.argsort(priority, stable=True)


def _epoch_batches(key, count, n_max, batch_size):
    """int32[S, B] example indices and bool[S, B] masks of one shuffled epoch.

    The `count` real examples come first, in a uniformly random order; the rest of the
    `S = ceil(n_max / B)` batches hold padding only and are masked out.
    """
    steps = -(-n_max // batch_size)
    order = _shuffled(key, count, n_max)
    order = jnp.concatenate([order, jnp.zeros((steps * batch_size - n_max,), order.dtype)])
    valid = jnp.arange(steps * batch_size) < count
    return order.reshape(steps, batch_size), valid.reshape(steps, batch_size)


def probe_minibatch(key, count, n_max, batch_size):
    """int32[B] indices and bool[B] mask of one minibatch drawn without replacement.

    The first minibatch of a shuffled epoch (`B = batch_size`): `min(count, B)` distinct
    real examples, uniformly at random, first; the other rows are masked padding. Like
    the training batches, it depends on the key and the count only, never on `n_max`.
    """
    index, valid = _epoch_batches(key, count, n_max, batch_size)
    return index[0], valid[0]


def _sampled_batches(key, count, num_steps, batch_size):
    """int32[S, B] indices drawn uniformly with replacement among the real examples."""

    def draw(step):
        u = _uniform_per_position(jax.random.fold_in(key, step), batch_size)
        return jnp.minimum(jnp.floor(u * count).astype(jnp.int32), jnp.maximum(count - 1, 0))

    index = jax.vmap(draw)(jnp.arange(num_steps))
    return index, jnp.broadcast_to(count > 0, index.shape)


def local_sgd(
    apply_fn: Callable[[Params, chex.Array], chex.Array],
    learning_rate: float = 0.01,
    batch_size: int = 32,
    num_epochs: int | None = 1,
    num_steps: int | None = None,
    optimizer: optax.GradientTransformation | None = None,
    loss: Callable[[chex.Array, chex.Array, chex.Array], chex.Array] | None = None,
) -> ClientUpdate:
    """Builds a client update: minibatch SGD on the client's real examples.

    The local rule of FedAvg (McMahan et al., 2017, Algorithm 1 ClientUpdate):
    `w <- w - eta * grad l(w; b)` over minibatches `b`, for E epochs or a fixed number of
    steps. One step of batch `rho` is the local rule of FedSGD (Xia et al., eq. 3).

    Args:
      apply_fn: `(params, x f32[B, ...]) -> logits f32[B, C]`.
      learning_rate: eta > 0 of the default optimizer `optax.sgd`.
      batch_size: B >= 1 examples per minibatch.
      num_epochs: E >= 1 shuffled passes over the client's data; None when
        `num_steps` is given.
      num_steps: a fixed number >= 1 of minibatches drawn with replacement; None when
        `num_epochs` is given.
      optimizer: an optax optimizer replacing `optax.sgd(learning_rate)`; its state
        starts fresh at every round.
      loss: `(logits f32[B, C], labels int32[B], mask f32[B]) -> f32[]`, the masked mean
        loss (e.g. `models.default_loss(name)`, the hinge loss of a linear SVM); None for
        softmax cross-entropy (`models.losses.softmax_cross_entropy`).

    Returns:
      `update(params, x f32[N, n_max, ...], y int32[N, n_max], client int32[],
      count int32[], key, num_used=None) -> ClientResult`, training on
      `x[client, :count]`, or, with `num_used` (int32[]), on a uniformly random subset of
      `min(num_used, count)` of those examples, the same in every epoch; pure and
      `vmap`-able over clients and trials.
    """
    lr = validation.positive_float("learning_rate", learning_rate)
    batch_size = validation.positive_int("batch_size", batch_size)
    if (num_epochs is None) == (num_steps is None):
        raise ValueError(
            f"exactly one of num_epochs and num_steps must be given, got num_epochs="
            f"{num_epochs!r}, num_steps={num_steps!r}."
        )
    if num_epochs is not None:
        num_epochs = validation.positive_int("num_epochs", num_epochs)
    else:
        num_steps = validation.positive_int("num_steps", num_steps)
    if optimizer is None:
        optimizer = optax.sgd(lr)
    elif not isinstance(optimizer, optax.GradientTransformation):
        raise ValueError(f"optimizer must be an optax.GradientTransformation, got {optimizer!r}.")

    if loss is None:
        loss = losses.softmax_cross_entropy
    elif not callable(loss):
        raise ValueError(f"loss must be callable (logits, labels, mask) -> f32[], got {loss!r}.")

    def loss_fn(params, xb, yb, mb):
        logits = apply_fn(params, xb)
        return loss(logits, yb, mb), logits

    def example_losses(logits, yb):
        """f32[B]: the loss of each example alone, `loss(logits[b], y[b], [1])`; exact for
        any masked-mean loss, from the logits of the step's own forward pass."""
        one = jnp.ones((1,), jnp.float32)
        return jax.vmap(lambda lb, yb: loss(lb[None], yb[None], one))(logits, yb)

    def run_batches(carry, rows, index, valid):
        """Minibatch steps; `rows(index)` gathers one minibatch of the client's examples."""

        def step(carry, batch):
            params, opt_state = carry
            idx, mb = batch
            xb, yb = rows(idx)
            (loss, logits), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, xb, yb, mb)
            squares = jnp.where(mb, example_losses(logits, yb) ** 2, 0.0)
            updates, new_opt_state = optimizer.update(grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            # A batch of padding only is no step at all: nothing moves, not even the
            # optimizer's counters, so padding cannot change the trajectory.
            taken = jnp.any(mb)
            keep = lambda new, old: jnp.where(taken, new, old)
            carry = (
                jax.tree.map(keep, new_params, params),
                jax.tree.map(keep, new_opt_state, opt_state),
            )
            stats = (
                jnp.where(taken, loss, 0.0),
                taken.astype(jnp.float32),
                jnp.sum(squares),
                jnp.sum(mb.astype(jnp.float32)),
            )
            return carry, stats

        return lax.scan(step, carry, (index, valid))

    def update(params, x, y, client, count, key, num_used=None):
        x, y = jnp.asarray(x), jnp.asarray(y)
        n_max = x.shape[1]
        if y.shape != x.shape[:2]:
            raise ValueError(f"y must have shape {x.shape[:2]} to match x, got {y.shape}.")
        count = jnp.asarray(count, jnp.int32)
        # Indexing the client's rows inside the scan gathers only the minibatch.
        rows = lambda idx: (x[client, idx], y[client, idx])
        if num_used is not None:
            # The subset: the first min(num_used, count) of the real examples shuffled.
            subset_key, key = jax.random.split(key)
            order = _shuffled(subset_key, count, n_max)
            rows = lambda idx: (x[client, order[idx]], y[client, order[idx]])
            count = jnp.minimum(jnp.asarray(num_used, jnp.int32), count)
        carry = (params, optimizer.init(params))
        if num_epochs is not None:

            def epoch(carry, e):
                index, valid = _epoch_batches(jax.random.fold_in(key, e), count, n_max, batch_size)
                return run_batches(carry, rows, index, valid)

            carry, stats = lax.scan(epoch, carry, jnp.arange(num_epochs))
        else:
            index, valid = _sampled_batches(key, count, num_steps, batch_size)
            carry, stats = run_batches(carry, rows, index, valid)
        losses, taken, squares, examples = stats
        steps = jnp.sum(taken)
        delta = jax.tree.map(jnp.subtract, carry[0], params)
        # Flattened, steps are in training order; the last one taken holds real examples.
        taken, squares, examples = taken.ravel(), squares.ravel(), examples.ravel()
        last = jnp.max(jnp.where(taken > 0, jnp.arange(taken.shape[0]), 0))
        return ClientResult(
            delta,
            jnp.sum(losses) / jnp.maximum(steps, 1.0),
            steps,
            jnp.sqrt(jnp.sum(squares) / jnp.maximum(jnp.sum(examples), 1.0)),
            jnp.sqrt(squares[last] / jnp.maximum(examples[last], 1.0)),
        )

    return update


def cohort_update(update_fn: ClientUpdate, chunk: int | None = None) -> Callable[..., ClientResult]:
    """Runs a client update for every client of a cohort, each from its own model.

    Two layouts of the same computation, equal up to float32 rounding (batched and
    single matrix products may round differently):
      - `chunk` None: every client at once, `vmap` over the cohort (and, under the
        runner's `vmap` over trials, over every trial's cohort);
      - `chunk` c: `lax.map` over the clients in `vmap`-ed chunks of c; under a `vmap`
        (the runner's over trials) the chunks run over the flattened (trial, client)
        axis, so c models train at once whatever the number of trials. On a CPU a chunk
        of models small enough to stay in cache across its local steps avoids
        streaming every model through memory at every step (docs/benchmarks_training.md).

    Args:
      update_fn: a `ClientUpdate` (`local_sgd`).
      chunk: clients per chunk (>= 1), or None for all at once.

    Returns:
      `cohort(start, x, y, clients int32[k], counts int32[k], keys [k], *rest [k]) ->
      ClientResult` stacked over the k clients: client j runs `update_fn(start[j], x, y,
      clients[j], counts[j], keys[j], *rest[j])`; `start` is a pytree of [k, ...] models.
    """
    if chunk is None:

        def vectorized(start, x, y, *per_client):
            in_axes = (0, None, None) + (0,) * len(per_client)
            return jax.vmap(update_fn, in_axes=in_axes)(start, x, y, *per_client)

        return vectorized
    chunk = validation.positive_int("chunk", chunk)

    def mapped(start, x, y, *per_client):
        one = lambda a: update_fn(a[0], x, y, *a[1])
        return lax.map(one, (start, per_client), batch_size=chunk)

    cohort = jax.custom_batching.custom_vmap(mapped)

    @cohort.def_vmap
    def flattened(axis_size, in_batched, start, x, y, *per_client):
        """Under a `vmap` over trials: chunks of the flattened (trial, client) axis."""
        out_batched = lambda out: jax.tree.map(lambda _: True, out)
        if any(jax.tree.leaves(in_batched[1:3])):
            # Per-trial client data: chunks of each trial's clients, `vmap`-ed over trials.
            in_axes = jax.tree.map(lambda b: 0 if b else None, tuple(in_batched))
            out = jax.vmap(mapped, in_axes=in_axes)(start, x, y, *per_client)
            return out, out_batched(out)
        batched = (start, per_client)
        flags = (in_batched[0], tuple(in_batched[3:]))

        def flat(a, b):
            a = a if b else jnp.broadcast_to(a[None], (axis_size,) + a.shape)
            return a.reshape((-1,) + a.shape[2:])

        start, per_client = jax.tree.map(flat, batched, flags)
        out = mapped(start, x, y, *per_client)
        out = jax.tree.map(lambda a: a.reshape((axis_size, -1) + a.shape[1:]), out)
        return out, out_batched(out)

    return cohort
