"""Fingerprints of an environment and a policy: what a checkpoint was computed with.

A fingerprint is a SHA-256 over the jaxprs of the functions (their structure, with every
Python number they close over inlined as a literal), the arrays they close over (their
constants) and, for an environment, its parameters' values. Two objects built by the same
factory with the same arguments, in any process, have the same fingerprint; another
hyper-parameter (epsilon 0 or 1), another array (other means) or other code changes it.
The functions are traced on abstract inputs only; nothing runs.
"""

from __future__ import annotations

import hashlib
import re

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sel.runner.programs import Keys
from fedjax_sel.types import Decision, Env, Selector

# Python objects printed in a jaxpr (custom derivative rules, say) show their address,
# which differs between processes.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
# A `checkify.debug_check` (`validation.check_feedback`) selects its error's code, a
# process-wide counter of the checks traced so far, out of literals: the code is not part
# of what the function computes.
_CHECK_CODE = re.compile(r"select_n False:bool\[\] \d+:i32\[\] -1:i32\[\]")


def _canonical(jaxpr_text: str) -> str:
    return _CHECK_CODE.sub("check_code", _ADDRESS.sub("", jaxpr_text))


def _add_array(h, x) -> None:
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    a = np.asarray(x)
    h.update(f"{a.dtype}{a.shape}".encode())
    h.update(np.ascontiguousarray(a).tobytes())


def _add_function(h, fn, *args) -> None:
    closed = jax.make_jaxpr(fn)(*args)
    h.update(_canonical(str(closed.jaxpr)).encode())
    for const in closed.consts:
        _add_array(h, const)


def _round_shapes(env: Env, run_keys: Keys):
    """Abstract (env state, round input, decision, feedback) of a round of `env`."""
    state = jax.eval_shape(env.reset, run_keys.reset, env.params)
    inp = jax.eval_shape(env.observe, state, jnp.int32(1), run_keys.env, env.params)
    decision = Decision(jax.ShapeDtypeStruct((env.num_clients,), jnp.bool_))
    if env.oracle is not None:
        decision = jax.eval_shape(env.oracle, state, inp, env.params)
    feedback, _, _ = jax.eval_shape(env.step, state, inp, decision, run_keys.env, env.params)
    return state, inp, decision, feedback


def environment(env: Env, run_keys: Keys) -> str:
    """The fingerprint of `env`: its sizes, parameter values and functions."""
    h = hashlib.sha256(repr((env.num_clients, env.num_selected)).encode())
    h.update(str(jax.tree.structure(env.params)).encode())
    for leaf in jax.tree.leaves(env.params):
        _add_array(h, jnp.asarray(leaf))
    state, inp, decision, _ = _round_shapes(env, run_keys)
    t = jax.ShapeDtypeStruct((), jnp.int32)
    _add_function(h, env.reset, run_keys.reset, env.params)
    _add_function(h, env.observe, state, t, run_keys.env, env.params)
    _add_function(h, env.step, state, inp, decision, run_keys.env, env.params)
    if env.oracle is not None:
        _add_function(h, env.oracle, state, inp, env.params)
    if env.feasible is not None:
        _add_function(h, env.feasible, state, inp, decision, env.params)
    return h.hexdigest()


def policy(selector: Selector, env: Env, run_keys: Keys) -> str:
    """The fingerprint of `selector` (its functions, on the inputs of `env`)."""
    h = hashlib.sha256(repr(selector.privileged).encode())
    env_state, inp, oracle, feedback = _round_shapes(env, run_keys)
    if selector.privileged:
        inp = inp._replace(oracle=oracle)
    state = jax.eval_shape(selector.init, run_keys.init)
    decision, _ = jax.eval_shape(selector.select, state, inp, run_keys.policy)
    _add_function(h, selector.init, run_keys.init)
    _add_function(h, selector.select, state, inp, run_keys.policy)
    _add_function(h, selector.update, state, decision, feedback)
    return h.hexdigest()
