"""Client-selection policies: factories returning a `fedjax_sel.Selector`.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**hyperparameters)`; launch scripts build policies by name through `make`.
"""

from bandits import kernels
from bandits.baselines import fixed, oracle, random, round_robin
from bandits.epsilon_greedy import epsilon_greedy
from bandits.local_accuracy import local_accuracy
from bandits.thompson import thompson
from bandits.ucb import ucb

REGISTRY = {
    "epsilon_greedy": epsilon_greedy,
    "local_accuracy": local_accuracy,
    "oracle": lambda num_clients, num_selected: oracle(),
    "random": random,
    "round_robin": round_robin,
    "thompson": thompson,
    "thompson_gaussian": lambda n, k, **kw: thompson(n, k, prior="gaussian", **kw),
    "ucb": ucb,
}


def make(name: str, num_clients: int, num_selected: int, **hyperparameters):
    """Builds the registered policy `name` (see `REGISTRY`)."""
    if name not in REGISTRY:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(sorted(REGISTRY))}.")
    return REGISTRY[name](num_clients, num_selected, **hyperparameters)


__all__ = [
    "REGISTRY",
    "epsilon_greedy",
    "fixed",
    "kernels",
    "local_accuracy",
    "make",
    "oracle",
    "random",
    "round_robin",
    "thompson",
    "ucb",
]
