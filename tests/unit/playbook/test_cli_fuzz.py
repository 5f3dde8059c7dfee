"""Malformed playbooks through the CLI: every one is refused (exit 1 or 5), none is a traceback.

The inputs come from a seeded generator, so a failure names a case that reproduces: random
bytes, truncated and mutated playbooks, control characters and odd Unicode, deep nesting,
alias bombs, foreign YAML tags and template junk. Each is run through `fleetfix validate` and
`fleetfix run --syntax-check` in this process, as an operator would run them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.cli import main

BASE = """\
- name: fuzz base
  hosts: gpu
  vars:
    reason: "xid {{ code | default(79) }}"
  tasks:
    - name: read the GPUs
      probe: {name: nvidia_smi, expected_gpus: 8}
      register: smi
      notify: finish
    - name: say why
      when: smi.facts is defined
      debug: {msg: "{{ reason }}"}
      tags: [probe]
  handlers:
    - name: finish
      debug: {msg: done}
"""
# Any cut between these two points leaves a notify: without its handler, so it is invalid.
CUT_FROM = BASE.index("notify: finish\n") + len("notify: finish\n")
CUT_TO = BASE.index("- name: finish") + len("- name: finis")

FORBIDDEN = [chr(c) for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)]
FORBIDDEN += [chr(c) for c in range(0x80, 0xA0) if c != 0x85] + ["\ufffe", "\uffff"]
ODD_UNICODE = [
    "\u202e",  # right-to-left override
    "\u200b",  # zero-width space
    "\u2028",  # line separator (a YAML line break)
    "\u00a0",  # no-break space
    "\ufeff",  # byte order mark, mid-file
    "e\u0301",  # combining accent
    "\U0001f525",  # emoji
    "\u4e2d\u6587",
    "\ud7ff",
]
TAGS = [
    "!!python/object/apply:os.system ['true']",
    "!!python/name:os.system",
    "!vault |\n        $ANSIBLE_VAULT;1.1;AES256\n        6162",
    "!unsafe {a: 1}",
    "!!binary aGVsbG8=",
    "!custom x",
    "!!set {a, b}",
    "!!omap [a: 1]",
]
JUNK_VALUES = [
    "{{ ",
    '"{% for x in %}"',
    '"{{ x | no_such_filter }}"',
    "\"{{ ''.__class__.__mro__ }}\"",
    "&a [*a]",
    "*undefined_alias",
    "? [a, b]\n      : c",
    "<<: 5",
    "2024-13-45",
    ".inf",
    "9" * 5000,
    "[1, 2",
    "{a: 1, a: 2}",
    "|\n        block",
    ">-",
    "'unterminated",
    "@",
    "`",
    "%TAG",
    "- - - -",
]
KEYS = ["hosts", "tasks", "vars", "tags", "serial", "name", "become", "handlers", "pre_tasks"]


def _truncated(rng: random.Random) -> str:
    return BASE[: rng.randint(CUT_FROM, CUT_TO)]


def _random_bytes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(0, 300))


def _forbidden_character(rng: random.Random) -> str:
    at = rng.randint(0, len(BASE))
    return BASE[:at] + rng.choice(FORBIDDEN) + BASE[at:]


def _not_utf8(rng: random.Random) -> bytes:
    data = BASE.encode()
    at = rng.randint(0, len(data))
    return data[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80"]) + data[at:]


def _odd_unicode(rng: random.Random) -> str:
    text = _truncated(rng)
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(text))
        text = text[:at] + rng.choice(ODD_UNICODE) + text[at:]
    return text


def _deep(rng: random.Random) -> str:
    depth = rng.randint(101, 3000)
    opener, closer = rng.choice([("[", "]"), ("{a: ", "}"), ("- ", "")])
    if opener == "- ":
        body = "".join(f"\n{'  ' * (level + 3)}-" for level in range(min(depth, 400)))
        return f"- hosts: gpu\n  vars:\n    x:{body} leaf\n"
    closing = closer * depth if rng.random() < 0.5 else ""
    return f"- hosts: gpu\n  vars:\n    x: {opener * depth}1{closing}\n  tasks: []\n"


def _alias_bomb(rng: random.Random) -> str:
    width, levels = rng.randint(8, 12), rng.randint(7, 10)
    lines = [f"    a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"    a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "- hosts: gpu\n  vars:\n" + "\n".join(lines) + "\n  tasks: []\n"


def _structure(rng: random.Random) -> str:
    """A play with random keys and junk values, always with one keyword that does not exist."""
    lines = ["- zz_not_a_keyword: 1"]
    for _ in range(rng.randint(1, 6)):
        value = rng.choice([*JUNK_VALUES, *TAGS, "[]", "{}", "null", "gpu"])
        lines.append(f"  {rng.choice(KEYS)}: {value}")
    if rng.random() < 0.5:
        junk = rng.choice([*JUNK_VALUES, *TAGS])
        lines += [
            "  tasks:",
            "    - name: junk",
            f"      debug: {{msg: {junk}}}",
            f"      when: {junk}",
        ]
    return "\n".join(lines) + "\n"


GENERATORS: dict[str, Callable[[random.Random], str | bytes]] = {
    "truncated": _truncated,
    "random-bytes": _random_bytes,
    "control-character": _forbidden_character,
    "not-utf8": _not_utf8,
    "odd-unicode": _odd_unicode,
    "deep": _deep,
    "alias-bomb": _alias_bomb,
    "structure": _structure,
}
PER_GENERATOR = 30
CASES = [(name, seed) for name in GENERATORS for seed in range(PER_GENERATOR)]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else -1), captured.out + captured.err


def test_the_base_playbook_is_valid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pb.yml"
    path.write_text(BASE, encoding="utf-8")
    assert _cli(["validate", str(path)], capsys)[0] == 0


@pytest.mark.parametrize(("generator", "seed"), CASES, ids=[f"{g}-{s}" for g, s in CASES])
def test_malformed_playbooks_are_refused_without_a_traceback(
    generator: str, seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content = GENERATORS[generator](random.Random(f"{generator}/{seed}"))
    path = tmp_path / "pb.yml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    for argv in (["validate", str(path)], ["run", "--syntax-check", str(path)]):
        code, output = _cli(argv, capsys)
        assert code in (1, 5), (argv, output[-2000:])
        assert "Traceback" not in output and "internal error" not in output, output[-2000:]
