"""The straight-line threefry lowering: the same bits as JAX's own, registered only by
`fedjax_sel.configure_cpu()` and only where JAX lowers the hash as a loop."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sel import threefry_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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
    import fedjax_sel
    if sys.argv[1] == "configured":
        fedjax_sel.configure_cpu()
    out = {}
    for seed in (0, 1, 12345):
        key = jax.random.PRNGKey(seed)
        for shape in ((1,), (7,), (3, 33), (1000,), (3, 2000)):
            name = f"{seed}/{shape}"
            out["bits " + name] = jax.random.bits(key, shape)
            out["jit uniform " + name] = jax.jit(jax.random.uniform, static_argnums=1)(key, shape)
            out["normal " + name] = jax.random.normal(key, shape)
        out[f"split {seed}"] = jax.random.split(key, 5)
        out[f"fold_in {seed}"] = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(9))
    print(json.dumps({k: np.asarray(v).view(np.uint32).tolist() for k, v in out.items()}))
    """
)

# Whether the compiled CPU programs of a draw of 64 and of 8,192 entries have a loop, and
# the known answers of the primitive as jitted, after the set-up named by argv[1].
_LOWERING = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from absl import logging
    from jax.extend.random import threefry_2x32
    import bandits, fedjax_sel
    from fedjax_sel import threefry_cpu
    logging.set_verbosity(logging.INFO)
    if sys.argv[1] == "configured":
        fedjax_sel.configure_cpu()
    elif sys.argv[1] == "no loop in jax":
        threefry_cpu.jax_lowers_it_as_a_loop = lambda: False
        fedjax_sel.configure_cpu()
    def loop(size):
        hlo = jax.jit(lambda key: jax.random.bits(key, (size,))).lower(jax.random.PRNGKey(0))
        return "while" in hlo.compile().as_text()
    answers = [[int(w) for w in jax.jit(threefry_2x32)(np.uint32(k), np.uint32(c))]
               for k, c in json.loads(sys.argv[2])]
    print(json.dumps({"loop": [loop(64), loop(8192)], "answers": answers}))
    """
)


def _python(script, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_NUM_CPU_DEVICES", "XLA_FLAGS")}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("key,count,expected", _KNOWN_ANSWERS)
@pytest.mark.parametrize("form", ["straight", "rolled"])
def test_known_answers(key, count, expected, form):
    key = np.uint32(key)
    count = np.uint32(count)
    hash_fn = {"straight": threefry_cpu.threefry2x32, "rolled": threefry_cpu.threefry2x32_rolled}
    words = hash_fn[form](*map(jnp.asarray, (key[0], key[1], count[0], count[1])))
    assert tuple(int(w) for w in words) == expected


def test_rolled_form_equals_straight_line_bit_for_bit():
    # Keys and counters broadcast against each other (a key per row, a counter per entry),
    # jitted and not.
    rng = np.random.default_rng(0)
    words = lambda *shape: jnp.asarray(rng.integers(0, 2**32, shape, dtype=np.uint64), jnp.uint32)
    for args in [
        (words(5, 7), words(5, 7), words(5, 7), words(5, 7)),
        (words(3, 1), words(3, 1), words(1, 9), words(3, 9)),
        (words(), words(), words(100), words(100)),
    ]:
        want = threefry_cpu.threefry2x32(*args)
        for got in (
            threefry_cpu.threefry2x32_rolled(*args),
            jax.jit(threefry_cpu.threefry2x32_rolled)(*args),
        ):
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, np.broadcast_to(w, g.shape))


def test_draws_equal_with_and_without_configure_cpu():
    stock, _ = _python(_DRAWS, "imported")
    configured, _ = _python(_DRAWS, "configured")
    assert stock.keys() == configured.keys()
    for name in stock:
        assert stock[name] == configured[name], name


def test_registered_by_configure_cpu_only_where_jax_lowers_a_loop():
    pairs = json.dumps([[key, count] for key, count, _ in _KNOWN_ANSWERS])
    expected = [list(answer) for _, _, answer in _KNOWN_ANSWERS]
    # JAX 0.10 (the pinned range) lowers the hash as a loop on CPU; importing the library
    # leaves it so.
    imported, _ = _python(_LOWERING, "imported", pairs)
    assert imported == {"loop": [True, True], "answers": expected}
    # Configured, a large hash has no loop, and a small one keeps one (the rolled form).
    configured, log = _python(_LOWERING, "configured", pairs)
    assert configured == {"loop": [True, False], "answers": expected}
    assert "registered the straight-line lowering" in log
    # Where JAX has no loop to remove, the call keeps JAX's lowering.
    kept, log = _python(_LOWERING, "no loop in jax", pairs)
    assert kept == {"loop": [True, True], "answers": expected}
    assert "its own lowering is kept" in log
