"""The persistent compilation cache of the launch scripts that simulate (sweep, reproduce).

Every run of a launch script traces and compiles its programs again: 2 to 10 s a policy
on a 2-core CPU (docs/benchmarks.md), more on an accelerator. JAX's persistent
compilation cache keeps each compiled program on disk, keyed by the program, its devices,
XLA's options and the versions of JAX and XLA, and a run loads a program compiled before
(by an earlier run, or earlier in the same run) instead of compiling it. The executable
is the one compiled before, so the results are the same bit for bit; a change of code,
sizes, devices or versions is another key, compiled afresh. JAX keeps only programs that
took `jax_persistent_cache_min_compile_time_secs` or more to compile, 1 s by default;
`enable` lowers that to `MIN_COMPILE_SECONDS` unless `JAX_PERSISTENT_CACHE_MIN_COMPILE_
TIME_SECS` is set (at 1 s, the programs that set the trials up, 0.8 to 1.2 s, and the
small ones were compiled again on every run). Only the first process of a multi-process
job writes (JAX's rule). The benchmark scripts do not use it: their subject is the
compile time.

`--compilation_cache_dir` sets the directory; '' turns the cache off. By default JAX's
own `JAX_COMPILATION_CACHE_DIR` wins where it is set ('' there turns it off too), else
`$XDG_CACHE_HOME/fedjax_sel/jax` (`~/.cache/fedjax_sel/jax`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import jax
from absl import app, flags

from fedjax_sel import validation

# Programs compiled in this many seconds or more are kept (README's main command, a
# second run on a 2-core Xeon: 10.8 s at JAX's 1 s, 6.2 to 6.4 s at 0.1 s, 6.2 s at 0 s).
MIN_COMPILE_SECONDS = 0.1

_HITS = "/jax/compilation_cache/cache_hits"
_REQUESTS = "/jax/compilation_cache/compile_requests_use_cache"
# Programs asked of the cache and programs loaded from it, in this process.
_counts = {_REQUESTS: 0, _HITS: 0}


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
    if event in _counts:
        _counts[event] += 1


jax.monitoring.register_event_listener(_on_event)


def enable(flag: str | None) -> str | None:
    """Points JAX's persistent compilation cache at the directory of `flag`, the value of
    `--compilation_cache_dir` (`directory`), before anything compiles; returns it, or
    None for none.

    Raises:
      app.UsageError: the directory is a file, or lies under one (JAX would warn on
        every program and cache nothing).
    """
    path = directory(flag)
    if path is not None:
        try:
            validation.output_dir("--compilation_cache_dir", path)
        except ValueError as e:
            raise app.UsageError(str(e)) from None
    jax.config.update("jax_compilation_cache_dir", path)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path


def summary(path: str | None) -> str:
    """One line on what the cache at `path` (from `enable`) gave this process."""
    if path is None:
        return "compilation cache: off"
    return (
        f"compilation cache {path}: {_counts[_HITS]} program(s) loaded, "
        f"{_counts[_REQUESTS] - _counts[_HITS]} compiled"
    )
