"""NumPy references of the simulator's policies: what JAX is measured against.

Each reference is what a careful researcher writes without JAX: one trial at a time, a
Python loop over rounds, each round vectorised over the clients with NumPy.

- `stationary`: the stationary-bandit policies of `bandits.REGISTRY` on the Bernoulli
  environment (`REGISTRY`, `simulate`), timed by `launch.bench` at any N;
- `xia`: CS-UCB and CS-UCB-Q on the latency model of Xia et al. (2020);
- `huang`: RBCS-F on the exchange-time model of Huang et al. (2021);
- `chen`: CC-MAB scheduling on the edge-server delays of Chen et al. (2025);
- `qu`: COCS on the hierarchical network of Qu et al., and the exact assignment
  (`assignment_milp`) that validates the assignment kernels;
- `tong`: Quick-Init UCB and BP-UCB on the opinion surrogate of Tong et al.;
- `beyond`: Oort and Power-of-Choice on the heterogeneous-device environment.
- `fairness`: the selection-fairness totals the references report (Jain's index).

`PAPER` registers each paper policy's reference on its paper's setting, with the jitted
run of the same policy on the same environment, for `launch.bench --policies=<name>`.
Every paper module follows one interface: `numpy_trial_<policy>(rng, num_rounds)` runs one
NumPy trial and returns its headline metrics, named like the jitted `Results` totals they
match; `jax_run_<policy>(num_trials, num_rounds, seed)` builds the environment and the
jitted policy once and returns a call that runs the whole program and returns the mean
over trials of the same metrics (a second call compiles nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from experiments.references import beyond, chen, huang, qu, tong, xia


class Case(NamedTuple):
    """A paper policy's reference and jitted run on one setting.

    Attributes:
      setting: the paper, the figure and the sizes, in words.
      num_clients: N of the setting, for client-rounds per second (trials x rounds x N / s).
      jax_run: `(num_trials, num_rounds, seed) -> (() -> {metric: mean over trials})`.
      numpy_trial: `(rng, num_rounds) -> {metric: value}`, one trial of the reference.
    """

    setting: str
    num_clients: int
    jax_run: Callable[[int, int, int], Callable[[], dict[str, float]]]
    numpy_trial: Callable[[np.random.Generator, int], dict[str, float]]


PAPER: dict[str, Case] = {
    "cs_ucb": Case(
        "Xia et al. (2020), Fig. 1: K = 20 clients, N = 5 channels, literal deadline 5 s, "
        "geometry per trial, all available",
        xia.NUM_CLIENTS_CS_UCB,
        xia.jax_run_cs_ucb,
        xia.numpy_trial_cs_ucb,
    ),
    "cs_ucb_q": Case(
        "Xia et al. (2020), Fig. 7 at N = 5, rho = 1: K = 20 clients, literal deadline 5 s, "
        "fixed geometry, alpha = 0.9, beta = 0.01",
        xia.NUM_CLIENTS_CS_UCB_Q,
        xia.jax_run_cs_ucb_q,
        xia.numpy_trial_cs_ucb_q,
    ),
    "rbcs_f": Case(
        "Huang et al. (2021), Sec. 6.1 (calibrated): N = 40 clients in Table I's four speed "
        "classes, m = 8, beta = 0.15, availability 0.8, V = 20",
        huang.NUM_CLIENTS_RBCS_F,
        huang.jax_run_rbcs_f,
        huang.numpy_trial_rbcs_f,
    ),
    "dfl_ccmab": Case(
        "Chen et al. (2025), Fig. 4 (calibrated): S = 3 edge servers of 6 clients, N = 2 "
        "scheduled per server, c_E = 0.01, G = G_T",
        chen.NUM_CLIENTS_DFL_CCMAB,
        chen.jax_run_dfl_ccmab,
        chen.numpy_trial_dfl_ccmab,
    ),
    "cocs": Case(
        "Qu et al., Fig. 3 (bandit only): N = 50 clients, M = 3 edge servers, MNIST constants",
        qu.NUM_CLIENTS_COCS,
        qu.jax_run_cocs,
        qu.numpy_trial_cocs,
    ),
    "quick_init_ucb": Case(
        "Tong et al., Figs. 6-9 (bandit only, calibrated): N = 20 clients, K = 5, warm-start "
        "opinion surrogate, dense form (15,504 super-arms)",
        tong.NUM_CLIENTS_QUICK_INIT_UCB,
        tong.jax_run_quick_init_ucb,
        tong.numpy_trial_quick_init_ucb,
    ),
    "quick_init_ucb_compressed": Case(
        "Tong et al., Figs. 6-9 (bandit only, calibrated), as quick_init_ucb; the jitted "
        "policy in its compressed form (spec §8.2: 56 compositions and the arms played, "
        "the same distribution of selections), the reference dense",
        tong.NUM_CLIENTS_QUICK_INIT_UCB,
        tong.jax_run_quick_init_ucb_compressed,
        tong.numpy_trial_quick_init_ucb,
    ),
    "bp_ucb": Case(
        "Tong et al., Figs. 6-9 (bandit only, calibrated): N = 20 clients, K = 5, warm-start "
        "opinion surrogate, Ising BP on the 3-nearest-neighbour graph",
        tong.NUM_CLIENTS_BP_UCB,
        tong.jax_run_bp_ucb,
        tong.numpy_trial_bp_ucb,
    ),
    "oort": Case(
        "Lai et al. (Oort) on envs.devices: N = 1,000 clients, K = 10 kept of m = 13 selected",
        beyond.NUM_CLIENTS_OORT,
        beyond.jax_run_oort,
        beyond.numpy_trial_oort,
    ),
}
