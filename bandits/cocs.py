r"""COCS: context-aware online client selection for hierarchical FL (Qu et al., Algorithm 1).

Z. Qu, R. Duan, L. Chen, J. Xu, Z. Lu, Y. Liu, "Context-aware Online Client Selection for
Hierarchical Federated Learning", IEEE TPDS 33(12), 2022, Sec. IV-B.

The context space :math:`[0, 1]^D` is cut into :math:`h_T^D` hypercubes of side
:math:`1/h_T`. For every client n, edge server m and cube l the policy counts the
selections :math:`C_{n,m}(l)` and successes, so that
:math:`\hat p_{n,m}(l) = S_{n,m}(l) / C_{n,m}(l)` (eq. 12). In round t, with
:math:`l_{n,m}` the cube of this round's context of the pair:

1. Under-explored pairs (eq. 13, per pair, spec A6): reachable pairs with
   :math:`C_{n,m}(l_{n,m}) \le K(t) = t^z \log t`.
2. Exploration (eqs. 14, 15): the most under-explored pairs the budgets allow,
   cheapest client first (`ops.assignment.max_cardinality`).
3. Exploitation (eqs. 17, 18): the remaining budget of every ES goes to explored pairs
   of unassigned clients, maximising :math:`\sum \hat p_{n,m}(l_{n,m})` with the P2
   solver (`ops.assignment.knapsack` or `greedy`). With no under-explored pair this is
   eq. (18) on the full budgets.
4. Update (Algorithm 1, lines 16-21): only the selected pairs, at this round's cube.

Steps 2 and 3 run only in rounds where some trial of the batch has a pair for them
(`ops.where_needed`); without one they select nothing, so the decisions are the same.

Readings where the paper is open (spec §3.4, §7; the default first, the literal reading a
named option):
  - `fill_in`: True fills the budget left by exploration with explored pairs in every
    case (spec §3.4, as the CC-MAB papers COCS builds on); False is Algorithm 1 as
    printed, where case (i) (every ES with a reachable client has an under-explored one,
    spec A7) explores only.
  - `counter_scope`: "pair" (the paper's :math:`C_{n,m}(l)`), "server" (counts and
    successes pooled over clients, :math:`C_m(l)`), "global" (pooled over clients and
    servers, :math:`C(l)`, as in CC-MAB) for when per-pair cells cannot be explored in
    the horizon (spec A4).
  - `theory`: the exponent z of K(t). "strongly_convex" (Theorem 2),
    :math:`z = 2\alpha/(3\alpha + D)`, which is :math:`2\alpha/(3\alpha+2)` for D = 2;
    "nonconvex" (Theorem 4) takes the same z (the printed exponent is the regret's,
    spec A3); "nonconvex_printed" takes :math:`z = (2\alpha+D)/(3\alpha+D)` as printed.
  - `cubes_per_dim`: :math:`h_T` (Table I: 5), or None for the theory's
    :math:`\lceil T^{1/(3\alpha+D)} \rceil` from `horizon`.
Counts include failures (spec A5); equal estimates are broken uniformly at random by a
1e-6 jitter (spec A31).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from bandits import edge_inputs
from bandits.dfl_ccmab import grid_size
from fedjax_sel import validation
from fedjax_sel.ops import assignment, where_needed
from fedjax_sel.types import Selector

THEORIES = ("strongly_convex", "nonconvex", "nonconvex_printed")
COUNTER_SCOPES = ("pair", "server", "global")


class COCSState(NamedTuple):
    """One trial's state of `cocs`.

    Attributes:
      counts: int32[N, M, L], selections of each pair with its context in cube l.
      successes: int32[N, M, L], those that met the deadline.
      cube: int32[N, M], the cube of each pair's context this round (read by `update`).
      exploring: bool[], whether this round had an under-explored pair.
    """

    counts: jax.Array
    successes: jax.Array
    cube: jax.Array
    exploring: jax.Array


def cube_index(context: jax.Array, cubes_per_dim: int) -> jax.Array:
    r"""int32[...], the hypercube of each context f32[..., D] in :math:`[0, 1]^D`.

    Coordinate d falls in slice :math:`k_d = \min(\lfloor \phi_d h_T \rfloor, h_T - 1)`
    (the upper boundary 1 in the last slice, spec §3.1); the cube is
    :math:`\sum_d k_d h_T^d`.
    """
    d = context.shape[-1]
    slices = jnp.clip(jnp.floor(context * cubes_per_dim).astype(jnp.int32), 0, cubes_per_dim - 1)
    return slices @ (cubes_per_dim ** jnp.arange(d, dtype=jnp.int32))


def exploration_exponent(theory: str, alpha: float, context_dim: int) -> float:
    """z of K(t) = t^z log t for a `theory` (see the module docstring)."""
    if theory == "nonconvex_printed":
        return (2 * alpha + context_dim) / (3 * alpha + context_dim)
    return 2 * alpha / (3 * alpha + context_dim)


def control_function(t: jax.Array, exponent: float, scale: float) -> jax.Array:
    """K(t) = scale t^z log t (natural log; K(1) = 0), f32[]."""
    t = jnp.asarray(t, jnp.float32)
    return scale * t**exponent * jnp.log(t)


def cocs(
    num_clients: int,
    num_selected: int | None = None,
    num_servers: int = 3,
    budget: float = 3.5,
    context_dim: int = 2,
    cubes_per_dim: int | None = 5,
    horizon: int | None = None,
    alpha: float = 1.0,
    theory: str = "strongly_convex",
    exploration_scale: float = 1.0,
    counter_scope: str = "pair",
    fill_in: bool = True,
    solver: str = "knapsack",
    cost_step: float = 0.05,
) -> Selector:
    r"""COCS (Qu et al., Algorithm 1; see the module docstring).

    Args:
      num_clients: N >= 1.
      num_selected: validated only, 1 <= k <= N or None (the registry's contract; the
        budgets bound the cohort).
      num_servers: M >= 1.
      budget: B > 0, every ES's budget per round (10b).
      context_dim: D >= 1, the pair contexts' dimension.
      cubes_per_dim: :math:`h_T \ge 1`, or None for :math:`\lceil T^{1/(3\alpha+D)}\rceil`.
      horizon: T >= 1, needed when `cubes_per_dim` is None.
      alpha: the Hölder exponent :math:`\alpha > 0` (Assumption 1; Table I: 1).
      theory: "strongly_convex", "nonconvex" or "nonconvex_printed", the exponent of K(t).
      exploration_scale: a factor > 0 on K(t) (1: the theorem's).
      counter_scope: "pair", "server" or "global".
      fill_in: fill the budget left by exploration with explored pairs in every case.
      solver: "knapsack" or "greedy", the P2 solver of exploitation.
      cost_step: > 0, the knapsack's cost grid (0.05 for MNIST's budget 3.5, 0.25 for
        CIFAR-10's 40).

    Returns:
      A `Selector` whose state is a `COCSState`.
    """
    n = validation.positive_int("num_clients", num_clients)
    if num_selected is not None:
        validation.num_selected(num_selected, n)
    m = validation.positive_int("num_servers", num_servers)
    b = validation.positive_float("budget", budget)
    d = validation.positive_int("context_dim", context_dim)
    a = validation.positive_float("alpha", alpha)
    if cubes_per_dim is None:
        if horizon is None:
            raise ValueError("cubes_per_dim=None (the theory's h_T) needs horizon, got None.")
        # Chen et al.'s G_T, the same rule (exact where T is a power).
        h = grid_size(horizon, a, d)
    else:
        h = validation.positive_int("cubes_per_dim", cubes_per_dim)
    z = exploration_exponent(validation.choice("theory", theory, THEORIES), a, d)
    scale = validation.positive_float("exploration_scale", exploration_scale)
    scope = validation.choice("counter_scope", counter_scope, COUNTER_SCOPES)
    validation.choice("solver", solver, assignment.SOLVERS)
    step = validation.positive_float("cost_step", cost_step)
    units = assignment.grid_capacity(b, step)
    cells = h**d
    budgets = jnp.full((m,), b, jnp.float32)
    pooled_axes = {"pair": (), "server": (0,), "global": (0, 1)}[scope]

    def init(key):
        del key
        zeros = jnp.zeros((n, m, cells), jnp.int32)
        return COCSState(zeros, zeros, jnp.zeros((n, m), jnp.int32), jnp.bool_(False))

    def at_cube(table, cube):
        """int32[N, M]: `table` pooled over the scope, at each pair's cube."""
        pooled = jnp.sum(table, axis=pooled_axes, keepdims=True)
        pooled = jnp.broadcast_to(pooled, table.shape)
        return jnp.take_along_axis(pooled, cube[..., None], axis=-1)[..., 0]

    def select(state, inp, key):
        r = edge_inputs.read(inp, n, m, d, "cocs")
        explore_key, exploit_key, tie_key = jax.random.split(key, 3)
        cube = cube_index(r.context, h)
        count = at_cube(state.counts, cube)
        under = r.reachable & (count <= control_function(inp.t, z, scale))  # eq. 13
        explored = r.reachable & ~under
        exploring = jnp.any(under)
        # Each step runs only in rounds where some trial has a pair for it (`where_needed`):
        # with no under-explored pair, exploration selects nothing and leaves the budgets.
        first, remaining = where_needed(
            exploring,
            lambda c, u, k: assignment.max_cardinality(c, u, budgets, k),
            lambda c, u, k: (jnp.zeros((n, m), bool), budgets),
            r.cost,
            under,
            explore_key,
        )
        eligible = explored & ~jnp.any(first, axis=1, keepdims=True)
        if not fill_in:
            # Case (i) of Algorithm 1: every ES with a reachable client has an
            # under-explored one; the literal algorithm then explores only.
            servers_exploring = jnp.any(under, 0) | ~jnp.any(r.reachable, 0)
            eligible &= ~(jnp.all(servers_exploring) & exploring)

        def exploit(cost, eligible, successes, cube, count, remaining, exploit_key, tie_key):
            estimate = at_cube(successes, cube) / jnp.maximum(count, 1)  # eq. 12
            estimate = estimate + 1e-6 * jax.random.uniform(tie_key, estimate.shape)
            return assignment.solve(
                solver, estimate, cost, eligible, remaining, exploit_key, step, units
            )

        second = where_needed(
            jnp.any(eligible),
            exploit,
            lambda *operands: jnp.zeros((n, m), bool),
            r.cost,
            eligible,
            state.successes,
            cube,
            count,
            remaining,
            exploit_key,
            tie_key,
        )
        new_state = state._replace(cube=cube, exploring=exploring)
        return edge_inputs.decision(first | second), new_state

    def update(state, decision, feedback):
        pairs = edge_inputs.chosen_pairs(decision, feedback.observed, m)
        client = jnp.arange(n)[:, None]
        server = jnp.arange(m)[None, :]
        counts = state.counts.at[client, server, state.cube].add(pairs.astype(jnp.int32))
        won = (pairs & feedback.success[:, None]).astype(jnp.int32)
        successes = state.successes.at[client, server, state.cube].add(won)
        return state._replace(counts=counts, successes=successes)

    return Selector(init=init, select=select, update=update)
