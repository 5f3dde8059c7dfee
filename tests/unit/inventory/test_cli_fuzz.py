"""Malformed inventories and host patterns through the CLI: refused (exit 1 or 5), no traceback.

The inputs come from a seeded generator, so a failure names a case that reproduces: random
bytes, INI and YAML inventories built from odd lines (ranges too large to expand, bad
sections, cycles, literal_eval bait, foreign tags, alias bombs, deep nesting), and --limit
or `hosts:` patterns that are malformed or too large. Each runs in this process through
`fleetfix inventory --list`, or `fleetfix run --list-hosts` for patterns.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.cli import main

FORBIDDEN = [chr(c) for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)]
GROUPS = ["gpu", "rack1", "rack2", "leaf", "all", "ungrouped"]
HUGE_RANGES = [
    "node[0:999999999999]",
    "node[0:1000000]",
    "r[0:9999]n[0:9999]",
    "r[0:99]s[0:99]n[0:999]",
    "n[0:99999999999999999999999999999999]",
    "n" + "[1:2]" * 40,
]
INI_LINES = [
    "[{g}]",
    "[{g}:vars]",
    "[{g}:children]",
    "[{g}:weird]",
    "[bad name]",
    "[{g}",
    "gpu01",
    "gpu01:2222",
    "gpu01:port",
    "gpu[1:3]",
    "gpu[01:3]",
    "gpu[a:c]",
    "gpu[c:a]",
    "gpu[1:4:0]",
    "[::1]:22",
    "gpu02 ansible_user=ops",
    "gpu03 k='unterminated",
    "gpu04 k=" + "[" * 120 + "]" * 120,
    "gpu05 k=" + "9" * 5000,
    "gpu06 k=1e999 j={'a': {1, 2}}",
    "gpu07 k={[1]: 2}",
    "gpu08 novalue",
    "k=v",
    "{g}",
    "# comment",
    "; comment",
    "---",
    "gpu\u201309",
    "gpu\u200b10",
    "\u202egpu11",
    *HUGE_RANGES,
]
YAML_PIECES = [
    "{g}:\n  hosts: [a, b]\n",
    "{g}:\n  children:\n    {h}:\n      children:\n        {g}:\n",
    "{g}: 5\n",
    "{g}:\n  vars: [1]\n",
    "{g}:\n  hosts:\n    h1: [1, 2]\n",
    "'[bad': 1\n",
    "? [a, b]\n: c\n",
    "{g}: &x\n  hosts: {h2: }\n{h}: *x\n",
    "<<: {a: 1}\n",
    "{g}:\n  hosts:\n    1234:\n",
    "{g}:\n  hosts:\n    ~:\n",
    "{g}: !!python/object/apply:os.system ['true']\n",
    "{g}: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n",
    "{g}: !unsafe {hosts: {h3: }}\n",
    "{g}:\n  vars:\n    when: 2024-13-45\n",
    "{g}:\n  hosts:\n    h4:\n      x: !!omap [a: 1]\n",
    "{g}:\n  vars: {x: " + "[" * 150 + "]" * 150 + "}\n",
    "plugin: constructed\n",
    "{g}:\n  hosts:\n    '{r}':\n",
    "{g}:\n\thosts:\n",
    "- {g}\n",
    "...\n",
    "--- {g}\n",
]


def _random_bytes(rng: random.Random) -> tuple[str, bytes]:
    data = bytearray(rng.randbytes(rng.randint(0, 300)))
    data.insert(rng.randint(0, len(data)), ord(rng.choice(FORBIDDEN)))
    return rng.choice(["hosts.ini", "hosts.yml", "hosts"]), bytes(data)


def _ini(rng: random.Random) -> tuple[str, bytes]:
    count = rng.randint(1, 12)
    lines = [rng.choice(INI_LINES).replace("{g}", rng.choice(GROUPS)) for _ in range(count)]
    if rng.random() < 0.3:
        at = rng.randint(0, len(lines))
        lines.insert(at, rng.choice(FORBIDDEN).join(("gpu", "12")))
    # Whatever section the lines end in, "[x" is not valid there: the file is always refused.
    return "hosts.ini", ("\n".join([*lines, "[x"]) + "\n").encode()


def _yaml(rng: random.Random) -> tuple[str, bytes]:
    # First a group whose host is a range too large: refused even if the rest reads.
    text = "zz:\n  hosts:\n    'zz[0:99999999]':\n"
    for _ in range(rng.randint(0, 5)):
        piece = rng.choice(YAML_PIECES).replace("{g}", rng.choice(GROUPS))
        text += piece.replace("{h}", rng.choice(GROUPS)).replace("{r}", rng.choice(HUGE_RANGES))
    return rng.choice(["hosts.yml", "hosts.json", "hosts"]), text.encode()


def _alias_bomb(rng: random.Random) -> tuple[str, bytes]:
    width, levels = rng.randint(8, 12), rng.randint(7, 10)
    lines = [f"    a0: &a0 [{', '.join(['lol'] * width)}]"]
    for level in range(1, levels):
        lines.append(f"    a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * width)}]")
    return "hosts.yml", ("all:\n  hosts:\n    h1:\n  vars:\n" + "\n".join(lines) + "\n").encode()


def _deep(rng: random.Random) -> tuple[str, bytes]:
    depth = rng.randint(101, 3000)
    if rng.random() < 0.5:
        text = '{"all": {"vars": {"x": ' + '{"a": ' * depth + "1" + "}" * depth + "}}}"
        return "hosts.json", text.encode()
    nested = "[" * depth + ("]" * depth if rng.random() < 0.5 else "")
    return "hosts.yml", f"all:\n  hosts:\n    h1:\n  vars:\n    x: {nested}\n".encode()


INVENTORIES: dict[str, Callable[[random.Random], tuple[str, bytes]]] = {
    "random-bytes": _random_bytes,
    "ini": _ini,
    "yaml": _yaml,
    "alias-bomb": _alias_bomb,
    "deep": _deep,
}
PATTERN_TERMS = [
    "gpu01",
    "rack1",
    "!rack2",
    "&gpu",
    "gpu0*",
    "~gpu0[12]",
    "rack1[0]",
    "rack1[1:2]",
    "all",
]
BAD_TERMS = [
    *HUGE_RANGES,
    "gpu[1:2",
    "!",
    "&",
    "~(",
    "~[z-a]",
    "@/nonexistent/limit/file",
    "node[1:2:0]",
    "rack1[99]",
    "!&gpu",
]


def _pattern(rng: random.Random, bad_terms: list[str] = BAD_TERMS) -> str:
    terms = rng.sample(PATTERN_TERMS, rng.randint(0, 3))
    terms.insert(rng.randint(0, len(terms)), rng.choice(bad_terms))
    return rng.choice([",", ":"]).join(terms) if rng.random() < 0.8 else ",".join(terms)


PER_GENERATOR = 40
CASES = [(name, seed) for name in INVENTORIES for seed in range(PER_GENERATOR)]
PATTERN_CASES = list(range(60))
FLEET = "[rack1]\ngpu[01:04]\n[rack2]\ngpu[05:08]\n[gpu:children]\nrack1\nrack2\n"


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    captured = capsys.readouterr()
    code = exited.value.code
    return (code if isinstance(code, int) else -1), captured.out + captured.err


def _refused(code: int, output: str) -> None:
    assert code in (1, 5), output[-2000:]
    assert "Traceback" not in output and "internal error" not in output, output[-2000:]


@pytest.mark.parametrize(("generator", "seed"), CASES, ids=[f"{g}-{s}" for g, s in CASES])
def test_malformed_inventories_are_refused_without_a_traceback(
    generator: str, seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, content = INVENTORIES[generator](random.Random(f"{generator}/{seed}"))
    path = tmp_path / name
    path.write_bytes(content)
    _refused(*_cli(["inventory", "--list", "-i", str(path)], capsys))


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[Path, Path]:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(FLEET, encoding="utf-8")
    playbook = tmp_path / "pb.yml"
    playbook.write_text("- hosts: gpu\n  tasks: []\n", encoding="utf-8")
    return inventory, playbook


def test_the_fleet_lists_its_hosts(
    fleet: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    inventory, playbook = fleet
    argv = ["run", "--list-hosts", str(playbook), "-i", str(inventory), "-l", "rack1,!gpu02"]
    code, output = _cli(argv, capsys)
    assert (code, output.count("      gpu0")) == (0, 3)


@pytest.mark.parametrize("seed", PATTERN_CASES)
def test_malformed_limits_are_refused_without_a_traceback(
    seed: int, fleet: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    inventory, playbook = fleet
    limit = _pattern(random.Random(f"limit/{seed}"))
    argv = ["run", "--list-hosts", str(playbook), "-i", str(inventory), "-l", limit]
    _refused(*_cli(argv, capsys))


@pytest.mark.parametrize("seed", PATTERN_CASES)
def test_malformed_play_host_patterns_are_refused_without_a_traceback(
    seed: int, fleet: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    inventory, playbook = fleet
    # `@file` means a file only in --limit; in `hosts:` it is a name that matches nothing.
    no_files = [term for term in BAD_TERMS if not term.startswith("@")]
    hosts = _pattern(random.Random(f"hosts/{seed}"), no_files).replace("'", "''")
    playbook.write_text(f"- hosts: '{hosts}'\n  tasks: []\n", encoding="utf-8")
    _refused(*_cli(["run", "--list-hosts", str(playbook), "-i", str(inventory)], capsys))
