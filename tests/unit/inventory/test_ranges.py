"""Host range expansion: Ansible's rules, including its quirks and its error messages."""

from __future__ import annotations

import pytest

from fleetfix.inventory.ranges import MAX_RANGE_SIZE, HostRangeError, expand_host_range, has_range


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("gpu[001:003]", ["gpu001", "gpu002", "gpu003"]),
        ("gpu[8:11]", ["gpu8", "gpu9", "gpu10", "gpu11"]),
        ("node[1:9:3]", ["node1", "node4", "node7"]),
        ("cn-[a:c]", ["cn-a", "cn-b", "cn-c"]),
        ("cn-[y:B]", ["cn-y", "cn-z", "cn-A", "cn-B"]),
        ("s-[a:g:3]", ["s-a", "s-d", "s-g"]),
        ("spare[:2]", ["spare0", "spare1", "spare2"]),
        ("down[5:1]", []),
        ("10.0.[1:2].[7:8]", ["10.0.1.7", "10.0.1.8", "10.0.2.7", "10.0.2.8"]),
        ("r[1:2]-g[01:02]", ["r1-g01", "r1-g02", "r2-g01", "r2-g02"]),
        ("[1:2]x", ["1x", "2x"]),
        ("plain", ["plain"]),
        ("neg[-1:1]", ["neg-1", "neg0", "neg1"]),
    ],
)
def test_expands_like_ansible(pattern: str, expected: list[str]) -> None:
    assert expand_host_range(pattern) == expected


def test_ten_thousand_hosts_keep_their_padding() -> None:
    names = expand_host_range("gpu[00001:10000]")
    assert len(names) == 10_000
    assert (names[0], names[9_998], names[-1]) == ("gpu00001", "gpu09999", "gpu10000")


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("gpu[01:100]", "equal-length begin and end formats"),
        ("gpu[1:]", "must specify end value"),
        ("gpu[5]", "begin:end or begin:end:step"),
        ("gpu[1:2:3:4]", "begin:end or begin:end:step"),
        ("gpu[1:8:0]", "step must not be zero"),
        ("gpu[a:c:0]", "step must not be zero"),
        ("node-[f:a]", "begin <= end"),
        ("gpu[1:x]", "is not a number or a letter"),
        ("gpu[a:3]", "is not a number or a letter"),
        ("gpu[1:2:x]", "is not a number or a letter"),
        ("gpu[1:2", "cannot read the host range"),
        ("a|b[1:2]", "cannot read the host range"),
    ],
)
def test_malformed_ranges_raise_with_ansible_words(pattern: str, message: str) -> None:
    with pytest.raises(HostRangeError, match=message.replace("[", r"\[")):
        expand_host_range(pattern)


def test_absurd_ranges_are_refused_instead_of_eating_memory() -> None:
    with pytest.raises(HostRangeError, match="more than"):
        expand_host_range(f"gpu[0:{MAX_RANGE_SIZE + 1}]")


def test_has_range_is_any_bracket() -> None:
    assert has_range("gpu[1:2]")
    assert has_range("[")
    assert not has_range("gpu01")
