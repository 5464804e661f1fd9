"""The one process-wide set-up for runs on a CPU: `configure_cpu`.

Nothing in `fedjax_sel` or `bandits` changes JAX on import; launch scripts and
notebooks that run on a CPU call `configure_cpu()` first. Per-program XLA options are
not set here: `simulate` passes its own to `jax.jit` for its programs only
(`fedjax_sel.runner.COMPILER_OPTIONS`).
"""

from __future__ import annotations

import os

import jax
from absl import logging

from fedjax_sel import threefry_cpu, validation


def configure_cpu(num_devices: int | None = None) -> None:
    """Makes one JAX CPU device per core and draws random numbers faster on CPU.

    Two process-wide changes, both of which leave every number of a simulation as it is:

    1. One CPU device per core, on which `simulate` runs a block of trials each. JAX
       makes a single CPU device unless told otherwise, and spreads each operation of
       its programs over the cores. A round of `simulate` is a chain of many small
       operations, for which handing work between cores costs more than it saves; one
       device per core, each running its own trials with nothing exchanged until the
       chunk ends, is faster (docs/benchmarks.md: on a 2-core Xeon, `ucb` with 1,000
       trials ran 2.0x faster at N=100 and 1.5x to 1.6x at N=1,000). Results do not
       depend on the number of devices. JAX fixes the number when it starts, so call
       this before any JAX computation (importing `fedjax_sel` and `bandits` computes
       nothing); later, it logs a warning and keeps JAX's devices. A number chosen
       already wins over the default: the `JAX_NUM_CPU_DEVICES` variable, the
       `jax_num_cpu_devices` option, or XLA's `--xla_force_host_platform_device_count`.
    2. JAX's threefry2x32 hash, the core of every `jax.random` draw, lowered without a
       loop on CPU from 4,096 entries on (`fedjax_sel.threefry_cpu`): the same bits,
       2x to 4x faster to draw.
       Registered only if the installed JAX lowers it as a loop; a log line says which.

    Args:
      num_devices: CPU devices to make, >= 1; None for the cores this process may run
        on, unless a number was chosen already.
    """
    _use_cpu_devices(num_devices)
    threefry_cpu.register()


def _use_cpu_devices(num_devices: int | None) -> None:
    if num_devices is not None:
        num_devices = validation.positive_int("num_devices", num_devices)
    elif (
        jax.config.jax_num_cpu_devices >= 0
        or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
    ):
        return
    elif hasattr(os, "sched_getaffinity"):
        num_devices = len(os.sched_getaffinity(0))
    else:
        num_devices = os.cpu_count() or 1
    try:
        jax.config.update("jax_num_cpu_devices", num_devices)
    except RuntimeError:
        logging.warning(
            "JAX has started already; it keeps its %d CPU device(s). Call "
            "configure_cpu() before any JAX computation.",
            jax.local_device_count("cpu"),
        )
