"""Environments of clients: gymnax-style `Env`s, with a registry by name.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**parameters)`; launch scripts build environments by name through `make`.
"""

from fedjax_sel.envs.dfl_delay import DFLDelayState, DFLRound, dfl_delay
from fedjax_sel.envs.exchange_time import ExchangeTimeState, exchange_time, true_coefficients
from fedjax_sel.envs.stationary import StationaryState, bernoulli, beta, gaussian
from fedjax_sel.envs.training import TrainingState, training
from fedjax_sel.envs.wireless_latency import WirelessState, wireless_latency

REGISTRY = {
    "bernoulli": bernoulli,
    "beta": beta,
    "dfl_delay": dfl_delay,
    "exchange_time": exchange_time,
    "gaussian": gaussian,
    "training": training,
    "wireless_latency": wireless_latency,
}


def make(name: str, num_clients: int, num_selected: int, **parameters):
    """Builds the registered environment `name` (see `REGISTRY`)."""
    if name not in REGISTRY:
        raise ValueError(
            f"unknown environment {name!r}; choose from {', '.join(sorted(REGISTRY))}."
        )
    return REGISTRY[name](num_clients, num_selected, **parameters)


__all__ = [
    "bernoulli",
    "beta",
    "dfl_delay",
    "DFLDelayState",
    "DFLRound",
    "exchange_time",
    "ExchangeTimeState",
    "gaussian",
    "make",
    "REGISTRY",
    "StationaryState",
    "training",
    "TrainingState",
    "true_coefficients",
    "wireless_latency",
    "WirelessState",
]
