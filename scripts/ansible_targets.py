"""Run ansible's own integration targets under ansible-playbook and under fleetfix; count agreement.

    .venv/bin/python scripts/ansible_targets.py ANSIBLE_CHECKOUT [--targets a,b] [--jobs 2]
        [--json results.json] [--only SUBSTRING]

ANSIBLE_CHECKOUT is a checkout of github.com/ansible/ansible (nothing from it is copied into
this repository). Each target's runme.sh is read for its `ansible-playbook PLAYBOOK ...` lines
(the inventory, -e, --tags, --limit, --check, --force-handlers and environment assignments it
uses); a target without runme.sh is run as ansible-test runs it, a play on `testhost` with the
target as its role. Each case runs in two fresh copies of the targets directory, one per tool,
with the same inventory and flags, and agrees when both show the same exit code, the same
PLAY RECAP counts per host and the same printed values (every `debug` block's lines).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

VENV_BIN = Path(sys.executable).parent

TARGETS = [
    "any_errors_fatal",
    "blocks",
    "handlers",
    "tags",
    "loops",
    "include_import",
    "roles",
    "check_mode",
    "failed_when",
    "until",
    "var_precedence",
    "set_fact",
    "assert",
    "meta_tasks",
    "stat",
    "copy",
    "lineinfile",
    "changed_when",
    "ignore_errors",
    "loop_control",
    "register",
    "special_vars",
    "var_blending",
    "strategy_linear",
    "strategy_free",
    "play_iterator",
    "conditionals",
    "includes",
    "include_vars",
    "vars_files",
    "debug",
    "keyword_inheritance",
    "omit",
    "gathering_facts",
    "facts_d",
    "task_ordering",
    "var_inheritance",
    "lookup_sequence",
    "lookup_indexed_items",
    "lookup_items",
    "lookup_dict",
    "lookup_together",
    "lookup_subelements",
    "lookup_nested",
]

INVENTORY = """\
[testgroup]
testhost ansible_connection=local ansible_python_interpreter={python}
"""


@dataclass(frozen=True)
class Case:
    target: str
    playbook: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        extra = " ".join(self.args)
        return f"{self.target}/{self.playbook}" + (f" {extra}" if extra else "")


@dataclass
class Seen:
    exit_code: int
    recap: dict[str, str]
    printed: list[str]
    output: str


@dataclass
class Outcome:
    case: str
    agree: bool
    differs: list[str] = field(default_factory=list)
    ansible_exit: int = 0
    fleetfix_exit: int = 0
    fleetfix_tail: str = ""
    ansible_tail: str = ""


_PLAYBOOK_LINE = re.compile(r"ansible-playbook\s+(.*)")
_ASSIGN = re.compile(r"^(?:export\s+)?([A-Z_][A-Z0-9_]*)=(\S*)$")
_SKIP_FLAGS = {"-v", "-vv", "-vvv", "-vvvv", "-vvvvv", "--diff", "--syntax-check"}
_KEEP_WITH_VALUE = {"-i", "-e", "--extra-vars", "--tags", "-t", "--skip-tags", "-l", "--limit"}
_KEEP_ALONE = {"--check", "-C", "--force-handlers", "--flush-cache"}


def cases_of(checkout: Path, target: str) -> list[Case]:
    """The ansible-playbook runs of one target (its runme.sh's, or its role as ansible-test's)."""
    root = checkout / "test/integration/targets" / target
    runme = root / "runme.sh"
    if not runme.exists():
        if (root / "tasks/main.yml").exists():
            return [Case(target, "", ())]
        return []
    found: list[Case] = []
    env: dict[str, str] = {}
    for raw in runme.read_text().splitlines():
        line = raw.strip()
        if line.startswith("#"):
            continue
        if (assign := _ASSIGN.match(line)) and "ansible" not in line:
            value = assign.group(2).strip("\"'")
            if "$" not in value:
                env[assign.group(1)] = value
            continue
        if line.startswith("unset "):
            for name in line.split()[1:]:
                env.pop(name, None)
            continue
        match = _PLAYBOOK_LINE.search(line)
        if match is None:
            continue
        case = _case(target, match.group(1), line[: match.start()], env)
        if case is not None and case not in found:
            found.append(case)
    return found


def _case(target: str, rest: str, before: str, env: dict[str, str]) -> Case | None:
    text = re.split(r"\s(?:\||>|2>|&&|\|\||;)|\)|`", rest)[0]
    try:
        words = shlex.split(text.replace('"$@"', "").replace("$@", ""))
    except ValueError:
        return None
    if any("$" in word for word in words):
        return None
    local_env = dict(env)
    for word in before.split():
        if assign := _ASSIGN.match(word.strip("[(\"'")):
            local_env[assign.group(1)] = assign.group(2).strip("\"'")
    playbook = ""
    args: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word in _KEEP_WITH_VALUE and index + 1 < len(words):
            args += [word, words[index + 1]]
            index += 2
            continue
        if word in _KEEP_ALONE:
            args.append(word)
        elif word.endswith((".yml", ".yaml")) and not playbook:
            playbook = word
        elif word.startswith("-") and word not in _SKIP_FLAGS:
            return None  # a flag this runner does not pass on
        index += 1
    if not playbook:
        return None
    ansible_env = tuple(sorted((k, v) for k, v in local_env.items() if k.startswith("ANSIBLE_")))
    return Case(target, playbook, tuple(args), ansible_env)


def run_case(checkout: Path, case: Case, work: Path) -> Outcome:
    seen = {}
    for tool in ("ansible", "fleetfix"):
        tree = work / tool / "targets"
        for name in _needed(checkout, case.target):
            source = checkout / "test/integration/targets" / name
            shutil.copytree(source, tree / name, symlinks=True, dirs_exist_ok=True)
        (tree.parent / "inventory").write_text(INVENTORY.format(python=sys.executable))
        where = tree / case.target
        playbook = case.playbook
        if not playbook:
            playbook = "_as_ansible_test.yml"
            (where / playbook).write_text(
                f"- hosts: testhost\n  gather_facts: true\n  roles:\n    - role: {case.target}\n"
            )
        seen[tool] = _run_tool(tool, where, playbook, case, work / tool)
    theirs, ours = seen["ansible"], seen["fleetfix"]
    differs = []
    if theirs.exit_code != ours.exit_code:
        differs.append(f"exit {theirs.exit_code} vs {ours.exit_code}")
    if theirs.recap != ours.recap:
        differs.append(f"recap {theirs.recap} vs {ours.recap}")
    if theirs.printed != ours.printed:
        differs.append("printed values")
    return Outcome(
        case.name,
        not differs,
        differs,
        theirs.exit_code,
        ours.exit_code,
        ours.output[-3000:],
        theirs.output[-3000:],
    )


def _needed(checkout: Path, target: str) -> list[str]:
    """The target and the shared setup roles it may name (setup_*, prepare_*)."""
    targets = checkout / "test/integration/targets"
    shared = [p.name for p in targets.iterdir() if p.name.startswith(("setup_", "prepare_"))]
    return [target, *shared]


def _run_tool(tool: str, where: Path, playbook: str, case: Case, home: Path) -> Seen:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "FLEETFIX_"))}
    env = {**base, **dict(case.env), "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1"}
    inventory_default = ["-i", "../../inventory"] if "-i" not in case.args else []
    if tool == "ansible":
        env |= {
            "ANSIBLE_HOME": str(home / ".ansible"),
            "ANSIBLE_DEPRECATION_WARNINGS": "0",
            "ANSIBLE_ROLES_PATH": str(where.parent),
        }
        command = [str(VENV_BIN / "ansible-playbook"), *inventory_default, *case.args, playbook]
    else:
        env |= {
            "FLEETFIX_JOURNAL": str(home / "journal.sqlite"),
            "ANSIBLE_ROLES_PATH": str(where.parent),
        }
        command = [
            str(VENV_BIN / "fleetfix"), "run", "--yes", "--transport", "local",
            *inventory_default, *case.args, playbook,
        ]  # fmt: skip
    try:
        done = subprocess.run(
            command, cwd=where, env=env, capture_output=True, text=True, timeout=180, check=False
        )
    except subprocess.TimeoutExpired:
        return Seen(-1, {}, [], "timed out after 180 s")
    return Seen(
        done.returncode, _recap(done.stdout), _printed(done.stdout), done.stdout + done.stderr
    )


_RECAP = re.compile(r"^(\S+)\s+: (ok=.*\S)\s*$")


def _recap(stdout: str) -> dict[str, str]:
    recap: dict[str, str] = {}
    for line in stdout.splitlines():
        if match := _RECAP.match(line):
            recap[match.group(1)] = " ".join(match.group(2).split())
    return recap


_VOLATILE = (
    # values that differ between two runs of one tool, never a difference between the tools
    (re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?"), "<time>"),
    (re.compile(r"\b\d+:\d{2}:\d{2}\.\d+\b"), "<delta>"),
    (re.compile(r'("(?:atime|mtime|ctime|inode|dev|version|tdiff|epoch)": )"?[\d.]+"?'), r"\1<n>"),
    (re.compile(r"/tmp/[\w.-]+"), "/tmp/<tmp>"),
    # loops/ prints now(fmt='%s.%f') stamps of a paused loop and their difference
    (re.compile(r"\b\d{10}\.\d{6}\b"), "<epoch>"),
    (re.compile(r"\btdiff=[\d.]+"), "tdiff=<n>"),
)


def _masked(block: str) -> str:
    for pattern, mask in _VOLATILE:
        block = pattern.sub(mask, block)
    return block


def _printed(stdout: str) -> list[str]:
    """Every debug block (`ok: [h] => {` ... `}`), its lines with the host, sorted, with the
    values that change from run to run masked (_VOLATILE: times, inodes, temporary names)."""
    blocks: list[str] = []
    lines = stdout.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("ok: [") and line.endswith("=> {"):
            block = [line]
            index += 1
            while index < len(lines) and lines[index] != "}":
                block.append(lines[index])
                index += 1
            blocks.append(_masked("\n".join(block)))
        index += 1
    return sorted(blocks)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--only", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--list", action="store_true")
    options = parser.parse_args()
    cases = [
        case
        for target in options.targets.split(",")
        for case in cases_of(options.checkout, target)
        if options.only in case.name
    ]
    if options.list:
        for case in cases:
            print(case.name, dict(case.env) or "")
        print(f"{len(cases)} cases")
        return 0
    outcomes: list[Outcome] = []
    with (
        tempfile.TemporaryDirectory(prefix="ansible-targets-") as tmp,
        concurrent.futures.ThreadPoolExecutor(options.jobs) as pool,
    ):
        futures = {
            pool.submit(run_case, options.checkout, case, Path(tmp) / str(n)): case
            for n, case in enumerate(cases)
        }
        for future in concurrent.futures.as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            mark = "agree" if outcome.agree else "DIFFER " + "; ".join(outcome.differs)
            print(f"{outcome.case}: {mark}", flush=True)
    agreed = sum(o.agree for o in outcomes)
    print(f"{agreed} of {len(outcomes)} agree ({100 * agreed / max(1, len(outcomes)):.0f}%)")
    refused = sum(_refused_both(o) for o in outcomes)
    print(
        f"{refused} more differ only in the exit code of a playbook both refuse before it runs"
        " (ansible-playbook 4, fleetfix 1: docs/decisions.md)"
    )
    if options.json:
        outcomes.sort(key=lambda o: o.case)
        options.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


def _refused_both(outcome: Outcome) -> bool:
    """Only the exit code differs, ansible-playbook's 4 against fleetfix's 1: a playbook
    fleetfix refuses at load where Ansible stops with its parser error (recaps and printed
    values the same, none)."""
    return outcome.differs == ["exit 4 vs 1"]


if __name__ == "__main__":
    raise SystemExit(main())
