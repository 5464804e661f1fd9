"""Environments of clients: gymnax-style `Env`s, with a registry by name.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**parameters)`, buildable from the two sizes alone; launch scripts build environments by
name through `make`. Availability processes (`availability.always`, `bernoulli`, `markov`,
`trace`) are parts any environment takes (`availability=`) or wears
(`with_availability`).

The training-backed environments import flax and optax: they are loaded on first use
(`envs.training`, `envs.TrainingState`, `envs.goal_directed`, or `make("training", ...)`,
`make("fl_fa", ...)`, `make("fl_da", ...)`), so that `import fedjax_sel` stays light.
"""

from fedjax_sel.envs import availability, devices
from fedjax_sel.envs.availability import Availability, with_availability
from fedjax_sel.envs.dfl_delay import DFLDelayParams, DFLDelayState, DFLRound, dfl_delay
from fedjax_sel.envs.exchange_time import (
    ExchangeTimeParams,
    ExchangeTimeState,
    exchange_time,
    true_coefficients,
)
from fedjax_sel.envs.hierarchical import HierarchicalParams, HierarchicalState, hierarchical
from fedjax_sel.envs.opinion_surrogate import (
    OpinionSurrogateParams,
    OpinionSurrogateState,
    opinion_surrogate,
)
from fedjax_sel.envs.stationary import StationaryParams, StationaryState, bernoulli, beta, gaussian
from fedjax_sel.envs.wireless_latency import WirelessLatencyParams, WirelessState, wireless_latency
from fedjax_sel.registry import Registry

_LAZY = {
    "training": "training_env",
    "TrainingParams": "training_env",
    "TrainingState": "training_env",
    "goal_directed": "goal_directed",
    "GoalDirectedParams": "goal_directed",
    "GoalDirectedState": "goal_directed",
}


def _load(module_name: str):
    """Imports a training-backed module and binds its lazy names here."""
    import importlib

    module = importlib.import_module(f"fedjax_sel.envs.{module_name}")
    names = [name for name, owner in _LAZY.items() if owner == module_name]
    globals().update({name: getattr(module, name) for name in names})
    return module


def _training(num_clients, num_selected, **parameters):
    """The training-backed environment (`fedjax_sel.envs.training_env.training`), imported on call.

    Without `data` and `model` it trains logistic regression on a small synthetic task
    (`training.synthetic_task`).
    """
    return _load("training_env").training(num_clients, num_selected, **parameters)


def _goal_directed(num_clients, num_selected, **parameters):
    """Tong et al.'s slots (`fedjax_sel.envs.goal_directed.goal_directed`), imported on
    call: "fl_fa" (the set reward) and "fl_da" (each client's own opinion); without
    `data` and `model` on `goal_directed_task`."""
    return _load("goal_directed").goal_directed(num_clients, num_selected, **parameters)


REGISTRY = Registry("environment")
REGISTRY.register("bernoulli", bernoulli)
REGISTRY.register("beta", beta)
REGISTRY.register("devices", devices.devices)
REGISTRY.register("dfl_delay", dfl_delay)
REGISTRY.register("exchange_time", exchange_time)
REGISTRY.register(
    "fl_da", _goal_directed, lambda: _load("goal_directed").goal_directed, analytics="da"
)
REGISTRY.register(
    "fl_fa", _goal_directed, lambda: _load("goal_directed").goal_directed, analytics="fa"
)
REGISTRY.register("gaussian", gaussian)
REGISTRY.register("hierarchical", hierarchical)
REGISTRY.register("opinion_surrogate", opinion_surrogate)
REGISTRY.register("training", _training, lambda: _load("training_env").training)
REGISTRY.register("wireless_latency", wireless_latency)


def make(name: str, num_clients: int, num_selected: int, **parameters):
    """Builds the registered environment `name` (see `REGISTRY`)."""
    return REGISTRY.make(name, num_clients, num_selected, **parameters)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(_load(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "availability",
    "Availability",
    "bernoulli",
    "beta",
    "devices",
    "dfl_delay",
    "DFLDelayParams",
    "DFLDelayState",
    "DFLRound",
    "exchange_time",
    "ExchangeTimeParams",
    "ExchangeTimeState",
    "gaussian",
    "hierarchical",
    "HierarchicalParams",
    "HierarchicalState",
    "goal_directed",
    "GoalDirectedParams",
    "GoalDirectedState",
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
