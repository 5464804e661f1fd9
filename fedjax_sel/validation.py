"""Argument checks run in Python, before anything is traced.

Every factory and the runner call these so that bad input fails at once with one clear
message naming the argument and the allowed range. Numbers are real numbers only: a
string, a complex number, None or a bool where a number is expected is refused (even
where Python would convert it), and so are infinity and NaN. Flags and switches are
bools only (`boolean`), seeds integers in [0, 2^32) (`seed`).

`check_feedback` is the one check that runs on traced values: policies call it in
`update` on the rewards they are fed (see its docstring for the jitted `checkify` mode).
"""

from __future__ import annotations

import ast
import numbers
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify

SEED_LIMIT = 2**32
"""Seeds lie in [0, 2^32): a `jax.random.PRNGKey` keeps 32 bits of a larger one."""


def _is_integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def real(name: str, value) -> float:
    """Returns `value` as a float, or raises if it is not a real number (a Python or NumPy
    int or float, or a 0-d real array); strings, complex numbers, None and bools are refused.
    """
    if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    dtype = getattr(value, "dtype", None)
    if getattr(value, "shape", None) == () and dtype is not None and np.dtype(dtype).kind in "iuf":
        return float(value)
    raise ValueError(f"{name} must be a real number, got {value!r} ({type(value).__name__}).")


def boolean(name: str, value) -> bool:
    """Returns `value` as a bool, or raises if it is not a bool (a string "no" is not False)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r} ({type(value).__name__}).")
    return bool(value)


def seed(name: str, value) -> int:
    """Returns `value` as an int, or raises if it is not an integer in [0, 2^32).

    A larger seed would be folded silently (2^32 + 1 draws as 1) or fail inside JAX.
    """
    return int_in_range(name, value, 0, SEED_LIMIT - 1)


def positive_int(name: str, value) -> int:
    """Returns `value` as an int, or raises if it is not an integer >= 1."""
    if not _is_integer(value) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}.")
    return int(value)


def int_in_range(name: str, value, low: int, high: int) -> int:
    """Returns `value` as an int, or raises if it is not an integer in [low, high]."""
    if not _is_integer(value) or not (low <= value <= high):
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}.")
    return int(value)


def num_selected(value, num_clients: int, name: str = "num_selected") -> int:
    """Checks a cohort size against the number of clients: 1 <= k <= N."""
    return int_in_range(name, value, 1, num_clients)


def float_in_range(name: str, value, low: float, high: float, *, low_open: bool = False) -> float:
    """Returns `value` as a finite float, or raises if it lies outside [low, high] (or (low, high]).

    Infinity and NaN are refused even where `high` or `low` is infinite (an unbounded range);
    so is anything that is not a real number (`real`).
    """
    v = real(name, value)
    bad = (v <= low if low_open else v < low) or v > high or not np.isfinite(v)
    if bad:
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{name} must lie in {bracket}{low}, {high}] and be finite, got {value!r}."
        )
    return v


def positive_float(name: str, value) -> float:
    """Returns `value` as a float, or raises if it is not > 0 and finite."""
    return float_in_range(name, value, 0.0, float("inf"), low_open=True)


def probability(name: str, value) -> float:
    """A single probability in [0, 1]."""
    return float_in_range(name, value, 0.0, 1.0)


def real_interval(
    name: str, value, low: float = -np.inf, high: float = np.inf, *, low_open: bool = False
) -> tuple[float, float]:
    """Returns `value`, a pair (a, b) of finite reals with low <= a <= b <= high, as floats.

    Each end is checked as `float_in_range` checks a number and named `name[0]`, `name[1]`.
    """
    if isinstance(value, (str, bytes)) or np.shape(value) != (2,):
        raise ValueError(f"{name} must be a pair (low, high), got {value!r}.")
    a = float_in_range(f"{name}[0]", value[0], low, high, low_open=low_open)
    b = float_in_range(f"{name}[1]", value[1], low, high, low_open=low_open)
    if a > b:
        raise ValueError(f"{name} must satisfy low <= high, got {value!r}.")
    return a, b


def array_in_range(
    name: str, value, shape: tuple[int, ...], low: float = -np.inf, high: float = np.inf
) -> np.ndarray:
    """Returns `value` as a float32 array of `shape` with finite entries in [low, high].

    Only integer and float entries are accepted: strings, complex numbers, None and bools
    are refused.
    """
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError):
        raw = np.asarray(None)
    if raw.dtype.kind not in "iuf":
        raise ValueError(
            f"{name} must be an array of real numbers, got {value!r} (dtype {raw.dtype})."
        )
    arr = raw.astype(np.float32)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}.")
    if not np.all(np.isfinite(arr)) or np.any(arr < low) or np.any(arr > high):
        raise ValueError(
            f"{name} must have every entry in [{low}, {high}] and finite, got min {arr.min()}, "
            f"max {arr.max()}."
        )
    return arr


def probabilities(name: str, value, num_clients: int) -> np.ndarray:
    """A scalar probability broadcast to f32[N], or an f32[N] of probabilities."""
    if np.ndim(value) == 0:
        value = np.full((num_clients,), real(name, value), np.float32)
    return array_in_range(name, value, (num_clients,), 0.0, 1.0)


def group_size(num_clients: int, num_groups, name: str = "num_servers") -> int:
    """Checks that `num_groups` equal contiguous groups (cells) split N; returns N / groups."""
    g = int_in_range(name, num_groups, 1, num_clients)
    if num_clients % g:
        raise ValueError(
            f"{name} must divide num_clients={num_clients} (equal cells of clients), got {g}."
        )
    return num_clients // g


def cells(
    num_clients: int, num_servers, num_selected, cell_sizes=None
) -> tuple[int, int, tuple[int, ...] | None, np.ndarray]:
    """Checks a layout of clients in cells, one edge server each, N scheduled per server.

    Equal contiguous cells when `cell_sizes` is None (S must divide K, 1 <= N <= K / S);
    otherwise cell s holds the `cell_sizes[s]` clients after the first
    `sum(cell_sizes[:s])`: S positive sizes summing to K, 1 <= N <= the largest (a cell
    smaller than N schedules all its clients).

    Returns:
      (S, N, the sizes as a tuple or None, int[K] cell of each client).
    """
    k_total = positive_int("num_clients", num_clients)
    if cell_sizes is None:
        k_cell = group_size(k_total, num_servers)
        n = int_in_range("num_selected (clients per server)", num_selected, 1, k_cell)
        return k_total // k_cell, n, None, np.arange(k_total) // k_cell
    s = int_in_range("num_servers", num_servers, 1, k_total)
    sizes = tuple(cell_sizes) if isinstance(cell_sizes, tuple | list) else None
    if (
        sizes is None
        or len(sizes) != s
        or not all(_is_integer(v) and v >= 1 for v in sizes)
        or sum(sizes) != k_total
    ):
        raise ValueError(
            f"cell_sizes must be {s} (num_servers) integers >= 1 summing to num_clients="
            f"{k_total}, got {cell_sizes!r}."
        )
    sizes = tuple(int(v) for v in sizes)
    n = int_in_range("num_selected (clients per server)", num_selected, 1, max(sizes))
    return s, n, sizes, np.repeat(np.arange(s), sizes)


def choice(name: str, value, allowed: tuple[str, ...]) -> str:
    """Returns `value`, or raises if it is not one of `allowed`."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}.")
    return value


def expected_schedulable(num_selected: int, availability) -> float:
    """E[min{N, |A(t)|}] for independent Bernoulli(alpha_k) availability (exact, f64).

    Args:
      num_selected: N.
      availability: f64[K], alpha_k.
    """
    alpha = np.asarray(availability, np.float64)
    # Distribution of |A(t)|, a Poisson binomial, by convolution over the clients.
    dist = np.ones(1)
    for a in alpha:
        dist = np.convolve(dist, [1.0 - a, a])
    return float(np.minimum(np.arange(dist.size), num_selected) @ dist)


def fairness_rate(value, num_clients: int, num_selected: int) -> float:
    """beta in [0, 1] with beta N <= m (up to float rounding: 0.14 x 50 = 7 is allowed):
    no policy can select every client more often than m of N per round (Huang et al.'s
    constraint 4)."""
    beta = float_in_range("fairness_rate", value, 0.0, 1.0)
    if beta * num_clients > num_selected * (1.0 + 1e-9):
        raise ValueError(
            f"fairness_rate * num_clients must be at most num_selected (at most m of N "
            f"clients train per round), got {beta} * {num_clients} > {num_selected}."
        )
    return beta


def check_fairness(fairness, num_selected: int, availability) -> np.ndarray:
    """Validates fairness targets c (eq. 6) against what any policy can schedule.

    Necessary conditions for feasibility: 0 <= c_k < 1, c_k <= alpha_k (a client is
    selected only when available) and sum_k c_k <= E[min{N, |A(t)|}] (the expected
    number of clients a round can schedule, eq. 10).

    Args:
      fairness: f32[K], c_k.
      num_selected: N.
      availability: f32[K], alpha_k.

    Returns:
      f64[K], the targets.
    """
    alpha = np.asarray(availability, np.float64)
    c = array_in_range("fairness", fairness, alpha.shape, 0.0, 1.0).astype(np.float64)
    if np.any(c >= 1.0):
        raise ValueError(f"fairness targets c_k must lie in [0, 1), got {c.tolist()}.")
    above = np.nonzero(c > alpha + 1e-6)[0]
    if above.size:
        k = int(above[0])
        raise ValueError(
            f"fairness target c_{k} = {c[k]:g} exceeds the availability alpha_{k} = "
            f"{alpha[k]:g} of client {k}: infeasible (c_k <= alpha_k is required)."
        )
    capacity = expected_schedulable(num_selected, alpha)
    if c.sum() > capacity + 1e-6:
        raise ValueError(
            f"fairness targets sum to {c.sum():g}, above the expected number of schedulable "
            f"clients E[min(N, |A|)] = {capacity:g}: infeasible."
        )
    return c


def require(value, field: str, *, policy: str):
    """Returns `value`, a `RoundInput` (or `Feedback`) field a policy reads, or raises if
    the environment leaves it None.

    Policies call it while they are traced (in `select` or `update`), so that a policy
    run on an environment that lacks what it needs fails before anything runs:

        context = validation.require(inp.context, "context", policy="rbcs_f")

    Raises:
      ValueError: naming the field and the policy.
    """
    if value is None:
        raise ValueError(
            f"policy {policy!r} reads RoundInput.{field}, which this environment does not "
            f"provide (it is None); use an environment that fills it."
        )
    return value


def require_info(
    info,
    key: str,
    *,
    policy: str,
    where: str = "RoundInput",
    hint: str = "",
    num_clients: int | None = None,
):
    """Returns `info[key]`, an entry of a `RoundInput.info` (or `Feedback.info`) dict a
    policy reads, or raises if the environment does not provide it (`require` for the
    entries of `info`). With `num_clients`, the entry must be an [N] array.

    Raises:
      ValueError: naming the policy, the entry and, if given, `hint` (which environment
        provides it).
    """
    if not isinstance(info, dict) or key not in info:
        raise ValueError(
            f"policy {policy!r} reads {where}.info[{key!r}], which this environment does not "
            f"provide{'; ' + hint if hint else ''}."
        )
    value = info[key]
    if num_clients is not None and np.shape(value) != (num_clients,):
        raise ValueError(
            f"policy {policy!r} was built for num_clients={num_clients}; "
            f"{where}.info[{key!r}] has shape {np.shape(value)}."
        )
    return value


def output_dir(name: str, path) -> str:
    """Returns `path`, or raises if it cannot be a directory to write into.

    It must be a non-empty path that is an existing directory or can be created as one:
    neither it nor any of its existing ancestors may be a file. Nothing is created.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{name} must be a non-empty path, got {path!r}.")
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(
            f"{name}={path!r} is an existing file, not a directory: remove it or choose "
            f"another {name}."
        )
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise ValueError(
            f"{name}={path!r} lies under {ancestor!r}, which is a file, not a directory: "
            f"choose another {name}."
        )
    return path


def output_file(name: str, path) -> str:
    """Returns `path`, or raises if a file cannot be written there (it is a directory, or
    its directory cannot be created: `output_dir`). Nothing is created."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"{name} must be a non-empty path, got {path!r}.")
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(
            f"{name}={path!r} is a directory; name a file to write, e.g. {name}="
            f"{os.path.join(path, 'out.json')!r}."
        )
    ancestor = os.path.dirname(os.path.abspath(path))
    while not os.path.isdir(ancestor):
        if os.path.exists(ancestor):
            raise ValueError(
                f"{name}={path!r} lies under {ancestor!r}, which is a file, not a directory: "
                f"choose another {name}."
            )
        ancestor = os.path.dirname(ancestor)
    return path


def options(name: str, items) -> dict[str, object]:
    """Parses `key=value` strings (a command line's options) into a dict.

    Values are Python literals (`3`, `0.5`, `(1.0, 2.0)`, `'uniform'`, `True`); a value
    that is not one is kept as the string.

    Raises:
      ValueError: an item is not `key=value` with an identifier key, or repeats a key.
    """
    parsed: dict[str, object] = {}
    for item in items or ():
        key, sep, text = str(item).partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"{name} items must be key=value, got {item!r}.")
        if key in parsed:
            raise ValueError(f"{name} sets {key!r} twice.")
        try:
            parsed[key] = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError):
            parsed[key] = text.strip()
    return parsed


def check_values(
    policy: str, label: str, value, where, low: float, high: float, advice: str, index: str
) -> None:
    """Checks that `value` is finite and in [low, high] wherever `where` is True.

    Eagerly (concrete arrays) raises at once; traced (under `jit`, `vmap`, `scan`, the
    runner) emits `jax.experimental.checkify.debug_check`, which compiles to nothing
    (`check_feedback` says how to read it from a jitted loop).

    Args:
      policy: the policy's name, for the message.
      label: what is checked, e.g. "Feedback.reward for observed clients".
      value: the array.
      where: bool, broadcastable to `value`: the entries that must be in range.
      low: the smallest value accepted (-inf: any finite value).
      high: the largest value accepted (inf: any finite value).
      advice: the message's last sentence.
      index: what an index of `value` names, e.g. "client index".

    Raises:
      ValueError: eagerly, naming the policy, the range and the first offending index.
    """
    allowed = "finite" if np.isinf(low) and np.isinf(high) else f"finite and in [{low}, {high}]"
    if isinstance(value, jax.core.Tracer) or isinstance(where, jax.core.Tracer):
        ok = jnp.isfinite(value) & (value >= low) & (value <= high)
        checkify.debug_check(jnp.all(ok | ~where), f"policy {policy!r} assumes {label} {allowed}")
        return
    value = np.asarray(value)
    where = np.broadcast_to(np.asarray(where, bool), value.shape)
    with np.errstate(invalid="ignore"):
        bad = where & ~(np.isfinite(value) & (value >= low) & (value <= high))
    if np.any(bad):
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"policy {policy!r} assumes {label} {allowed}; got {float(value[first])} at "
            f"{index} {first} ({int(bad.sum())} such values). {advice}"
        )


def check_feedback(
    policy: str, feedback, low: float = -np.inf, high: float = np.inf, field: str = "reward"
) -> None:
    r"""Checks that the observed clients' `feedback.<field>` is finite and in [low, high].

    A policy calls it first thing in `update`, with the range its estimates assume (Beta
    posteriors: [0, 1]; empirical means: finite), since one NaN or out-of-range value
    would poison its state for the rest of the run. Values of unobserved clients are
    ignored (they are undefined, `Feedback`).

    - Eager use (concrete arrays): raises at once.
    - Traced (under `jit`, `vmap`, `scan`, the runner): emits
      `jax.experimental.checkify.debug_check`, which compiles to nothing, so the runner's
      program and results are unchanged. To check a jitted loop, wrap it in
      `checkify.checkify` (the cheap check mode) and read the error:

          err, state = jax.jit(checkify.checkify(policy.update))(state, decision, feedback)
          err.throw()

    Args:
      policy: the policy's name, for the message.
      feedback: a `Feedback`, with `observed` bool[N] and `field` f32[N].
      low: the smallest value the policy accepts (-inf: any finite value).
      high: the largest value the policy accepts (inf: any finite value).
      field: the `Feedback` field checked ("reward", or "latency" for latency policies).

    Raises:
      ValueError: eagerly, naming the policy, the range and the first offending client.
    """
    check_observed(policy, field, getattr(feedback, field), feedback.observed, low, high)


def check_observed(
    policy: str, field: str, values, observed, low: float = -np.inf, high: float = np.inf
) -> None:
    """`check_feedback` of f32[N] `values`, named `Feedback.<field>`, for the clients of
    bool[N] `observed`: for what a policy reads from `Feedback.info` (`field` e.g.
    "info['loss']"), or of fewer clients than those observed (those that succeeded)."""
    check_values(
        policy,
        f"Feedback.{field} for observed clients",
        values,
        observed,
        low,
        high,
        "Rescale the values or pick a policy without this assumption.",
        "client index",
    )
