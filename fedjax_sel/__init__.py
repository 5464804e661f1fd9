"""fedjax-sel: vectorized simulation of multi-armed-bandit client selection for FL."""

from fedjax_sel import envs, threefry_cpu, validation
from fedjax_sel.plot import plot
from fedjax_sel.results import Results
from fedjax_sel.runner import simulate, use_all_cpu_cores
from fedjax_sel.types import Decision, Env, Feedback, RoundInput, RoundStats, Selector

__version__ = "0.1.0"

__all__ = [
    "Decision",
    "Env",
    "Feedback",
    "Results",
    "RoundInput",
    "RoundStats",
    "Selector",
    "envs",
    "plot",
    "simulate",
    "threefry_cpu",
    "use_all_cpu_cores",
    "validation",
]
