"""Federated datasets: padded client arrays, partitioners, and sources."""

from fedjax_sel.data.federated import FederatedData

__all__ = ["FederatedData"]
