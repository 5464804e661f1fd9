"""Federated training: local SGD on clients, server aggregation, training metrics."""

from fedjax_sel.fl.aggregate import (
    Aggregator,
    Cohort,
    HierarchicalState,
    decentralized,
    fedavg,
    hierarchical,
    weighted_mean_update,
)
from fedjax_sel.fl.client import ClientResult, cohort_update, local_sgd
from fedjax_sel.fl.evaluate import evaluate, evaluate_clients
from fedjax_sel.fl.metrics import rounds_to_accuracy, time_to_accuracy, time_to_loss

__all__ = [
    "Aggregator",
    "ClientResult",
    "Cohort",
    "cohort_update",
    "HierarchicalState",
    "decentralized",
    "evaluate",
    "evaluate_clients",
    "fedavg",
    "hierarchical",
    "local_sgd",
    "rounds_to_accuracy",
    "time_to_accuracy",
    "time_to_loss",
    "weighted_mean_update",
]
