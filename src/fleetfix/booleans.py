"""Ansible's booleans, in one place: the words ansible-core's `convert_bool.boolean` reads as
true or false (module arguments, ansible.cfg, the `bool` filter). Anything else is refused
rather than guessed: a remediation gate must never read "flase" as false."""

from __future__ import annotations

TRUE_WORDS = frozenset({"y", "yes", "on", "1", "true", "t"})
FALSE_WORDS = frozenset({"n", "no", "off", "0", "false", "f"})


def boolean(value: object) -> bool:
    """True/False for Ansible's words (any case, around spaces), booleans, 1 and 0.

    Raises:
        ValueError: anything else.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float) and value in (0, 1):
        return bool(value)
    if isinstance(value, str | int):
        word = str(value).strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise ValueError(f"{value!r} is not a boolean (yes/no, true/false, on/off, 1/0)")
