"""The persistent compilation cache of the launch scripts that simulate (sweep, reproduce).

Every run of a launch script traces and compiles its programs again: 2 to 8 s a program
on a 2-core CPU (docs/benchmarks.md), more on an accelerator. JAX's persistent
compilation cache keeps each compiled program on disk, keyed by the program, its devices,
XLA's options and the versions of JAX and XLA, and a later run of the same program loads
it instead of compiling it (JAX skips programs compiled in under
`jax_persistent_cache_min_compile_time_secs`, 1 s by default). The executable is the one
compiled before, so the results are the same bit for bit; a change of code, sizes,
devices or versions is another key, compiled afresh. Only the first process of a
multi-process job writes (JAX's rule). The benchmark scripts do not use it: their
subject is the compile time.

`--compilation_cache_dir` sets the directory; '' turns the cache off. By default JAX's
own `JAX_COMPILATION_CACHE_DIR` wins where it is set ('' there turns it off too), else
`$XDG_CACHE_HOME/fedjax_sel/jax` (`~/.cache/fedjax_sel/jax`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
from absl import flags

_HITS = "/jax/compilation_cache/cache_hits"
_SAVED = "/jax/compilation_cache/compile_time_saved_sec"
# Programs loaded from the cache and the compile seconds this saved, in this process.
_loaded = [0, 0.0]


def define_flag() -> flags.FlagHolder:
    """Defines `--compilation_cache_dir`, for a launch script to define at import."""
    return flags.DEFINE_string(
        "compilation_cache_dir",
        None,
        "Directory of JAX's persistent compilation cache, from which a later run of the "
        "same programs loads them instead of compiling; '' for none. Default: JAX_"
        "COMPILATION_CACHE_DIR where it is set, else $XDG_CACHE_HOME/fedjax_sel/jax "
        "(~/.cache/...).",
    )


def directory(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """The cache's directory for the value of `--compilation_cache_dir`, or None for none.

    Args:
      flag: the flag's value: a directory, '' for none, None for the default.
      environ: the environment read for the default.
    """
    if flag is None:
        if "JAX_COMPILATION_CACHE_DIR" in environ:
            flag = environ["JAX_COMPILATION_CACHE_DIR"]
        else:
            base = environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
            flag = os.path.join(base, "fedjax_sel", "jax")
    return os.path.expanduser(flag) or None


def _on_event(event: str, **kwargs) -> None:
    del kwargs
    if event == _HITS:
        _loaded[0] += 1


def _on_duration(event: str, duration: float, **kwargs) -> None:
    del kwargs
    if event == _SAVED:
        _loaded[1] += duration


jax.monitoring.register_event_listener(_on_event)
jax.monitoring.register_event_duration_secs_listener(_on_duration)


def enable(flag: str | None) -> str | None:
    """Points JAX's persistent compilation cache at the directory of `flag`, the value of
    `--compilation_cache_dir` (`directory`), before anything compiles; returns it, or
    None for none."""
    path = directory(flag)
    jax.config.update("jax_compilation_cache_dir", path)
    return path


def summary(path: str | None) -> str:
    """One line on what the cache at `path` (from `enable`) gave this process."""
    if path is None:
        return "compilation cache: off"
    return (
        f"compilation cache {path}: {_loaded[0]} program(s) loaded, "
        f"{_loaded[1]:.1f} s of compilation saved"
    )
