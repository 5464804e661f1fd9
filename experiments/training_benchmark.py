"""FedAvg rounds per second: vectorized, `lax.map`-ped, and a per-client `jit` loop.

The logic of `launch/bench_training.py` (see its docstring), importable without flags.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

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
    update = fl.local_sgd(
        model.apply, 0.05, batch_size, num_epochs=1, loss=models.default_loss(model_name)
    )
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

    def trial_round(params, key, chunk):
        slots, keys = cohort(key)
        starts = jax.tree.map(lambda p: jnp.broadcast_to(p, (k,) + p.shape), params)
        result = fl.cohort_update(update, chunk)(starts, x, y, slots, counts[slots], keys)
        return aggregate_trial(params, slots, result.delta)

    round_keys = lambda t: jax.random.split(jax.random.fold_in(jax.random.PRNGKey(seed + 1), t), m)
    vectorized = jax.jit(jax.vmap(lambda p, key: trial_round(p, key, None)))
    mapped = jax.jit(jax.vmap(lambda p, key: trial_round(p, key, map_batch)))
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
        start, cpu = time.perf_counter(), time.process_time()
        for t in range(1, num_rounds + 1):
            params = run(params, t)
        jax.block_until_ready(params)
        return params, time.perf_counter() - start, time.process_time() - cpu

    vec_params, vec_s, vec_cpu = timed(lambda p, t: vectorized(p, round_keys(t)))
    map_params, map_s, map_cpu = timed(lambda p, t: mapped(p, round_keys(t)))
    seq_params, seq_s, seq_cpu = timed(sequential_round)
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
        "vectorized_cpu_s_per_round": vec_cpu / num_rounds,
        "mapped_cpu_s_per_round": map_cpu / num_rounds,
        "sequential_cpu_s_per_round": seq_cpu / num_rounds,
        "speedup_vectorized": seq_s / vec_s,
        "speedup_mapped": seq_s / map_s,
        "max_abs_param_difference": gap,
    }


def _best_seconds(fn, *args, repeats: int = 3) -> tuple[float, float]:
    """Best wall and process (CPU) seconds of `repeats` calls of a compiled `fn`."""
    jax.block_until_ready(fn(*args))  # compile and warm up
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(fn(*args))
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def roofline(
    num_selected: int,
    num_trials: int,
    examples_per_client: int,
    features: int,
    model_name: str,
    batch_size: int,
    stream_mib: int = 256,
    dot_size: int = 2048,
) -> dict:
    """This machine's compute and memory roofs, and the round's FLOPs and bytes per layout.

    Measured (best of 3, compiled, f32):
      - `dot_gflops`: one large `[S, S] x [S, S]` dot (`S = dot_size`), XLA's compute roof;
      - `batched_dot_gflops`: the first layer's forward dot of every model of a round at
        once, `[M k, B, d0] x [M k, d0, d1]`, as the vectorized round runs it (each model's
        weights read from memory);
      - `cached_dot_gflops`: the same `[B, d0] x [d0, d1]` dot for M k minibatches against
        one weight matrix that stays in cache, as a per-client loop runs it;
      - `stream_gbps`: `a + b` in place over f32 arrays of `stream_mib` MiB each (3
        arrays moved), and `sum_gbps`: a sum over one of them, both well above the caches;
      - `vectorized_steps_s`: the training of a vectorized round alone, `lax.scan` over
        its local steps of one SGD step of all M k models at once (`vmap`), with the
        GFLOP/s and GB/s (the bytes counted below) it achieves;
      - `client_update_s`: one client's compiled update (its local epoch), alone.
    Counted: `step_flops`, one model's local SGD step (forward, backward, update) for a
    dense model, `2 B (2 sum_l d_l d_{l+1} + sum_{l>0} d_l d_{l+1})` plus the elementwise
    work, against `xla_step_flops` of XLA's cost analysis of the compiled step; bytes of
    memory traffic per local step of the round: vectorized, every model's parameters
    are read by the forward pass and the update, its gradients written and read and its
    new parameters written (5 parameter-sized passes) and its minibatch read; per client,
    the one model stays in cache (2 x parameter bytes, here under the 1-2 MiB of a core's
    L2) and only the minibatch is read. The bounds are `round FLOPs / roof` and
    `round bytes / stream_gbps`; a round's time is at least the larger.
    """
    m, k, b = num_trials, num_selected, batch_size
    model = models.get(model_name, (features, 1, 1), 10)
    loss = models.default_loss(model_name)
    params = model.init(jax.random.PRNGKey(0))
    kernels = [p for p in jax.tree.leaves(params) if p.ndim == 2]
    if not kernels:
        raise ValueError(f"model_name must name a dense model of `models`, got {model_name!r}.")
    param_bytes = sum(p.size * p.dtype.itemsize for p in jax.tree.leaves(params))
    d0, d1 = kernels[0].shape
    models_per_round, steps = m * k, -(-examples_per_client // b)
    step_flops = sum(
        2 * b * p.shape[0] * p.shape[1] * (2 if i == 0 else 3) for i, p in enumerate(kernels)
    )

    def sgd_step(p, xb, yb):
        mask = jnp.ones((b,), jnp.float32)
        grads = jax.grad(lambda q: loss(model.apply(q, xb), yb, mask))(p)
        return jax.tree.map(lambda w, g: w - 0.05 * g, p, grads)

    xb, yb = jnp.ones((b, features), jnp.float32), jnp.zeros((b,), jnp.int32)
    cost = jax.jit(sgd_step).lower(params, xb, yb).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list | tuple) else cost
    rng = np.random.default_rng(0)
    big = jnp.asarray(rng.standard_normal((dot_size, dot_size), np.float32))
    dot_s, _ = _best_seconds(jax.jit(jnp.dot), big, big)
    xs = jnp.asarray(rng.standard_normal((models_per_round, b, d0), np.float32))
    ws = jnp.asarray(rng.standard_normal((models_per_round, d0, d1), np.float32))
    batched_s, _ = _best_seconds(jax.jit(lambda x, w: jnp.einsum("mbi,mio->mbo", x, w)), xs, ws)
    cached = jax.jit(lambda x, w: lax.scan(lambda c, xi: (c + jnp.sum(xi @ w), None), 0.0, x)[0])
    cached_s, _ = _best_seconds(cached, xs, ws[0])
    del ws
    stacked = jax.tree.map(lambda p: jnp.tile(p, (models_per_round,) + (1,) * p.ndim), params)
    ys = jnp.zeros((models_per_round, b), jnp.int32)

    def vectorized_steps(p, x, y):
        """`steps` SGD steps of all M k models at once, on one minibatch each."""
        return lax.scan(lambda q, _: (jax.vmap(sgd_step)(q, x, y), None), p, None, steps)[0]

    vec_steps = jax.jit(vectorized_steps, donate_argnums=0)
    stacked = jax.block_until_ready(vec_steps(stacked, xs, ys))  # compile and warm up
    start, cpu = time.perf_counter(), time.process_time()
    stacked = jax.block_until_ready(vec_steps(stacked, xs, ys))
    vec_steps_s, vec_steps_cpu = time.perf_counter() - start, time.process_time() - cpu
    del stacked, xs
    n = stream_mib * 2**20 // 4
    a = jnp.asarray(rng.standard_normal(n, np.float32))
    c = a[::-1]
    # In place (the output reuses a donated input), so no fresh pages are touched.
    add = jax.jit(jnp.add, donate_argnums=0)
    a = jax.block_until_ready(add(a, c))
    add_s = []
    for _ in range(3):
        start = time.perf_counter()
        a = jax.block_until_ready(add(a, c))
        add_s.append(time.perf_counter() - start)
    add_s = min(add_s)
    sum_s, _ = _best_seconds(jax.jit(jnp.sum), a)
    del a, c
    shape = (features, 1, 1)
    clients = data.load(
        "gaussian_mixture", 2, "iid", num_train=2 * examples_per_client, image_shape=shape
    )
    update = jax.jit(fl.local_sgd(model.apply, 0.05, b, num_epochs=1, loss=loss))
    count, key = clients.counts[0], jax.random.PRNGKey(1)
    client_s, client_cpu = _best_seconds(update, params, clients.x, clients.y, 0, count, key)
    dot_gflops = 2 * dot_size**3 / dot_s / 1e9
    batched_gflops = 2 * models_per_round * b * d0 * d1 / batched_s / 1e9
    cached_gflops = 2 * models_per_round * b * d0 * d1 / cached_s / 1e9
    stream_gbps = 3 * n * 4 / add_s / 1e9
    round_flops = models_per_round * steps * step_flops
    minibatch_bytes = b * (features * 4 + 4)
    vec_bytes = models_per_round * steps * (5 * param_bytes + minibatch_bytes)
    client_bytes = models_per_round * steps * minibatch_bytes
    vec_bound = max(round_flops / (dot_gflops * 1e9), vec_bytes / (stream_gbps * 1e9))
    client_bound = max(round_flops / (cached_gflops * 1e9), client_bytes / (stream_gbps * 1e9))
    return {
        "device": jax.devices()[0].device_kind,
        "dot_gflops": dot_gflops,
        "batched_dot_gflops": batched_gflops,
        "cached_dot_gflops": cached_gflops,
        "stream_gbps": stream_gbps,
        "sum_gbps": n * 4 / sum_s / 1e9,
        "param_bytes": param_bytes,
        "local_steps": steps,
        "step_flops": step_flops,
        "xla_step_flops": float(cost.get("flops", float("nan"))),
        "xla_step_bytes_accessed": float(cost.get("bytes accessed", float("nan"))),
        "round_gflop": round_flops / 1e9,
        "vectorized_round_gb": vec_bytes / 1e9,
        "per_client_round_gb": client_bytes / 1e9,
        "vectorized_compute_bound_s": round_flops / (dot_gflops * 1e9),
        "vectorized_memory_bound_s": vec_bytes / (stream_gbps * 1e9),
        "per_client_compute_bound_s": round_flops / (cached_gflops * 1e9),
        "vectorized_steps_s": vec_steps_s,
        "vectorized_steps_cpu_s": vec_steps_cpu,
        "vectorized_steps_gflops": round_flops / vec_steps_s / 1e9,
        "vectorized_steps_gbps": vec_bytes / vec_steps_s / 1e9,
        "client_update_s": client_s,
        "client_update_cpu_s": client_cpu,
        "client_update_gflops": steps * step_flops / client_s / 1e9,
        "vectorized_max_rounds_per_s": 1 / vec_bound,
        "per_client_max_rounds_per_s": 1 / client_bound,
    }
