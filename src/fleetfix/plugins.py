"""One Registry[T] for probes, actions and transports: lookup by name with close-match hints."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from fleetfix.errors import FleetfixError

T = TypeVar("T")


class UnknownPluginError(FleetfixError):
    """A probe, action or transport name that no plugin registered."""

    def __init__(self, kind: str, name: str, known: Iterable[str]) -> None:
        close = difflib.get_close_matches(name, list(known), n=1)
        self.hint = f"did you mean {close[0]!r}?" if close else None
        message = f"unknown {kind} {name!r}"
        super().__init__(f"{message}; {self.hint}" if self.hint else message)
        self.kind = kind
        self.name = name


class Registry(Generic[T]):
    """Named plugins of one kind; state lives on the instance, never on the class."""

    def __init__(self, kind: str, items: Iterable[T], key: Callable[[T], str]) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        for item in items:
            name = key(item)
            if name in self._items:
                raise ValueError(f"duplicate {kind} {name!r}")
            self._items[name] = item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise UnknownPluginError(self.kind, name, self._items) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[T]:
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items)
