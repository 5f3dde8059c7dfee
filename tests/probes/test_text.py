"""Cleaning of human-pasted tool output: prompts, quotes, indentation, CRLF, elisions."""

from __future__ import annotations

from fleetfix.probes.text import (
    Line,
    clean_lines,
    clean_text,
    dedent,
    drop_prompts,
    is_elision,
    is_prompt,
    split_lines,
    strip_quotes,
)
from tests.probes.cases import SAMPLES


def test_crlf_and_cr_are_normalised_and_numbered() -> None:
    assert split_lines("a\r\nb\rc") == (Line(1, "a"), Line(2, "b"), Line(3, "c"))


def test_quote_prefix_is_stripped_only_when_every_line_has_it() -> None:
    quoted = split_lines("> one\n>\n> two\n")
    assert [ln.text for ln in strip_quotes(quoted)] == ["one", "", "two", ""]
    mixed = split_lines("> nvidia-smi -q\nTimestamp : now\n")
    assert strip_quotes(mixed) == mixed


def test_diff_view_quote_prefix() -> None:
    sample = (SAMPLES / "dmesg-xid/gpud-pr46-xid13-109-dmesg-ctime-diffquoted.txt").read_text()
    assert clean_lines(sample)[0].text.startswith("[Fri Aug 30 11:11:22 2024] nvidia-peermem")


def test_prompts_are_dropped_and_gt_prompt_only_before_output() -> None:
    lines = split_lines(
        "> nvidia-smi topo -m\n"
        "$ sudo dmesg | grep Xid\n"
        "root@node03:~# mpirun -np 8 ./all_reduce_perf\n"
        "user@host:~/dir> sinfo\n"
        "[user@host dir]$ lsmod\n"
        "#  Rank  0 Group  0 Pid  1234\n"
        "> data after output stays\n"
    )
    assert [ln.number for ln in drop_prompts(lines)] == [6, 7, 8]
    assert is_prompt("> cmd", leading=True)
    assert not is_prompt("> cmd")
    assert not is_prompt("# nThread 1 nGpus 8")


def test_common_indentation_is_removed_but_relative_indent_kept() -> None:
    lines = split_lines("    a\n\n        b\n    c\n")
    assert [ln.text for ln in dedent(lines)] == ["a", "", "    b", "c", ""]
    assert clean_text("    x\n    y", indent=False) == "    x\n    y"


def test_yaml_indented_lsmod_sample() -> None:
    sample = (SAMPLES / "misc/issue-gpud-pr39-lsmod-peermem-yaml-indented.txt").read_text()
    assert clean_lines(sample)[0] == Line(1, "nvidia_peermem         16384  0")


def test_elisions() -> None:
    assert all(is_elision(t) for t in ("...", "[...]", " .... ", "…"))
    assert not is_elision("[   10.735323] pci 0000:04:00.0: ...")


def test_output_without_artefacts_comes_back_as_it_is() -> None:
    """The shortcuts for plain output (no `$`/`@`, no leading `>`, `+` or indentation)."""
    plain = split_lines("\nfirst\n  indented\n\tmore\n> not a prompt: after output\n")
    assert drop_prompts(plain) is plain
    assert strip_quotes(plain) is plain
    assert dedent(plain) is plain


def test_a_leading_gt_prompt_is_dropped_without_dollar_or_at() -> None:
    lines = split_lines("\n> nvidia-smi -q\nTimestamp : now\n")
    assert [ln.number for ln in drop_prompts(lines)] == [1, 3, 4]


def test_indentation_shared_after_a_blank_first_line_is_removed() -> None:
    lines = split_lines("\n\t  a\n\t  b\n")
    assert [ln.text for ln in dedent(lines)] == ["", "a", "b", ""]
    assert dedent(split_lines("  a\nb\n")) == split_lines("  a\nb\n")
