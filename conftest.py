"""Settings of the test session (pytest's rootdir conftest, which also makes the repository
root importable).

Most of the suite's time is XLA compiling small programs for the CPU (about 60% of it on
2 cores). The suite compiles them faster than users do, with two XLA options that change
no decision and at most the last bits of sums (the golden results hold at their
tolerance): LLVM at level 0 (`--xla_backend_optimization_level=0`; XLA's own HLO passes
still run), and XLA:CPU's older elemental emitters in place of its fusion emitters
(`--xla_cpu_use_fusion_emitters=false`, about 40% less compile time; users keep the fusion
emitters, whose programs ran 8-28% faster for `ucb`, `thompson` and `epsilon_greedy` at
N = 1,000 and 10,000). Tests whose subject is the code users run (results that do not
depend on chunking, resumption or device count) request `optimized`: the runner's
programs compile with XLA's defaults. Options in the caller's `XLA_FLAGS` are kept.
"""

import contextlib
import os

import pytest

# XLA options of the suite (see above) and their defaults, which `optimized` restores.
FAST_COMPILE = {
    "xla_backend_optimization_level": (0, 3),
    "xla_cpu_use_fusion_emitters": ("false", True),
}
for _option, (_value, _) in FAST_COMPILE.items():
    if _option not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "") + f" --{_option}={_value}"
        ).strip()
# The launch scripts' persistent compilation cache (launch/compilation_cache.py) stays off
# in the suite, in process and in the scripts it runs, unless the caller's environment
# chooses a directory: tests do not write to the user's cache.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "")


@pytest.fixture
def xla_defaults():
    """`compiler_options` for `jax.jit` that restore XLA's defaults of `FAST_COMPILE`."""
    return {option: default for option, (_, default) in FAST_COMPILE.items()}


@pytest.fixture
def optimized(monkeypatch, xla_defaults):
    """The runner's programs compiled with XLA's defaults in place of `FAST_COMPILE`."""
    from fedjax_sel import runner

    options = {**runner.COMPILER_OPTIONS.get("cpu", {}), **xla_defaults}
    monkeypatch.setitem(runner.COMPILER_OPTIONS, "cpu", options)


@contextlib.contextmanager
def _nothing_traced():
    """Fails if JAX traces or compiles anything inside the block."""
    import jax

    events = []
    listener = lambda event, duration, **kw: events.append(event)  # noqa: E731
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    traced = [e for e in events if "/jax/core/compile" in e]
    assert not traced, f"traced or compiled before refusing: {traced}"


@pytest.fixture
def nothing_traced():
    """A context manager that fails if JAX traces or compiles anything inside it (bad input
    must be refused in Python, before tracing)."""
    return _nothing_traced
