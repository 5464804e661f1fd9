"""Flax models used by clients, behind the pure `Model` interface."""

from models.base import Model

__all__ = ["Model"]
