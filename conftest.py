"""Settings of the test session (pytest's rootdir conftest, which also makes the repository
root importable).

Most of the suite's time is XLA compiling small programs for the CPU (about 60% of it on
2 cores), and most of that is LLVM optimising the generated code. The suite compiles at
LLVM level 0 (`--xla_backend_optimization_level=0`; XLA's own HLO passes still run), which
changes no decision and at most the last bits of sums (the golden results hold at their
tolerance). Tests whose subject is the code users run (results that do not depend on
chunking, resumption or device count) request `optimized`: the runner's programs compile
at XLA's default level, 3. A level in the caller's `XLA_FLAGS` is kept.
"""

import contextlib
import os

import pytest

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()


@pytest.fixture
def optimized(monkeypatch):
    """The runner's programs compiled at XLA's default optimisation level (3)."""
    from fedjax_sel import runner

    options = {**runner.COMPILER_OPTIONS.get("cpu", {}), "xla_backend_optimization_level": 3}
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
