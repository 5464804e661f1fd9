"""Environments of clients: gymnax-style `Env`s, with a registry by name.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**parameters)`; launch scripts build environments by name through `make`.
"""

from fedjax_sel.envs.stationary import StationaryState, bernoulli, beta, gaussian
from fedjax_sel.envs.training import TrainingState, training

REGISTRY = {
    "bernoulli": bernoulli,
    "beta": beta,
    "gaussian": gaussian,
    "training": training,
}


def make(name: str, num_clients: int, num_selected: int, **parameters):
    """Builds the registered environment `name` (see `REGISTRY`)."""
    if name not in REGISTRY:
        raise ValueError(
            f"unknown environment {name!r}; choose from {', '.join(sorted(REGISTRY))}."
        )
    return REGISTRY[name](num_clients, num_selected, **parameters)


__all__ = [
    "REGISTRY",
    "StationaryState",
    "TrainingState",
    "bernoulli",
    "beta",
    "gaussian",
    "make",
    "training",
]
