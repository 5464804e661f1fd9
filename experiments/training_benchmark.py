"""FedAvg rounds per second: vectorized, `lax.map`-ped, and a per-client `jit` loop.

The logic of `launch/bench_training.py` (see its docstring), importable without flags.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import models
from fedjax_sel import data, fl
from fedjax_sel.ops import uniform_subset


def benchmark(
    num_clients: int,
    num_selected: int,
    num_trials: int,
    num_rounds: int,
    examples_per_client: int,
    features: int,
    model_name: str,
    batch_size: int,
    map_batch: int = 1,
    seed: int = 0,
) -> dict:
    """Runs both sides for `num_rounds` timed rounds; returns rounds per second of each."""
    n, k, m = num_clients, num_selected, num_trials
    clients = data.load(
        "gaussian_mixture",
        n,
        "iid",
        seed=seed,
        num_train=n * examples_per_client,
        image_shape=(features, 1, 1),
    )
    model = models.get(model_name, (features, 1, 1), clients.num_classes)
    update = fl.local_sgd(model.apply, 0.05, batch_size, num_epochs=1)
    aggregate = fl.fedavg()
    x, y, counts = clients.x, clients.y, clients.counts
    params0 = jax.vmap(model.init)(jax.random.split(jax.random.PRNGKey(seed), m))

    def cohort(key):
        """int32[k] clients of one trial's round and their client-update keys."""
        select_key, train_key = jax.random.split(key)
        selected = uniform_subset(jnp.ones((n,), bool), k, select_key)
        slots = jnp.nonzero(selected, size=k)[0]
        return slots, jax.vmap(lambda c: jax.random.fold_in(train_key, c))(slots)

    def aggregate_trial(params, slots, deltas):
        valid = jnp.ones((k,), bool)
        info = fl.Cohort(valid, valid, counts[slots].astype(jnp.float32), slots * 0, valid * 0.0)
        return aggregate.update(params, deltas, info)

    def trial_round(params, key):
        slots, keys = cohort(key)
        result = jax.vmap(update, in_axes=(None, None, None, 0, 0, 0))(
            params, x, y, slots, counts[slots], keys
        )
        return aggregate_trial(params, slots, result.delta)

    @jax.jit
    def mapped(params, round_key):
        slots, keys = jax.vmap(cohort)(round_key)
        starts = jax.tree.map(lambda p: jnp.repeat(p, k, axis=0), params)
        one = lambda a: update(a[0], x, y, a[1], counts[a[1]], a[2]).delta
        flat = (starts, slots.reshape(-1), keys.reshape((m * k,) + keys.shape[2:]))
        deltas = jax.lax.map(one, flat, batch_size=map_batch)
        deltas = jax.tree.map(lambda d: d.reshape((m, k) + d.shape[1:]), deltas)
        return jax.vmap(aggregate_trial)(params, slots, deltas)

    round_keys = lambda t: jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed + 1), t), m)
    vectorized = jax.jit(jax.vmap(trial_round))
    cohorts = jax.jit(jax.vmap(cohort))
    client = jax.jit(update)
    accumulate = jax.jit(lambda acc, delta, w: jax.tree.map(lambda a, d: a + w * d, acc, delta))
    apply_mean = jax.jit(lambda p, acc, total: jax.tree.map(lambda a, b: a + b / total, p, acc))

    def sequential_round(params, t):
        slots, keys = (np.asarray(a) for a in cohorts(round_keys(t)))
        out = []
        for trial in range(m):
            p = jax.tree.map(lambda a, trial=trial: a[trial], params)
            acc = jax.tree.map(jnp.zeros_like, p)
            total = 0.0
            for c, key in zip(slots[trial], keys[trial], strict=True):
                delta = client(p, x, y, c, counts[c], key).delta
                acc = accumulate(acc, delta, counts[c].astype(jnp.float32))
                total += float(counts[c])
            out.append(apply_mean(p, acc, total))
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *out)

    def timed(run):
        params = jax.block_until_ready(run(params0, 0))  # compile and warm up
        start = time.perf_counter()
        for t in range(1, num_rounds + 1):
            params = run(params, t)
        jax.block_until_ready(params)
        return params, time.perf_counter() - start

    vec_params, vec_s = timed(lambda p, t: vectorized(p, round_keys(t)))
    map_params, map_s = timed(lambda p, t: mapped(p, round_keys(t)))
    seq_params, seq_s = timed(sequential_round)
    gap = max(
        float(jnp.max(jnp.abs(a - b)))
        for other in (vec_params, map_params)
        for a, b in zip(jax.tree.leaves(other), jax.tree.leaves(seq_params), strict=True)
    )
    return {
        "device": jax.devices()[0].device_kind,
        "num_clients": n,
        "num_selected": k,
        "num_trials": m,
        "num_rounds": num_rounds,
        "examples_per_client": examples_per_client,
        "model": f"{model_name} on {features} features",
        "batch_size": batch_size,
        "map_batch": map_batch,
        "vectorized_rounds_per_s": num_rounds / vec_s,
        "mapped_rounds_per_s": num_rounds / map_s,
        "sequential_rounds_per_s": num_rounds / seq_s,
        "speedup_vectorized": seq_s / vec_s,
        "speedup_mapped": seq_s / map_s,
        "max_abs_param_difference": gap,
    }
