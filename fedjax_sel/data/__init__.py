"""Federated datasets: padded client arrays, partitioners, and sources."""

from fedjax_sel.data.federated import FederatedData
from fedjax_sel.data.loader import DATASETS, load
from fedjax_sel.data.packing import CentralData, pack, pad_clients
from fedjax_sel.data.partition import (
    PARTITIONERS,
    apportion,
    dirichlet,
    iid,
    label_shards,
    mixed,
    mixed_sizes,
    unbalanced,
)
from fedjax_sel.data.sources import load_digits, load_tfds
from fedjax_sel.data.synthetic import gaussian_mixture, synthetic_leaf

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "CentralData",
    "FederatedData",
    "apportion",
    "dirichlet",
    "gaussian_mixture",
    "iid",
    "label_shards",
    "load",
    "load_digits",
    "load_tfds",
    "mixed",
    "mixed_sizes",
    "pack",
    "pad_clients",
    "synthetic_leaf",
    "unbalanced",
]
