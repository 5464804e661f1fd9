"""Partitioners: split a labelled pool of examples among N clients.

Each partitioner is a pure function of a label array `int[n]`, the number of clients and
a seed, and returns one index array per client (indices into the pool, in random order).
Partitioning runs once, on the host, before anything is traced, so it uses numpy.

A partition never leaves a client without data: where the requested split would, the
partitioner raises a `ValueError` that says which client or label is short.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from fedjax_sel import validation

ClientIndices = list[np.ndarray]


def _labels(labels) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(
            f"labels must be a non-empty int[n] array, got shape {arr.shape} dtype {arr.dtype}."
        )
    if arr.min() < 0:
        raise ValueError(f"labels must be >= 0, got min {arr.min()}.")
    return arr


def _num_clients(num_clients, n: int) -> int:
    return validation.int_in_range("num_clients", num_clients, 1, n)


def apportion(total: int, weights: np.ndarray) -> np.ndarray:
    """Splits `total` items in proportion to `weights` by largest remainders.

    Args:
      total: number of items to split (>= 0).
      weights: f[m], non-negative, not all zero.

    Returns:
      int64[m] counts summing to `total`, each within 1 of `total * w_i / sum(w)`.
    """
    w = np.asarray(weights, np.float64)
    exact = total * w / w.sum()
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    # Stable sort keeps ties in index order, so the split is a function of its input.
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def _shuffled_split(rng: np.random.Generator, indices: np.ndarray, sizes) -> ClientIndices:
    perm = rng.permutation(indices)
    return np.split(perm, np.cumsum(sizes)[:-1])


def iid(labels, num_clients: int, *, seed: int = 0, sizes=None) -> ClientIndices:
    """IID split: a uniform random permutation of the pool cut into client datasets.

    Args:
      labels: int[n], labels of the pool (only its length is used).
      num_clients: N.
      seed: seed of the permutation.
      sizes: optional int[N] of dataset sizes (each >= 1, sum <= n); by default the
        whole pool is split as evenly as possible (sizes differ by at most 1), as in
        "shuffled and then partitioned into the clients equally" (Xia et al., Sec. V.A).

    Returns:
      N index arrays; the clients' sets are disjoint.
    """
    n = _labels(labels).size
    num_clients = _num_clients(num_clients, n)
    rng = np.random.default_rng(validation.seed("seed", seed))
    if sizes is None:
        sizes = apportion(n, np.ones(num_clients))
    else:
        sizes = np.asarray(sizes)
        if (
            sizes.shape != (num_clients,)
            or not np.issubdtype(sizes.dtype, np.integer)
            or sizes.min() < 1
            or sizes.sum() > n
        ):
            raise ValueError(
                f"sizes must be int[{num_clients}] with entries >= 1 and sum <= {n}, got {sizes!r}."
            )
        sizes = np.append(sizes, n - sizes.sum())
    return _shuffled_split(rng, np.arange(n), sizes)[:num_clients]


def unbalanced(labels, num_clients: int, *, seed: int = 0, sigma: float = 1.0) -> ClientIndices:
    r"""IID labels with log-normal dataset sizes (quantity skew).

    Sizes are `1 + apportion(n - N, w)` with `w_i ~ LogNormal(0, sigma)`, so every client
    holds at least one example and the whole pool is used. LEAF's synthetic data draws
    sizes from a log-normal in the same way (Caldas et al. 2018; Li et al. 2020, Sec. 5.1).

    Args:
      labels: int[n], labels of the pool (only its length is used).
      num_clients: N.
      seed: seed of the sizes and the permutation.
      sigma: standard deviation of log-size; 0 gives the even split.

    Returns:
      N disjoint index arrays covering the pool.
    """
    n = _labels(labels).size
    num_clients = _num_clients(num_clients, n)
    sigma = validation.float_in_range("sigma", sigma, 0.0, 10.0)
    rng = np.random.default_rng(validation.seed("seed", seed))
    weights = rng.lognormal(0.0, sigma, num_clients)
    sizes = 1 + apportion(n - num_clients, weights)
    return _shuffled_split(rng, np.arange(n), sizes)


def _per_client_ints(name: str, value, num_clients: int, low: int, high: int) -> np.ndarray:
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = [value] * num_clients
    if not isinstance(value, (Sequence, np.ndarray)) or len(value) != num_clients:
        raise ValueError(f"{name} must be an int or a sequence of {num_clients} ints.")
    return np.array([validation.int_in_range(name, v, low, high) for v in value])


def label_shards(labels, num_clients: int, *, seed: int = 0, labels_per_client=2) -> ClientIndices:
    """Pathological label skew: client i holds exactly `k_i` distinct labels.

    Labels are dealt to clients one client at a time, each taking the `k_i` labels held
    by the fewest clients so far (ties broken at random), so the numbers of holders of
    any two labels differ by at most one. Each label's examples are then split as evenly
    as possible among its holders. This gives the "two labels per client" split of
    Qu et al. (Sec. VI-A) and of McMahan et al. (2017) with exact label sets, and with
    `labels_per_client=[5, 5, 1, ..., 1]` Xia et al.'s Fig. 6 split (two clients with
    five digits, the rest with one).

    Args:
      labels: int[n], labels of the pool.
      num_clients: N.
      seed: seed of the label deal and of the example split.
      labels_per_client: k, an int or a sequence of N ints, each in [1, number of labels].

    Returns:
      N disjoint index arrays. Labels held by no client (only when sum(k) is less than
      the number of labels) are left out; otherwise every example is assigned once.

    Raises:
      ValueError: if a label has fewer examples than holders (a client would get none).
    """
    labels = _labels(labels)
    num_clients = _num_clients(num_clients, labels.size)
    classes = np.unique(labels)
    k = _per_client_ints("labels_per_client", labels_per_client, num_clients, 1, classes.size)
    rng = np.random.default_rng(validation.seed("seed", seed))
    holders: list[list[int]] = [[] for _ in classes]
    for client in range(num_clients):
        load = np.array([len(h) for h in holders])
        for c in np.lexsort((rng.random(classes.size), load))[: k[client]]:
            holders[c].append(client)
    parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, label in enumerate(classes):
        if not holders[c]:
            continue
        members = np.flatnonzero(labels == label)
        if members.size < len(holders[c]):
            raise ValueError(
                f"label {label} has {members.size} examples but {len(holders[c])} clients "
                "hold it, so one would get none; lower labels_per_client or num_clients."
            )
        shares = _shuffled_split(rng, members, apportion(members.size, np.ones(len(holders[c]))))
        for client, share in zip(holders[c], shares, strict=True):
            parts[client].append(share)
    return [rng.permutation(np.concatenate(p)) for p in parts]


def dirichlet(
    labels,
    num_clients: int,
    *,
    seed: int = 0,
    alpha: float = 0.5,
    mode: str = "per_class",
    samples_per_client: int | None = None,
    min_size: int = 1,
    max_attempts: int = 100,
) -> ClientIndices:
    r"""Label skew drawn from a symmetric Dirichlet(alpha).

    Two readings are in use, both available:

    - `mode="per_class"` (default): for each label c, the shares of its examples that go
      to the N clients are `p_c ~ Dir_N(alpha)` and the counts are `apportion(n_c, p_c)`
      (Yurochkin et al. 2019; Li et al., NIID-Bench 2022, Sec. 4.1). Every example is
      assigned exactly once. Draws in which a client gets fewer than `min_size`
      examples are redrawn (at most `max_attempts` times), as NIID-Bench does.
    - `mode="per_client"`: client i draws its label distribution `q_i ~ Dir_C(alpha)` and
      then `Multinomial(m, q_i)` examples per label, sampled without replacement within
      the client and independently across clients, so clients may share examples
      (Hsu et al. 2019; Huang et al., Sec. 6.2, as read in the spec: m = 500 per client,
      overlap allowed because disjoint splits are impossible for small alpha).

    Small alpha gives clients few labels; alpha -> infinity gives the IID split.

    Args:
      labels: int[n], labels of the pool.
      num_clients: N.
      seed: seed of the draws.
      alpha: Dirichlet concentration (> 0), the paper's gamma_1.
      mode: "per_class" or "per_client".
      samples_per_client: m for `per_client` (default n // N); unused by `per_class`.
      min_size: smallest dataset a client may get under `per_class` (>= 1).
      max_attempts: redraws allowed under `per_class` before giving up.

    Returns:
      N index arrays.

    Raises:
      ValueError: if no draw gives every client `min_size` examples, or a `per_client`
        draw asks for more examples of a label than the pool holds.
    """
    labels = _labels(labels)
    n = labels.size
    num_clients = _num_clients(num_clients, n)
    alpha = validation.positive_float("alpha", alpha)
    if mode not in ("per_class", "per_client"):
        raise ValueError(f"mode must be 'per_class' or 'per_client', got {mode!r}.")
    rng = np.random.default_rng(validation.seed("seed", seed))
    classes = np.unique(labels)
    members = [np.flatnonzero(labels == c) for c in classes]
    if mode == "per_client":
        m = samples_per_client if samples_per_client is not None else n // num_clients
        m = validation.positive_int("samples_per_client", m)
        q = rng.dirichlet(np.full(classes.size, alpha), size=num_clients)
        counts = rng.multinomial(m, q)
        for c, pool in enumerate(members):
            if counts[:, c].max() > pool.size:
                raise ValueError(
                    f"a client draws {counts[:, c].max()} examples of label {classes[c]} but "
                    f"the pool has {pool.size}; lower samples_per_client or raise alpha."
                )
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for c, pool in enumerate(members):
            # Row-wise random order gives each client its own draw without replacement.
            order = np.argsort(rng.random((num_clients, pool.size)), axis=1)
            for client in range(num_clients):
                parts[client].append(pool[order[client, : counts[client, c]]])
        return [rng.permutation(np.concatenate(p)) for p in parts]

    min_size = validation.int_in_range("min_size", min_size, 1, max(1, n // num_clients))
    max_attempts = validation.positive_int("max_attempts", max_attempts)
    for _ in range(max_attempts):
        counts = np.stack(
            [apportion(pool.size, rng.dirichlet(np.full(num_clients, alpha))) for pool in members],
            axis=1,
        )
        if counts.sum(axis=1).min() >= min_size:
            break
    else:
        raise ValueError(
            f"no Dirichlet(alpha={alpha}) draw in {max_attempts} attempts gave every one of "
            f"{num_clients} clients at least {min_size} examples; raise alpha or lower "
            "num_clients."
        )
    parts = [[] for _ in range(num_clients)]
    for c, pool in enumerate(members):
        for client, share in enumerate(_shuffled_split(rng, pool, counts[:, c])):
            parts[client].append(share)
    return [rng.permutation(np.concatenate(p)) for p in parts]


def mixed(
    labels,
    num_clients: int,
    *,
    seed: int = 0,
    num_iid: int = 1,
    non_iid: str = "label_shards",
    iid_share: float | None = None,
    **non_iid_kw,
) -> ClientIndices:
    """An explicit mix: the first `num_iid` clients are IID, the rest non-IID.

    The pool is first cut at random into an IID part (a fraction `iid_share` of the
    examples) and a non-IID part; the IID part is split evenly among clients
    `0..num_iid-1`, and the non-IID part among the others by `non_iid`. This is the
    setting of Tong et al. (Sec. VI: clients 1-5 IID, the others non-IID).

    Args:
      labels: int[n], labels of the pool.
      num_clients: N.
      seed: seed of the cut and of both partitions.
      num_iid: number of IID clients, in [0, N].
      non_iid: name of the partitioner for the other clients ("label_shards",
        "dirichlet", "unbalanced" or "iid").
      iid_share: fraction of the pool given to the IID clients; default num_iid / N.
      **non_iid_kw: arguments of the non-IID partitioner (e.g. `labels_per_client`).

    Returns:
      N index arrays, IID clients first.
    """
    labels = _labels(labels)
    n = labels.size
    num_clients = _num_clients(num_clients, n)
    num_iid = validation.int_in_range("num_iid", num_iid, 0, num_clients)
    if non_iid not in PARTITIONERS or non_iid in ("mixed", "mixed_sizes"):
        valid = sorted(set(PARTITIONERS) - {"mixed", "mixed_sizes"})
        raise ValueError(f"non_iid must be one of {valid}, got {non_iid!r}.")
    share = num_iid / num_clients if iid_share is None else iid_share
    share = validation.probability("iid_share", share)
    rng = np.random.default_rng(validation.seed("seed", seed))
    iid_seed, non_iid_seed = rng.integers(2**31, size=2)
    perm = rng.permutation(n)
    if num_iid in (0, num_clients):
        n_iid = n if num_iid else 0
    else:
        n_iid = int(round(share * n))
    if n_iid < num_iid or n - n_iid < num_clients - num_iid:
        raise ValueError(
            f"iid_share={share} gives {n_iid} examples to {num_iid} IID clients and "
            f"{n - n_iid} to {num_clients - num_iid} others; each client needs at least one."
        )
    iid_pool, non_iid_pool = perm[:n_iid], perm[n_iid:]
    parts: ClientIndices = []
    if num_iid:
        parts += [iid_pool[p] for p in iid(labels[iid_pool], num_iid, seed=iid_seed)]
    if num_iid < num_clients:
        split = PARTITIONERS[non_iid](
            labels[non_iid_pool], num_clients - num_iid, seed=non_iid_seed, **non_iid_kw
        )
        parts += [non_iid_pool[p] for p in split]
    return parts


def mixed_sizes(
    labels,
    num_clients: int,
    *,
    seed: int = 0,
    num_iid: int = 5,
    labels_per_client: int = 2,
    sizes=None,
) -> ClientIndices:
    """IID clients first, then label-skewed ones, all of unequal sizes (Tong et al. A14).

    Client n holds |D_n| examples drawn without replacement from the pool. Sizes default
    to the spec's Uniform{1000..4000} for N = 20 (scaled by 20 / N), scaled once more by
    n / 60,000 to the pool (MNIST's 60,000 images keep the spec's numbers), all scaled
    down where their sum would exceed 5/6 of the pool (the mean draw's share), and at
    least `labels_per_client`. The first `num_iid` clients
    draw theirs uniformly from the whole pool (IID); each other client then takes the
    `labels_per_client` labels with the most examples left (ties at random), split as
    evenly as their remaining examples allow (McMahan et al.'s pathological label
    skew); the largest take theirs first, so that the labels' capacity lasts.

    Args:
      labels: int[n], labels of the pool.
      num_clients: N.
      seed: seed of the sizes and the draws.
      num_iid: IID clients, in [0, N] (the paper's clients 1-5).
      labels_per_client: labels of each non-IID client, in [1, number of labels].
      sizes: optional int[N] >= 1 of dataset sizes (sum <= n) instead of the default.

    Returns:
      N disjoint index arrays, IID clients first.

    Raises:
      ValueError: if the sizes do not fit the pool or a label-skewed client's
        `labels_per_client` labels with the most examples left hold fewer than its size.
    """
    labels = _labels(labels)
    n = labels.size
    num_clients = _num_clients(num_clients, n)
    num_iid = validation.int_in_range("num_iid", num_iid, 0, num_clients)
    classes = np.unique(labels)
    per = validation.int_in_range("labels_per_client", labels_per_client, 1, classes.size)
    rng = np.random.default_rng(validation.seed("seed", seed))
    if sizes is None:
        draws = rng.integers(1000, 4001, num_clients) * (20.0 / num_clients) * n / 60000.0
        # At most 5/6 of the pool (the mean draw's share), so that the labels last.
        draws = draws * min(1.0, (5.0 / 6.0) * n / draws.sum())
        sizes = np.maximum(np.floor(draws).astype(np.int64), per)
    sizes = np.asarray(sizes)
    if (
        sizes.shape != (num_clients,)
        or not np.issubdtype(sizes.dtype, np.integer)
        or np.any(sizes < 1)
        or sizes.sum() > n
    ):
        raise ValueError(
            f"sizes must be int[{num_clients}] with entries >= 1 and sum <= {n}, got {sizes!r}."
        )
    perm = rng.permutation(n)
    iid_end = int(sizes[:num_iid].sum())
    parts = np.split(perm[:iid_end], np.cumsum(sizes[:num_iid])[:-1])[:num_iid]
    rest = perm[iid_end:]
    left = [rest[labels[rest] == c] for c in classes]
    skewed: dict[int, np.ndarray] = {}
    # Largest first, so that the labels' capacity lasts for the small ones at the end.
    for client in num_iid + np.argsort(-sizes[num_iid:], kind="stable"):
        remaining = np.array([pool.size for pool in left])
        chosen = np.lexsort((rng.random(classes.size), -remaining))[:per]
        need = int(sizes[client])
        if remaining[chosen].sum() < need:
            raise ValueError(
                f"client {client} needs {need} examples of {per} labels, but the {per} "
                f"labels with the most left hold {remaining[chosen].sum()}; pass smaller "
                "sizes or a larger pool."
            )
        taken = []
        # Fair shares of what is still needed, the label with the fewest left first.
        for j, c in enumerate(chosen[np.argsort(remaining[chosen], kind="stable")]):
            m = min(int(remaining[c]), -(-need // (per - j)))
            taken.append(left[c][:m])
            left[c] = left[c][m:]
            need -= m
        skewed[int(client)] = rng.permutation(np.concatenate(taken))
    return parts + [skewed[c] for c in range(num_iid, num_clients)]


PARTITIONERS = {
    "iid": iid,
    "unbalanced": unbalanced,
    "label_shards": label_shards,
    "dirichlet": dirichlet,
    "mixed": mixed,
    "mixed_sizes": mixed_sizes,
}
