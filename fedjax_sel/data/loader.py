"""One entry point: a dataset name, a number of clients and a partition -> `FederatedData`."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from fedjax_sel import validation
from fedjax_sel.data import partition as partition_lib
from fedjax_sel.data import sources, synthetic
from fedjax_sel.data.federated import FederatedData
from fedjax_sel.data.packing import CentralData, pack

# Sources of a centralised pool, partitioned afterwards. Each takes keyword arguments.
POOLS: dict[str, Callable[..., CentralData]] = {
    "gaussian_mixture": synthetic.gaussian_mixture,
    "digits": sources.load_digits,
    **{name: functools.partial(sources.load_tfds, name) for name in sources.TFDS_DATASETS},
}
# Sources that come already split among clients (their partition is "natural").
NATURAL = {"synthetic": synthetic.synthetic_leaf}
DATASETS = tuple(sorted([*POOLS, *NATURAL]))
_PACK_ARGS = ("heldout_fraction", "heldout_from_test")


def _keywords(fn: Callable, exclude: tuple[str, ...] = ()) -> set[str]:
    params = inspect.signature(fn).parameters.values()
    return {
        p.name
        for p in params
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name not in exclude
    }


def _take(kw: dict, names: set[str]) -> dict:
    return {k: kw.pop(k) for k in list(kw) if k in names}


def load(
    name: str,
    num_clients: int,
    partition: str | None = None,
    seed: int = 0,
    **kw,
) -> FederatedData:
    """Builds a federated dataset by name.

    Keyword arguments are routed by name to the source (e.g. `data_dir`, `noise`,
    `alpha` of Synthetic), to the partitioner (e.g. `labels_per_client`, `alpha` of
    Dirichlet, `num_iid` and `non_iid` of a mix) and to the packing
    (`heldout_fraction`, `heldout_from_test`); an argument none of them takes is an error.

    Examples:
      `load("synthetic", 30, alpha=1.0, beta=1.0)` (FedProx's Synthetic(1, 1));
      `load("mnist", 100, "label_shards", labels_per_client=2, data_dir="~/tfds")`;
      `load("digits", 20, "mixed", num_iid=5, non_iid="label_shards")`;
      `load("gaussian_mixture", 40, "dirichlet", alpha=0.5)`.

    Args:
      name: one of `DATASETS`.
      num_clients: N (>= 1).
      partition: one of `partition.PARTITIONERS` for pooled datasets (default "iid");
        "natural" (the default) for "synthetic", whose clients generate their own data.
      seed: one seed for the source, the partition and the held-out draw.
      **kw: arguments of the source, the partitioner and `pack`.

    Returns:
      The padded `FederatedData`.

    Raises:
      ValueError: for an unknown name, partition or argument, before any data is read.
    """
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; valid names: {list(DATASETS)}.")
    num_clients = validation.positive_int("num_clients", num_clients)
    seed = validation.seed("seed", seed)
    kw = dict(kw)
    if name in NATURAL:
        if partition not in (None, "natural"):
            raise ValueError(
                f"{name} has its own (natural) partition; got partition={partition!r}."
            )
        source = NATURAL[name]
        source_kw = _take(kw, _keywords(source, ("num_clients", "seed")))
        if kw:
            raise ValueError(
                f"unknown argument(s) {sorted(kw)} for {name}; "
                f"valid: {sorted(_keywords(source, ('num_clients', 'seed')))}."
            )
        return source(num_clients, seed=seed, **source_kw)

    partition = "iid" if partition is None else partition
    if partition not in partition_lib.PARTITIONERS:
        raise ValueError(
            f"unknown partition {partition!r}; valid: {sorted(partition_lib.PARTITIONERS)}."
        )
    source = POOLS[name]
    source_args = _keywords(source, ("seed",))
    part_fn = partition_lib.PARTITIONERS[partition]
    part_args = _keywords(part_fn, ("labels", "num_clients", "seed"))
    if partition == "mixed":
        inner = kw.get("non_iid", "label_shards")
        if inner in partition_lib.PARTITIONERS:
            part_args |= _keywords(
                partition_lib.PARTITIONERS[inner], ("labels", "num_clients", "seed")
            )
    source_kw = _take(kw, source_args)
    part_kw = _take(kw, part_args)
    pack_kw = _take(kw, set(_PACK_ARGS))
    if kw:
        valid = sorted(source_args | part_args | set(_PACK_ARGS))
        raise ValueError(
            f"unknown argument(s) {sorted(kw)} for dataset {name!r} with partition "
            f"{partition!r}; valid: {valid}."
        )
    source_seed, part_seed, pack_seed = np.random.SeedSequence(seed).generate_state(3)
    if "seed" in _keywords(source):
        source_kw["seed"] = int(source_seed)
    data = source(**source_kw)
    indices = part_fn(data.y, num_clients, seed=int(part_seed), **part_kw)
    return pack(data, indices, seed=int(pack_seed), **pack_kw)
