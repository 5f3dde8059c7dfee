"""lineinfile's edit rules, checked as a table against what ansible-core's lineinfile does to
the same file (cases written from its documented behaviour and module source)."""

from __future__ import annotations

import pytest

from fleetfix.modules.line_edits import Wanted, absent, present, read_lines

BASE = b"# kernel\nvm.swappiness = 60\nnet.core.rmem_max = 1\nvm.swappiness = 30\n[end]\n"

PRESENT = [
    # (case, file, wanted, file after, msg)
    ("appends at EOF by default", BASE, Wanted("x = 1"), BASE + b"x = 1\n", "line added"),
    ("an equal line is left alone", BASE, Wanted("[end]"), BASE, ""),
    (
        "regexp replaces the last match",
        BASE,
        Wanted("vm.swappiness = 10", regexp=r"^vm\.swappiness"),
        BASE.replace(b"= 30", b"= 10"),
        "line replaced",
    ),
    (
        "firstmatch replaces the first",
        BASE,
        Wanted("vm.swappiness = 10", regexp=r"^vm\.swappiness", firstmatch=True),
        BASE.replace(b"= 60", b"= 10"),
        "line replaced",
    ),
    (
        "regexp without a match appends",
        BASE,
        Wanted("kernel.panic = 1", regexp=r"^kernel\.panic"),
        BASE + b"kernel.panic = 1\n",
        "line added",
    ),
    (
        "insertafter a regexp (its last match)",
        BASE,
        Wanted("x", insertafter=r"^vm\."),
        BASE.replace(b"= 30\n", b"= 30\nx\n"),
        "line added",
    ),
    (
        "insertafter firstmatch",
        BASE,
        Wanted("x", insertafter=r"^vm\.", firstmatch=True),
        BASE.replace(b"= 60\n", b"= 60\nx\n"),
        "line added",
    ),
    (
        "insertbefore a regexp",
        BASE,
        Wanted("x", insertbefore=r"^\[end\]"),
        BASE.replace(b"[end]", b"x\n[end]"),
        "line added",
    ),
    ("insertbefore BOF", BASE, Wanted("x", insertbefore="BOF"), b"x\n" + BASE, "line added"),
    (
        "insertafter a regexp that matches nothing: EOF",
        BASE,
        Wanted("x", insertafter="^nothing"),
        BASE + b"x\n",
        "line added",
    ),
    (
        "insertafter when the next line is already it",
        b"a\nx\n",
        Wanted("x", insertafter="^a"),
        b"a\nx\n",
        "",
    ),
    (
        "backrefs expand the match",
        BASE,
        Wanted(
            r"net.core.rmem_max = \g<1>00", regexp=r"^net\.core\.rmem_max = (\d+)$", backrefs=True
        ),
        BASE.replace(b"= 1\n", b"= 100\n"),
        "line replaced",
    ),
    (
        "backrefs without a match change nothing",
        BASE,
        Wanted(r"x \1", regexp="^nothing (.*)$", backrefs=True),
        BASE,
        "",
    ),
    (
        "search_string replaces the line containing it",
        BASE,
        Wanted("net.core.rmem_max = 2", search_string="rmem_max"),
        BASE.replace(b"= 1\n", b"= 2\n"),
        "line replaced",
    ),
    (
        "a last line without newline gets one before the appended line",
        b"a",
        Wanted("b"),
        b"a\nb\n",
        "line added",
    ),
    ("an empty file", b"", Wanted("a"), b"a\n", "line added"),
    # Ansible finds the equal line ignoring \r\n, then replaces it by the line with \n.
    ("a CRLF line is rewritten with LF", b"a\r\n", Wanted("a"), b"a\n", "line replaced"),
]


@pytest.mark.parametrize(
    ("before", "wanted", "after", "msg"),
    [case[1:] for case in PRESENT],
    ids=[c[0] for c in PRESENT],
)
def test_present_edits_as_ansible(before: bytes, wanted: Wanted, after: bytes, msg: str) -> None:
    edit = present(read_lines(before), wanted)
    assert b"".join(edit.lines) == after
    assert edit.msg == msg
    assert edit.changed == (after != before)


ABSENT = [
    ("by regexp", Wanted(regexp=r"^vm\."), 2),
    ("by search_string", Wanted(search_string="rmem"), 1),
    ("by line", Wanted("[end]"), 1),
    ("nothing matches", Wanted("absent"), 0),
]


@pytest.mark.parametrize(("wanted", "found"), [c[1:] for c in ABSENT], ids=[c[0] for c in ABSENT])
def test_absent_removes_every_matching_line(wanted: Wanted, found: int) -> None:
    edit = absent(read_lines(BASE), wanted)
    assert edit.found == found
    assert len(edit.lines) == 5 - found
    assert edit.msg == (f"{found} line(s) removed" if found else "")
    assert edit.changed == bool(found)


def test_lines_split_only_after_newlines() -> None:
    assert read_lines(b"a\r\nb\rc\n\nd") == [b"a\r\n", b"b\rc\n", b"\n", b"d"]
