"""Modes as Ansible's file modules take them: octal ints and strings, symbolic clauses
relative to the current mode (X, =, copying a class, the umask when no users are given)."""

from __future__ import annotations

import pytest

from fleetfix.modules.modes import ModeError, octal, symbolic_mode, target_mode


@pytest.mark.parametrize(
    ("mode", "current", "is_dir", "expected"),
    [
        (0o644, 0o600, False, 0o644),
        ("0644", 0o600, False, 0o644),
        ("644", 0o600, False, 0o644),
        ("1777", 0o755, True, 0o1777),
        ("u+x", 0o644, False, 0o744),
        ("u+x,g-r", 0o644, False, 0o704),
        ("go=", 0o755, True, 0o700),
        ("a+r", 0o600, False, 0o644),
        ("u=rwX,g=rX,o=", 0o644, False, 0o640),
        ("u=rwX,g=rX,o=", 0o644, True, 0o750),
        ("u=rwX,g=rX,o=", 0o744, False, 0o750),
        ("g=u", 0o640, False, 0o660),
        ("o=g", 0o654, False, 0o655),
        ("u+s,g+s,o+t", 0o755, True, 0o7755),
        ("u=rw-x+X", 0o755, True, 0o755),
        ("u-w+x", 0o644, False, 0o544),
    ],
)
def test_target_mode(mode: object, current: int, is_dir: bool, expected: int) -> None:
    assert target_mode(mode, current, is_dir=is_dir) == expected


def test_no_users_leaves_the_umask_bits() -> None:
    assert symbolic_mode("+w", 0o444, is_dir=False, umask=0o022) == 0o644
    assert symbolic_mode("a+w", 0o444, is_dir=False, umask=0o022) == 0o666


@pytest.mark.parametrize("mode", ["u+q", "z+x", "rwx", "0o99"])
def test_bad_modes_say_so_as_ansible(mode: str) -> None:
    with pytest.raises(ModeError) as caught:
        target_mode(mode, 0o644, is_dir=False)
    assert str(caught.value) == "mode must be in octal or symbolic form"


def test_only_permission_bits() -> None:
    with pytest.raises(ModeError, match="only permission info is allowed"):
        target_mode("170000", 0o644, is_dir=False)


def test_octal_is_ansibles_result_form() -> None:
    assert octal(0o100644) == "0644"
    assert octal(0o41777) == "01777"
