"""host:port splitting and address validation, as ansible.parsing.utils.addresses."""

from __future__ import annotations

import pytest

from fleetfix.inventory.addresses import AddressError, parse_address


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("gpu01", ("gpu01", None)),
        ("gpu01:2222", ("gpu01", 2222)),
        ("gpu01.dc1.example.net:22", ("gpu01.dc1.example.net", 22)),
        ("10.0.0.5", ("10.0.0.5", None)),
        ("10.0.0.5:22022", ("10.0.0.5", 22022)),
        ("fe80::1", ("fe80::1", None)),
        ("2001:db8::10", ("2001:db8::10", None)),
        ("[2001:db8::20]:2222", ("2001:db8::20", 2222)),
        ("::ffff:10.0.0.9", ("::ffff:10.0.0.9", None)),
        ("gpu[01:04]:2200", ("gpu[01:04]", 2200)),
        ("10.0.[1:2].7", ("10.0.[1:2].7", None)),
        ("2001:db8::[a:c]", ("2001:db8::[a:c]", None)),
        ("knoten-ä1", ("knoten-ä1", None)),
    ],
)
def test_splits_host_and_port(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", ["gpu01:", "gpu-", "bad host", "[fe80::1]", "a:b:c:x", ""])
def test_rejects_what_is_not_an_address(text: str) -> None:
    with pytest.raises(AddressError):
        parse_address(text)


def test_ranges_can_be_refused() -> None:
    with pytest.raises(AddressError, match="range"):
        parse_address("gpu[01:02]", allow_ranges=False)
