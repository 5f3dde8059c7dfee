"""Safe YAML loading with a position on every key and value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.playbook import yamlpos
from fleetfix.playbook.yamlpos import Node, NodeKind, UnsafeText, load_yaml, parse_yaml

TEXT = """\
- name: drain
  hosts: gpu
  tasks:
    - probe: {name: xid, since_boot: true}
      when: >
        a and
        b
"""


def _root(text: str) -> Node:
    root = parse_yaml(text, "pb.yml").root
    assert root is not None
    return root


def at(line: int, column: int) -> SourcePosition:
    return SourcePosition("pb.yml", line, column)


def test_every_key_and_value_has_its_position_and_line() -> None:
    play = _root(TEXT).items[0]
    assert play.kind is NodeKind.MAPPING
    assert play.position == at(1, 3)
    hosts = play.entry("hosts")
    assert hosts is not None
    assert (hosts.key.position, hosts.value.position) == (at(2, 3), at(2, 10))
    assert hosts.value.source_line == "  hosts: gpu"
    step = play.get("tasks")
    assert step is not None
    probe = step.items[0].get("probe")
    assert probe is not None
    since = probe.entry("since_boot")
    assert since is not None
    assert (since.key.position, since.value.position, since.value.value) == (
        at(4, 26),
        at(4, 38),
        True,
    )
    when = step.items[0].get("when")
    assert when is not None
    assert (when.position, when.style, when.value) == (at(5, 13), ">", "a and b\n")


def test_values_are_plain_python() -> None:
    play = _root(TEXT).items[0]
    assert play.value["tasks"][0]["probe"] == {"name": "xid", "since_boot": True}
    assert _root("a: 2024-01-02\nb: 0x10\nc: ~\nd: yes\n").value == {
        "a": __import__("datetime").date(2024, 1, 2),
        "b": 16,
        "c": None,
        "d": True,
    }


def test_merge_keys_override_and_keep_positions() -> None:
    root = _root("base: &b {x: 1, y: 2}\nuse:\n  <<: *b\n  y: 3\n")
    use = root.get("use")
    assert use is not None
    assert use.value == {"x": 1, "y": 3}
    assert [e.key.value for e in use.entries] == ["x", "y"]
    y = use.get("y")
    assert y is not None and y.position == at(4, 6)
    assert parse_yaml("base: &b {x: 1}\nuse:\n  <<: *b\n  x: 2\n", "pb.yml").problems == ()


def test_duplicate_keys_are_reported_not_fatal() -> None:
    document = parse_yaml("a: 1\nb:\n  c: 1\n  c: 2\na: 3\n", "pb.yml")
    assert [(p.message, p.position, p.hint) for p in document.problems] == [
        ("duplicate key 'c'", at(4, 3), "the first is at line 3; only the last one counts"),
        ("duplicate key 'a'", at(5, 1), "the first is at line 1; only the last one counts"),
    ]
    assert document.root is not None and document.root.value == {"a": 3, "b": {"c": 2}}


def test_aliases_share_one_node() -> None:
    root = _root("a: &x [1, 2]\nb: *x\n")
    assert root.get("a") is root.get("b")


@pytest.mark.parametrize(
    ("text", "message", "position"),
    [
        ("a: [1\n", "invalid YAML: expected ',' or ']', but got '<stream end>'", (2, 1)),
        ("a: b: c\n", "invalid YAML: mapping values are not allowed here", (1, 5)),
        (
            "a: !foo 1\n",
            "invalid YAML: could not determine a constructor for the tag '!foo'",
            (1, 4),
        ),
        (
            "a: !!python/object:os.system x\n",
            "invalid YAML: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object:os.system'",
            (1, 4),
        ),
        ("a: !unsafe [1]\n", "invalid YAML: !unsafe applies to a string only", (1, 4)),
        (
            "- a\n- b\n---\n- c\n",
            "invalid YAML: expected a single document in the stream, but found another document",
            (3, 1),
        ),
        ("a: 'x\n", "invalid YAML: found unexpected end of stream", (2, 1)),
        ("a:\n\tb: 1\n", "invalid YAML: found character '\\t' that cannot start any token", (2, 1)),
        ("{[1]: 2}\n", "invalid YAML: found unhashable key", (1, 2)),
    ],
)
def test_yaml_errors_have_positions(text: str, message: str, position: tuple[int, int]) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_yaml(text, "pb.yml")
    assert (caught.value.message, caught.value.position) == (message, at(*position))


def test_unsafe_tag() -> None:
    root = _root("cmd: !unsafe 'echo {{ x }}'\n")
    value = root.value["cmd"]
    assert isinstance(value, UnsafeText)
    assert value == "echo {{ x }}"


def test_empty_and_comment_only_documents() -> None:
    assert parse_yaml("", "pb.yml").root is None
    assert parse_yaml("# nothing\n", "pb.yml").root is None


def test_crlf_and_unicode_line_breaks_keep_source_lines() -> None:
    root = _root("a: 1\r\nb: 2\r\nc: ü\r\n")
    c = root.entry("c")
    assert c is not None
    assert (c.key.position, c.key.source_line) == (at(3, 1), "c: ü")


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(PlaybookError, match="nested too deeply"):
        parse_yaml("[" * 1000 + "]" * 1000, "pb.yml")


@pytest.mark.parametrize(
    ("character", "named"),
    [
        ("\x00", "NUL byte"),
        ("\x07", "control character U+0007"),
        ("\x1b", "escape character U+001B (ESC)"),
        ("\x7f", "control character U+007F"),
        ("\x9b", "control character U+009B"),
        ("\ufffe", "character U+FFFE"),
    ],
)
def test_characters_yaml_refuses_are_named_at_their_place(character: str, named: str) -> None:
    text = f"- hosts: gpu\n  tasks:\n    - name: wipe {character}now\n"
    with pytest.raises(PlaybookError) as raised:
        parse_yaml(text, "pb.yml")
    assert raised.value.message == f"{named} is not allowed in YAML"
    assert raised.value.position == at(3, 18)
    # The line is shown, the character itself never reaches the terminal.
    assert raised.value.source_line == "    - name: wipe \ufffdnow"


def test_character_positions_count_yaml_lines_and_code_points() -> None:
    for text, where in [
        ("a: 1\r\nb: \x01\n", at(2, 4)),
        ("a: 1\rb: 2\n\x00", at(3, 1)),
        ("a: \u2028b: \x02", at(2, 4)),
        ("\tname: \u540d\u524d\x03", at(1, 10)),
    ]:
        with pytest.raises(PlaybookError) as raised:
            parse_yaml(text, "pb.yml")
        assert raised.value.position == where, repr(text)


def test_a_playbook_file_with_a_nul_byte_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pb.yml"
    path.write_bytes(b'- hosts: gpu\n  tasks: []\n  vars: {a: "x\x00"}\n')
    with pytest.raises(PlaybookError) as raised:
        load_yaml(path)
    assert str(raised.value.position) == f"{path}:3:15"
    assert raised.value.message.startswith("NUL byte")


def _nested(depth: int) -> str:
    # The list of plays, the play and its vars are three levels already.
    inner = depth - 3
    return f"- hosts: gpu\n  vars:\n    x: {'[' * inner}{']' * inner}\n"


def test_nesting_deeper_than_the_limit_is_refused_where_it_goes_too_deep() -> None:
    assert _root(_nested(100)).items[0].value["hosts"] == "gpu"
    with pytest.raises(
        PlaybookError, match=r"nested too deeply \(more than 100 levels\)"
    ) as raised:
        parse_yaml(_nested(101), "pb.yml")
    assert raised.value.position == at(3, 8 + 97)  # the 98th bracket is level 101


def _laughs(levels: int, width: int = 9) -> str:
    lines = [f"    a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"    a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "- hosts: gpu\n  vars:\n" + "\n".join(lines) + "\n"


def test_aliases_that_expand_past_the_limit_are_refused_at_the_line_that_does_it() -> None:
    # Six levels of nine: 597,871 values once expanded; shared, so cheap to accept.
    assert len(_root(_laughs(6)).items[0].value["vars"]["a5"]) == 9
    with pytest.raises(PlaybookError, match="expand this value to 5,380,840 values") as raised:
        parse_yaml(_laughs(9), "pb.yml")
    assert raised.value.position == at(9, 9)  # a6, the first value over 1,000,000
    assert raised.value.hint is not None and "billion laughs" in raised.value.hint


def test_a_file_without_end_is_refused_after_the_size_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(yamlpos, "MAX_FILE_BYTES", 1000)
    with pytest.raises(PlaybookError, match="/dev/zero is larger than 0 MiB; refused"):
        load_yaml("/dev/zero")


def test_a_value_pyyaml_cannot_build_is_an_error_at_its_place() -> None:
    with pytest.raises(PlaybookError) as raised:
        parse_yaml("- hosts: gpu\n  vars: {when: 2024-13-45}\n", "pb.yml")
    assert raised.value.message == "invalid YAML: cannot read this value: month must be in 1..12"
    assert raised.value.position == at(2, 16)


def test_ordered_maps_pairs_and_sets_build_their_parts() -> None:
    root = _root("a: !!omap [b: 1, c: 2]\nd: !!pairs [e: 3]\nf: !!set {g, h}\n")
    assert root.value == {"a": [("b", 1), ("c", 2)], "d": [("e", 3)], "f": {"g", "h"}}
    a = root.get("a")
    assert a is not None and a.items[1].value == {"c": 2}


def test_pyyamls_own_reader_error_is_translated_with_its_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The check before parsing uses PyYAML's own rule, so PyYAML's reader never sees such a
    # character; should the two ever differ, its error still becomes a positioned one.
    monkeypatch.setattr(yamlpos, "_NOT_PRINTABLE", re.compile("(?!)"))
    with pytest.raises(PlaybookError) as raised:
        parse_yaml("a: 1\nb: x\x07y\n", "pb.yml")
    assert (raised.value.message, raised.value.position) == (
        "control character U+0007 is not allowed in YAML",
        at(2, 5),
    )
