"""Inventory errors found in one pass: kept as they are found, raised together at the end.

A file with four mistakes is reported once with all four (file:line:col each), not over four
runs. Readers record an error and go on to the next line, host or variable; `raise_found`
raises nothing, the one error, or an InventoryErrors holding them all in file and line order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from fleetfix.errors import InputError, InputErrors, InventoryError


class InventoryErrors(InputErrors, InventoryError):
    """Several inventory errors, shown together so that one edit fixes them all."""

    def __init__(self, errors: Sequence[InputError]) -> None:
        super().__init__(errors)
        # Code that asks an inventory error where it is gets the first place to look.
        self.position = errors[0].position


def flattened(errors: Iterable[InventoryError]) -> list[InventoryError]:
    """Each error once, collections opened, ordered by file, line and column."""
    found: list[InventoryError] = []
    for error in errors:
        if isinstance(error, InventoryErrors):
            found.extend(e for e in error.errors if isinstance(e, InventoryError))
        else:
            found.append(error)
    return sorted(found, key=_place)


def raise_found(errors: Iterable[InventoryError]) -> None:
    """Raise the errors found, if any: the one as it is, several as InventoryErrors.

    Raises:
        InventoryError: at least one error was found.
    """
    found = flattened(errors)
    if len(found) == 1:
        raise found[0]
    if found:
        raise InventoryErrors(found)


def _place(error: InventoryError) -> tuple[bool, str, int, int]:
    where = error.position
    if where is None:
        return (True, "", 0, 0)
    return (False, where.file, where.line, where.column)
