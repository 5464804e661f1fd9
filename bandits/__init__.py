"""Client-selection policies: factories returning a `fedjax_sel.Selector`.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**hyperparameters)`; launch scripts build policies by name through `make`.
"""

from bandits.baselines import fixed, group_round_robin, oracle, random, round_robin
from bandits.cs_ucb import cs_ucb, cs_ucb_q, modified_cs_ucb
from bandits.dfl_ccmab import dfl_ccmab
from bandits.epsilon_greedy import epsilon_greedy
from bandits.local_accuracy import local_accuracy
from bandits.per_server import per_server_epsilon_greedy, per_server_random
from bandits.rbcs_f import RBCSFState, fedcs, lower_confidence_bound, rbcs_f, theory_exploration
from bandits.thompson import thompson
from bandits.ucb import ucb

REGISTRY = {
    "cs_ucb": cs_ucb,
    "cs_ucb_q": cs_ucb_q,
    "dfl_ccmab": dfl_ccmab,
    "dfl_ccmab_literal": lambda n, k, **kw: dfl_ccmab(n, k, exploration_scale=1.0, **kw),
    "epsilon_greedy": epsilon_greedy,
    "fedcs": fedcs,
    "group_round_robin": group_round_robin,
    "local_accuracy": local_accuracy,
    "modified_cs_ucb": modified_cs_ucb,
    "oracle": lambda num_clients, num_selected: oracle(),
    "per_server_epsilon_greedy": per_server_epsilon_greedy,
    "per_server_random": per_server_random,
    "random": random,
    "rbcs_f": rbcs_f,
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
    "cs_ucb",
    "cs_ucb_q",
    "dfl_ccmab",
    "epsilon_greedy",
    "fedcs",
    "fixed",
    "group_round_robin",
    "local_accuracy",
    "lower_confidence_bound",
    "make",
    "modified_cs_ucb",
    "oracle",
    "per_server_epsilon_greedy",
    "per_server_random",
    "random",
    "rbcs_f",
    "RBCSFState",
    "REGISTRY",
    "round_robin",
    "theory_exploration",
    "thompson",
    "ucb",
]
