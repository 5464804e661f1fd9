"""Registries of factories by name: what `--policies` and `--env` accept.

Every factory of a registry is called as `factory(num_clients, num_selected, **kwargs)`.
`Registry.register` checks that contract when an entry is added (a wrong signature fails
on import, not in a user's sweep), and `Registry.make` checks a call's keyword arguments
against the factory's signature before calling it, so that a misspelt hyper-parameter is
a `ValueError` naming the entry and its parameters, while an error raised inside a
factory keeps its own traceback. An entry whose factory imports its module on call
names the function it calls (`signature_of`), whose signature is checked; the options a
variant binds (`cpow_d`'s `variant`) are its name's and cannot be passed again.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any


class Registry(Mapping):
    """A checked mapping from names to factories `(num_clients, num_selected, **kw)`.

    Args:
      kind: what the entries are ("policy", "environment"), for messages.
    """

    def __init__(self, kind: str):
        self.kind = kind
        self._factories: dict[str, Callable[..., Any]] = {}
        self._signatures: dict[str, Callable[[], inspect.Signature]] = {}

    def register(
        self,
        name: str,
        factory: Callable[..., Any],
        signature_of: Callable[[], Callable[..., Any]] | None = None,
        **fixed: Any,
    ) -> None:
        """Adds `factory` under `name`, with keyword arguments `fixed` bound (a variant).

        Args:
          name: an identifier.
          factory: `(num_clients, num_selected, **kwargs) -> entry`.
          signature_of: None, or `() -> function` whose signature `factory` has, for a
            factory that takes `**kwargs` and passes them on to a function it imports
            when called; called when the entry's arguments are first checked.
          **fixed: keyword arguments bound to `factory`; `make` refuses them.

        Raises:
          ValueError: `name` is taken or not an identifier, or `factory` (with `fixed`
            bound) cannot be called as `factory(num_clients, num_selected)`.
        """
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{self.kind} name must be an identifier, got {name!r}.")
        if name in self._factories:
            raise ValueError(f"{self.kind} {name!r} is registered already.")
        if not callable(factory):
            raise ValueError(f"{self.kind} {name!r}: factory must be callable, got {factory!r}.")
        if fixed:
            factory = functools.partial(factory, **fixed)
        try:
            inspect.signature(factory).bind(1, 1)
        except TypeError as e:
            raise ValueError(
                f"{self.kind} {name!r}: the factory must accept (num_clients, num_selected, "
                f"**kwargs): {e}"
            ) from None
        self._factories[name] = factory

        @functools.cache
        def signature() -> inspect.Signature:
            full = inspect.signature(factory if signature_of is None else signature_of())
            kept = [p for p in full.parameters.values() if p.name not in fixed]
            return full.replace(parameters=kept)

        self._signatures[name] = signature

    def parameters(self, name: str) -> list[str]:
        """The keyword arguments that entry `name` accepts, beyond the two sizes."""
        self[name]  # raises on an unknown name
        params = list(self._signatures[name]().parameters.values())[2:]
        return [p.name for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]

    def make(self, name: str, num_clients: int, num_selected: int, **kwargs: Any) -> Any:
        """Builds entry `name` as `factory(num_clients, num_selected, **kwargs)`.

        Raises:
          ValueError: `name` is unknown, or `kwargs` holds an argument the entry does
            not take, or one its variant binds (checked before the factory runs).
        """
        factory = self[name]
        try:
            self._signatures[name]().bind(num_clients, num_selected, **kwargs)
        except TypeError as e:
            raise ValueError(
                f"{self.kind} {name!r} takes {', '.join(self.parameters(name)) or 'no options'}; "
                f"{e}"
            ) from None
        return factory(num_clients, num_selected, **kwargs)

    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self._factories:
            raise ValueError(
                f"unknown {self.kind} {name!r}; choose from {', '.join(sorted(self))}."
            )
        return self._factories[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._factories)

    def __len__(self) -> int:
        return len(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories
