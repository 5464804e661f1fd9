"""JAX's threefry2x32 hash lowered without a loop on CPU where it is large: the same
numbers, drawn faster.

Every random number of a simulation (rewards, availability, channels, tie-breaks, key
splits) comes from JAX's default PRNG, whose core is the Threefry-2x32 hash with 20
rounds (Salmon, Moraes, Dror and Shaw, "Parallel random numbers: as easy as 1, 2, 3",
SC 2011). JAX 0.10 lowers that hash on CPU as a `while` loop of five blocks of four
rounds; the loop carries its four state arrays through buffers that are copied on
every iteration and cannot be fused with what consumes the draws. JAX lowers it
straight-line on every other platform, and upstream changed the CPU lowering to the
same after measuring it faster to run and to compile (jax-ml/jax#37872), a change not
yet in the JAX release this project pins.

`register` (called by `fedjax_sel.configure_cpu`, never on import) registers, for the
CPU platform only, a straight-line lowering of the same hash for JAX's own
`threefry2x32` primitive, if the installed JAX lowers it as a loop; with a JAX that
does not, it changes nothing. The keys, the counters and the output words are
unchanged, so every `jax.random` draw in the process gives the same bits as before
(`tests/test_threefry_cpu.py` checks known-answer vectors of the reference
implementation and compares draws with a process that did not register it). What
changes is speed: 1,000 trials drawing one Bernoulli reward per
client and round cost 0.62 ms a round through the loop and 0.14 ms straight-line at
N=100, 1.71 ms and 0.83 ms at N=1,000.

Small hashes (fewer than `STRAIGHT_LINE_SIZE` entries: a chunk's key splits and folds,
a few draws per trial) keep a loop of five blocks (`threefry2x32_rolled`, the same
numbers). Straight-line, XLA fuses a small hash into each of its consumers, and a chain
of key splits into each draw made from it: the compressed Quick-Init UCB program went
from 7 hashes before XLA's optimisation to 1,069 `xor` operations after it, and
compiled in 5.1 to 6.4 s against 3.3 to 4.0 s with its small hashes as loops
(docs/benchmarks.md).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.extend.random import threefry2x32_p, threefry_2x32
from jax.interpreters import mlir

# Rotation constants of the even and odd blocks of four rounds, and the key-schedule
# parity constant (Threefish's C240), as in the Random123 reference implementation.
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _block(x1, x2, rotations, key1, key2, number):
    """One block of Threefry-2x32: four rounds by `rotations` (u32 scalars), then the
    key words `key1`, `key2` and the block's `number` injected."""
    for rotation in rotations:
        x1 = x1 + x2
        x2 = x1 ^ ((x2 << rotation) | (x2 >> (np.uint32(32) - rotation)))
    return x1 + key1, x2 + key2 + number


def threefry2x32(key1, key2, count1, count2):
    """Threefry-2x32 with 20 rounds, straight-line.

    Args:
      key1, key2: u32 arrays, the two words of the key.
      count1, count2: u32 arrays, the two words of the counter (the four arguments
        broadcast against each other).

    Returns:
      (u32 array, u32 array): the two output words.
    """
    schedule = (key1, key2, key1 ^ key2 ^ _PARITY)
    x1, x2 = count1 + schedule[0], count2 + schedule[1]
    for block in range(5):
        rotations = [np.uint32(r) for r in _ROTATIONS[block % 2]]
        keys = schedule[(block + 1) % 3], schedule[(block + 2) % 3]
        x1, x2 = _block(x1, x2, rotations, *keys, np.uint32(block + 1))
    return x1, x2


def _shape(*words) -> tuple[int, ...]:
    """The shape the four words of a hash broadcast to."""
    return jnp.broadcast_shapes(*(jnp.shape(x) for x in words))


def threefry2x32_rolled(key1, key2, count1, count2):
    """`threefry2x32` as a loop of its five blocks (`_block`), the same numbers.

    The key schedule turns by one word a block and the rotation constants alternate
    between the even and the odd blocks, so that every block is the same loop body.
    The four arguments are broadcast first, so that the loop's carry keeps one shape.
    """
    shape = _shape(key1, key2, count1, count2)
    key1, key2, count1, count2 = (
        jnp.broadcast_to(jnp.asarray(x, jnp.uint32), shape) for x in (key1, key2, count1, count2)
    )
    rotations = jnp.asarray(_ROTATIONS, jnp.uint32)

    def block(i, state):
        x1, x2, schedule = state
        row = rotations[i % 2]
        number = (i + 1).astype(jnp.uint32)
        x1, x2 = _block(x1, x2, [row[j] for j in range(4)], schedule[1], schedule[2], number)
        return x1, x2, (schedule[1], schedule[2], schedule[0])

    schedule = (key1, key2, key1 ^ key2 ^ _PARITY)
    x1, x2, _ = jax.lax.fori_loop(
        0, 5, block, (count1 + schedule[0], count2 + schedule[1], schedule)
    )
    return x1, x2


# Hashes of at least this many entries (after broadcasting) are lowered straight-line.
STRAIGHT_LINE_SIZE = 4096


def _by_size(key1, key2, count1, count2):
    """`threefry2x32` straight-line from `STRAIGHT_LINE_SIZE` entries, else rolled."""
    size = int(np.prod(_shape(key1, key2, count1, count2), dtype=np.int64))
    lowering = threefry2x32 if size >= STRAIGHT_LINE_SIZE else threefry2x32_rolled
    return lowering(key1, key2, count1, count2)


def jax_lowers_it_as_a_loop() -> bool:
    """Whether JAX's own CPU lowering of `threefry2x32` is a `while` loop (JAX 0.10 and
    earlier), from the StableHLO text of a tiny hash lowered for CPU. Starts JAX's
    backends, as any computation does."""
    words = jax.ShapeDtypeStruct((2,), jnp.uint32)
    lowered = jax.jit(threefry_2x32).trace(words, words).lower(lowering_platforms=("cpu",))
    return "stablehlo.while" in lowered.as_text()


_registered = False


def register() -> bool:
    """Registers the straight-line CPU lowering of `threefry2x32` for the whole process
    (rolled below `STRAIGHT_LINE_SIZE` entries), if JAX's own is a loop
    (`jax_lowers_it_as_a_loop`), and logs which.

    Programs compiled afterwards use it; draws are unchanged either way.

    Returns:
      Whether the straight-line lowering is in use.
    """
    global _registered
    if _registered:
        return True
    if not jax_lowers_it_as_a_loop():
        logging.info(
            "JAX %s lowers threefry2x32 on CPU without a loop: its own lowering is kept.",
            jax.__version__,
        )
        return False
    mlir.register_lowering(
        threefry2x32_p, mlir.lower_fun(_by_size, multiple_results=True), platform="cpu"
    )
    _registered = True
    logging.info(
        "JAX %s lowers threefry2x32 on CPU as a loop: registered the straight-line lowering.",
        jax.__version__,
    )
    return True
