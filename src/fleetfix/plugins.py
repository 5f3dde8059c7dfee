"""One Registry[T] for probes, actions and transports: lookup by name with close-match hints."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping
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
    """Named plugins of one kind; state lives on the instance, never on the class.

    `lazy` plugins are made on first use (`get`, or iterating): a run loads the 5 probes its
    playbook names, not all 14 (issue 21: memory and the first command's time).
    """

    def __init__(
        self,
        kind: str,
        items: Iterable[T],
        key: Callable[[T], str],
        *,
        lazy: Mapping[str, Callable[[], T]] | None = None,
    ) -> None:
        self.kind = kind
        self._key = key
        self._lazy: dict[str, Callable[[], T]] = dict(lazy or {})
        self._items: dict[str, T] = {}
        for item in items:
            name = key(item)
            if name in self._items or name in self._lazy:
                raise ValueError(f"duplicate {kind} {name!r}")
            self._items[name] = item

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            if name in self._lazy:
                return self._make(name)
            raise UnknownPluginError(self.kind, name, self.names()) from None

    def names(self) -> list[str]:
        return sorted([*self._items, *self._lazy])

    def __contains__(self, name: object) -> bool:
        return name in self._items or name in self._lazy

    def __iter__(self) -> Iterator[T]:
        for name in list(self._lazy):
            self._make(name)
        return iter(self._items.values())

    def __len__(self) -> int:
        return len(self._items) + len(self._lazy)

    def _make(self, name: str) -> T:
        item = self._lazy.pop(name)()
        if self._key(item) != name:
            raise ValueError(f"{self.kind} {name!r} made one named {self._key(item)!r}")
        self._items[name] = item
        return item
