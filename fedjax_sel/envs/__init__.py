"""Environments of clients: gymnax-style `Env`s, with a registry by name.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**parameters)`, buildable from the two sizes alone; launch scripts build environments by
name through `make`. Availability processes (`availability.always`, `bernoulli`, `markov`,
`trace`) are parts any environment takes (`availability=`) or wears
(`with_availability`).

The training-backed environment imports flax and optax: it is loaded on first use
(`envs.training`, `envs.TrainingState`, or `make("training", ...)`), so that
`import fedjax_sel` stays light.
"""

from fedjax_sel.envs import availability
from fedjax_sel.envs.availability import Availability, with_availability
from fedjax_sel.envs.dfl_delay import DFLDelayParams, DFLDelayState, DFLRound, dfl_delay
from fedjax_sel.envs.exchange_time import (
    ExchangeTimeParams,
    ExchangeTimeState,
    exchange_time,
    true_coefficients,
)
from fedjax_sel.envs.opinion_surrogate import (
    OpinionSurrogateParams,
    OpinionSurrogateState,
    opinion_surrogate,
)
from fedjax_sel.envs.stationary import StationaryParams, StationaryState, bernoulli, beta, gaussian
from fedjax_sel.envs.wireless_latency import WirelessLatencyParams, WirelessState, wireless_latency
from fedjax_sel.registry import Registry

_LAZY = ("training", "TrainingParams", "TrainingState")


def _load_training():
    """Imports the training module (`training_env`) and binds its names here."""
    import importlib

    module = importlib.import_module("fedjax_sel.envs.training_env")
    globals().update({name: getattr(module, name) for name in _LAZY})
    return module


def _training(num_clients, num_selected, **parameters):
    """The training-backed environment (`fedjax_sel.envs.training_env.training`), imported on call.

    Without `data` and `model` it trains logistic regression on a small synthetic task
    (`training.synthetic_task`).
    """
    return _load_training().training(num_clients, num_selected, **parameters)


REGISTRY = Registry("environment")
REGISTRY.register("bernoulli", bernoulli)
REGISTRY.register("beta", beta)
REGISTRY.register("dfl_delay", dfl_delay)
REGISTRY.register("exchange_time", exchange_time)
REGISTRY.register("gaussian", gaussian)
REGISTRY.register("opinion_surrogate", opinion_surrogate)
REGISTRY.register("training", _training)
REGISTRY.register("wireless_latency", wireless_latency)


def make(name: str, num_clients: int, num_selected: int, **parameters):
    """Builds the registered environment `name` (see `REGISTRY`)."""
    return REGISTRY.make(name, num_clients, num_selected, **parameters)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_load_training(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "availability",
    "Availability",
    "bernoulli",
    "beta",
    "dfl_delay",
    "DFLDelayParams",
    "DFLDelayState",
    "DFLRound",
    "exchange_time",
    "ExchangeTimeParams",
    "ExchangeTimeState",
    "gaussian",
    "make",
    "opinion_surrogate",
    "OpinionSurrogateParams",
    "OpinionSurrogateState",
    "REGISTRY",
    "StationaryParams",
    "StationaryState",
    "training",
    "TrainingParams",
    "TrainingState",
    "true_coefficients",
    "wireless_latency",
    "WirelessLatencyParams",
    "WirelessState",
    "with_availability",
]
