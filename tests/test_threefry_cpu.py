"""The straight-line threefry lowering: the same bits as JAX's own, and actually in use."""

import json
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.random import threefry_2x32

from fedjax_sel import threefry_cpu

# Known answers of the Random123 reference implementation of Threefry-2x32-20
# (kat_vectors: key, counter, output).
_KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]

# Draws through the public `jax.random` API, jitted and not, for a few keys and shapes.
_DRAWS = textwrap.dedent(
    """
    import json, sys
    import jax, jax.numpy as jnp, numpy as np
    if sys.argv[1] == "patched":
        import fedjax_sel  # noqa: F401
    out = {}
    for seed in (0, 1, 12345):
        key = jax.random.PRNGKey(seed)
        for shape in ((1,), (7,), (3, 33), (1000,)):
            name = f"{seed}/{shape}"
            out["bits " + name] = jax.random.bits(key, shape)
            out["jit uniform " + name] = jax.jit(jax.random.uniform, static_argnums=1)(key, shape)
            out["normal " + name] = jax.random.normal(key, shape)
        out[f"split {seed}"] = jax.random.split(key, 5)
        out[f"fold_in {seed}"] = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(9))
    print(json.dumps({k: np.asarray(v).view(np.uint32).tolist() for k, v in out.items()}))
    """
)


def _draws(mode):
    result = subprocess.run(
        [sys.executable, "-c", _DRAWS, mode], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("key,count,expected", _KNOWN_ANSWERS)
def test_known_answers(key, count, expected):
    key = np.uint32(key)
    count = np.uint32(count)
    straight = threefry_cpu.threefry2x32(*map(jnp.asarray, (key[0], key[1], count[0], count[1])))
    assert tuple(int(w) for w in straight) == expected
    # The primitive, jitted on this (CPU) backend, goes through the registered lowering.
    lowered = jax.jit(threefry_2x32)(key, count)
    assert tuple(int(w) for w in lowered) == expected


def test_draws_equal_those_of_jax_without_the_lowering():
    stock = _draws("stock")
    patched = _draws("patched")
    assert stock.keys() == patched.keys()
    for name in stock:
        assert stock[name] == patched[name], name


def test_cpu_lowering_has_no_loop():
    hlo = jax.jit(lambda key: jax.random.bits(key, (64,))).lower(jax.random.PRNGKey(0))
    text = hlo.compile().as_text()
    assert "while" not in text
