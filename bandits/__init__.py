"""Client-selection policies: factories returning a `fedjax_sel.Selector`.

`REGISTRY` maps a name to a factory called as `factory(num_clients, num_selected,
**hyperparameters)`; launch scripts build policies by name through `make`. Adding a
policy is one module and one `REGISTRY.register` line; a variant of a policy is a
registration with its options bound (`thompson_gaussian`). Every entry is checked by
tests/test_policy_conformance.py.
"""

from bandits.baselines import (
    fixed,
    group_round_robin,
    oracle,
    random,
    round_robin,
    set_round_robin,
)
from bandits.belief_propagation import BPUCBState, bp_ucb, client_graph, kappa_bp
from bandits.cocs import COCSState, cocs
from bandits.cs_ucb import cs_ucb, cs_ucb_q, modified_cs_ucb
from bandits.dfl_ccmab import dfl_ccmab
from bandits.edge_baselines import cucb_base, cucb_super, edge_linucb, edge_random
from bandits.epsilon_greedy import epsilon_greedy
from bandits.local_accuracy import local_accuracy
from bandits.oort import OortState, oort
from bandits.per_server import per_server_epsilon_greedy, per_server_random
from bandits.power_of_choice import PowerOfChoiceState, power_of_choice
from bandits.rbcs_f import (
    FedCSState,
    RBCSFState,
    fedcs,
    lower_confidence_bound,
    rbcs_f,
    theory_exploration,
)
from bandits.super_arms import quick_init_ucb, super_arm_ucb
from bandits.thompson import thompson
from bandits.ucb import ucb
from fedjax_sel.registry import Registry
from fedjax_sel.types import Selector

REGISTRY = Registry("policy")
REGISTRY.register("bp_ucb", bp_ucb, uneven="fill")
REGISTRY.register("bp_ucb_literal", bp_ucb, uneven="fill", belief_mode="literal")
REGISTRY.register("cocs", cocs)
REGISTRY.register("cocs_literal", cocs, fill_in=False)
REGISTRY.register("cpow_d", power_of_choice, variant="cpow-d")
REGISTRY.register("cs_ucb", cs_ucb)
REGISTRY.register("cs_ucb_q", cs_ucb_q)
REGISTRY.register("cucb_base", cucb_base)
REGISTRY.register("cucb_super", cucb_super)
REGISTRY.register("dfl_ccmab", dfl_ccmab)
REGISTRY.register("dfl_ccmab_literal", dfl_ccmab, exploration_scale=1.0)
REGISTRY.register("edge_linucb", edge_linucb)
REGISTRY.register("edge_linucb_disjoint", edge_linucb, model="disjoint")
REGISTRY.register("edge_random", edge_random)
REGISTRY.register("epsilon_greedy", epsilon_greedy)
REGISTRY.register("fedcs", fedcs)
REGISTRY.register("group_round_robin", group_round_robin)
REGISTRY.register("local_accuracy", local_accuracy)
REGISTRY.register("modified_cs_ucb", modified_cs_ucb)
REGISTRY.register("oort", oort)
REGISTRY.register("oort_paper", oort, utility_loss="round", exhausted="exploit")
REGISTRY.register("oracle", oracle)
REGISTRY.register("per_server_epsilon_greedy", per_server_epsilon_greedy)
REGISTRY.register("per_server_random", per_server_random)
REGISTRY.register("pow_d", power_of_choice, variant="pow-d")
REGISTRY.register("quick_init_ucb", quick_init_ucb, uneven="fill")
REGISTRY.register("random", random)
REGISTRY.register("rbcs_f", rbcs_f)
REGISTRY.register("round_robin", round_robin)
REGISTRY.register("rpow_d", power_of_choice, variant="rpow-d")
REGISTRY.register("set_round_robin", set_round_robin)
REGISTRY.register("super_arm_ucb", super_arm_ucb)
REGISTRY.register("thompson", thompson)
REGISTRY.register("thompson_gaussian", thompson, prior="gaussian")
REGISTRY.register("ucb", ucb)


def make(name: str, num_clients: int, num_selected: int, **hyperparameters) -> Selector:
    """Builds the registered policy `name` (see `REGISTRY` and `Registry.make`)."""
    return REGISTRY.make(name, num_clients, num_selected, **hyperparameters)


__all__ = [
    "bp_ucb",
    "BPUCBState",
    "client_graph",
    "cocs",
    "COCSState",
    "cs_ucb",
    "cs_ucb_q",
    "cucb_base",
    "cucb_super",
    "dfl_ccmab",
    "edge_linucb",
    "edge_random",
    "epsilon_greedy",
    "fedcs",
    "FedCSState",
    "fixed",
    "group_round_robin",
    "kappa_bp",
    "local_accuracy",
    "lower_confidence_bound",
    "make",
    "modified_cs_ucb",
    "oort",
    "OortState",
    "oracle",
    "per_server_epsilon_greedy",
    "per_server_random",
    "power_of_choice",
    "PowerOfChoiceState",
    "quick_init_ucb",
    "random",
    "rbcs_f",
    "RBCSFState",
    "REGISTRY",
    "round_robin",
    "set_round_robin",
    "super_arm_ucb",
    "theory_exploration",
    "thompson",
    "ucb",
]
