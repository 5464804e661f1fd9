"""fedjax-sel: vectorized simulation of multi-armed-bandit client selection for FL.

Importing it changes nothing in JAX and loads no training or plotting library: `envs`
loads on first use (its training environment needs flax and optax), `plot` imports
matplotlib when called, and the process-wide set-up for CPU runs is one explicit call,
`configure_cpu()`.
"""

import importlib

from fedjax_sel import metrics, threefry_cpu, validation
from fedjax_sel.cpu import configure_cpu
from fedjax_sel.plot import plot
from fedjax_sel.results import Results
from fedjax_sel.runner import simulate
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats, Selector

__version__ = "0.1.0"

# Submodules loaded on first use (PEP 562).
_LAZY = ("envs",)


def __getattr__(name):
    if name in _LAZY:
        return importlib.import_module(f"fedjax_sel.{name}")
    raise AttributeError(f"module 'fedjax_sel' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "Decision",
    "Env",
    "Feedback",
    "Results",
    "RoundInput",
    "RoundStats",
    "Selector",
    "configure_cpu",
    "envs",
    "metrics",
    "plot",
    "simulate",
    "threefry_cpu",
    "validation",
]
