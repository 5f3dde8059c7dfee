"""fleetfix reads every fixture inventory exactly as ansible-core does (ansible-core is the oracle).

For each case under tests/fixtures/inventories/ the real `ansible-inventory --list` output
must equal render_list (and `--graph --vars` render_graph, for eight cases); every inventory
Ansible rejects must raise InventoryError naming file and line; host patterns and limits must
select the same hosts as Ansible. Verdicts on error cases and pattern answers come from
ansible-core in one process per batch (ansible_helper.py), and samples of both are checked
against the real CLIs. All Ansible processes start at once, in parallel, from one fixture.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import InventoryError, PatternError
from fleetfix.inventory import Inventory, load_inventory, render_graph, render_host, render_list
from fleetfix.inventory.patterns import split_pattern, split_subscript

from .oracle import (
    VENV_BIN,
    Case,
    ErrorCase,
    Run,
    ansible_inventory,
    group_walk_is_ambiguous,
    inventory_args,
    load_cases,
    load_error_cases,
    pattern_request,
    run_all,
    verdicts_request,
    walk_is_ambiguous,
)

CASES = load_cases()
ERROR_CASES = load_error_cases()
PATTERN_CASES = [case for case in CASES if case.patterns or case.limits]
GRAPH_NAMES = (
    "basic-ini",
    "group-host-same-name",
    "group-vars-dirs",
    "group-vars-files",
    "inline-typing",
    "latin1-bytes",
    "yaml-quirks",
    "yaml-types",
)
GRAPH_CASES = [case for case in CASES if case.name in GRAPH_NAMES]
# Error cases also run through the real CLI, to vouch for the helper's verdicts.
ERROR_CLI_CHECKS = [
    "cycle",
    "all-as-child",
    "group-vars-list",
    "yaml-hosts-list",
    "empty-directory",
    "vault",
]
# (case, group) pairs checked against `ansible-inventory --graph GROUP`.
SUBGRAPH_CHECKS = [("large-topology", "spine1"), ("yaml-basic", "pods")]
# (case, host) pairs checked against `ansible-inventory --host`.
HOST_CHECKS = [("basic-ini", "gpu-b03"), ("multi-source", "gpu02"), ("yaml-types", "gpu01")]
# (case, pattern, limit) checked against the `ansible` CLI, to vouch for the pattern helper.
CLI_CHECKS = [
    ("basic-ini", "gpu_nodes:!rack_b", None),
    ("basic-ini", "rack*[1]", None),
    ("basic-ini", "all", "gpu-b0*:!gpu-b03"),
    ("duplicate-hosts", "rack1:&a100:&leaf1", None),
    ("large-topology", "spine2:!leaf5:!leaf6:!leaf7:&rack3*", None),
    ("large-topology", "all", "leaf1:!rack02"),
]

Key = tuple[str, ...]


def _case(name: str) -> Case:
    return next(case for case in CASES if case.name == name)


def _commands(home: Path) -> Iterator[tuple[Key, list[str]]]:
    for case in CASES:
        yield ("list", case.name), ansible_inventory(*inventory_args(case.sources), "--list")
    for case in GRAPH_CASES:
        yield (
            ("graph", case.name),
            ansible_inventory(*inventory_args(case.sources), "--graph", "--vars"),
        )
    accepted = [ErrorCase(case.name, case.sources, None, None, "") for case in CASES]
    yield ("verdicts",), verdicts_request([*ERROR_CASES, *accepted], home)
    for error_case in ERROR_CASES:
        if error_case.name in ERROR_CLI_CHECKS:
            yield (
                ("error", error_case.name),
                ansible_inventory(*inventory_args(error_case.sources), "--list"),
            )
    for case in PATTERN_CASES:
        yield ("patterns", case.name), pattern_request(case, home)
    for name, group in SUBGRAPH_CHECKS:
        yield (
            ("subgraph", name, group),
            ansible_inventory(*inventory_args(_case(name).sources), "--graph", group),
        )
    for name, host in HOST_CHECKS:
        yield (
            ("host", name, host),
            ansible_inventory(*inventory_args(_case(name).sources), "--host", host),
        )
    for name, pattern, limit in CLI_CHECKS:
        limit_args = ["--limit", limit] if limit else []
        command = [str(VENV_BIN / "ansible"), pattern, *inventory_args(_case(name).sources)]
        yield ("cli", name, pattern, limit or ""), [*command, *limit_args, "--list-hosts"]


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> dict[Key, Run]:
    home = tmp_path_factory.mktemp("ansible-home")
    keys, commands = zip(*_commands(home), strict=True)
    return dict(zip(keys, run_all(commands, home), strict=True))


def _ok(run: Run) -> str:
    assert run.returncode == 0, f"ansible failed:\n{run.stderr}"
    return run.stdout


def _as_json(document: dict[str, Any]) -> Any:
    return json.loads(json.dumps(document, sort_keys=True))


def _pattern_answers(oracle: dict[Key, Run], case: Case) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = json.loads(_ok(oracle[("patterns", case.name)]))
    assert len(answers) == len(case.patterns) + len(case.limits)
    return answers


def _listed_hosts(cli_output: str) -> list[str]:
    lines = cli_output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.strip().startswith("hosts ("))
    return [line.strip() for line in lines[start + 1 :] if line.strip()]


def test_there_are_enough_fixtures() -> None:
    assert len(CASES) >= 25
    assert len(PATTERN_CASES) >= 8
    assert len(GRAPH_CASES) == len(GRAPH_NAMES)
    assert len(ERROR_CASES) >= 30


@pytest.mark.parametrize("case", PATTERN_CASES, ids=lambda case: case.name)
def test_fixture_patterns_are_deterministic_in_ansible(case: Case) -> None:
    # A subscript on a group whose walk order Ansible leaves to set iteration would make the
    # oracle itself flaky; keep such patterns out of the fixtures.
    inventory = load_inventory(case.sources)
    for pattern in (*case.patterns, *case.limits):
        for term in split_pattern(pattern):
            expression, subscript = split_subscript(term.lstrip("&!"))
            if subscript is None:
                continue
            groups = [name for name in inventory.groups if fnmatch.fnmatchcase(name, expression)]
            assert not any(group_walk_is_ambiguous(inventory, name) for name in groups), term


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_list_matches_ansible_inventory(case: Case, oracle: dict[Key, Run]) -> None:
    expected = json.loads(_ok(oracle[("list", case.name)]))
    assert _as_json(render_list(load_inventory(case.sources))) == expected


@pytest.mark.parametrize("case", GRAPH_CASES, ids=lambda case: case.name)
def test_graph_with_vars_matches_ansible_inventory(case: Case, oracle: dict[Key, Run]) -> None:
    expected = _ok(oracle[("graph", case.name)]).rstrip("\n")
    assert render_graph(load_inventory(case.sources), with_vars=True) == expected


@pytest.mark.parametrize(("name", "group"), SUBGRAPH_CHECKS)
def test_group_graph_matches_ansible_inventory(
    name: str, group: str, oracle: dict[Key, Run]
) -> None:
    expected = _ok(oracle[("subgraph", name, group)]).rstrip("\n")
    assert render_graph(load_inventory(_case(name).sources), group) == expected


@pytest.mark.parametrize(("name", "host"), HOST_CHECKS)
def test_host_matches_ansible_inventory(name: str, host: str, oracle: dict[Key, Run]) -> None:
    expected = json.loads(_ok(oracle[("host", name, host)]))
    assert _as_json(render_host(load_inventory(_case(name).sources), host)) == expected


def _verdicts(oracle: dict[Key, Run]) -> dict[str, str | None]:
    verdicts: dict[str, str | None] = json.loads(_ok(oracle[("verdicts",)]))
    return verdicts


@pytest.mark.parametrize("case", ERROR_CASES, ids=lambda case: case.name)
def test_rejected_like_ansible_with_file_and_line(case: ErrorCase, oracle: dict[Key, Run]) -> None:
    assert _verdicts(oracle)[case.name] is not None, f"ansible accepts {case.name}"
    with pytest.raises(InventoryError) as raised:
        load_inventory(case.sources)
    error = raised.value
    assert case.message in error.message
    if case.file is None:
        assert error.position is None
    else:
        assert error.position is not None
        assert (error.position.file, error.position.line) == (case.file, case.line)
        assert f"{case.file}:{case.line}:" in str(error)


def test_helper_verdicts_agree_with_ansible_inventory_cli(oracle: dict[Key, Run]) -> None:
    verdicts = _verdicts(oracle)
    for case in CASES:
        assert verdicts[case.name] is None, case.name
        assert oracle[("list", case.name)].returncode == 0, case.name
    assert len(ERROR_CLI_CHECKS) == 6
    for name in ERROR_CLI_CHECKS:
        assert verdicts[name] is not None, name
        assert oracle[("error", name)].returncode != 0, name


def _check_answer(inventory: Inventory, query: str, mine: list[str], theirs: list[str]) -> None:
    assert not inventory.range_terms(query), f"{query!r} uses fleetfix-only host range syntax"
    if walk_is_ambiguous(inventory) and mine != theirs:
        assert sorted(mine) == sorted(theirs), query
    else:
        assert mine == theirs, query


@pytest.mark.parametrize("case", PATTERN_CASES, ids=lambda case: case.name)
def test_patterns_select_like_ansible(case: Case, oracle: dict[Key, Run]) -> None:
    inventory = load_inventory(case.sources)
    answers = _pattern_answers(oracle, case)
    for pattern, answer in zip(case.patterns, answers, strict=False):
        if "error" in answer:
            with pytest.raises(PatternError):
                inventory.select(pattern)
            continue
        _check_answer(inventory, pattern, inventory.select(pattern), answer["hosts"])


@pytest.mark.parametrize("case", PATTERN_CASES, ids=lambda case: case.name)
def test_limits_select_like_ansible(case: Case, oracle: dict[Key, Run]) -> None:
    inventory = load_inventory(case.sources)
    answers = _pattern_answers(oracle, case)[len(case.patterns) :]
    everyone = inventory.select("all")
    for limit, answer in zip(case.limits, answers, strict=True):
        _check_answer(inventory, limit, inventory.limit(everyone, limit), answer["hosts"])


@pytest.mark.parametrize(("name", "pattern", "limit"), CLI_CHECKS)
def test_pattern_helper_agrees_with_ansible_cli(
    name: str, pattern: str, limit: str | None, oracle: dict[Key, Run]
) -> None:
    cli_hosts = _listed_hosts(_ok(oracle[("cli", name, pattern, limit or "")]))
    inventory = load_inventory(_case(name).sources)
    selected = inventory.select(pattern)
    if limit:
        selected = inventory.limit(selected, limit)
    assert cli_hosts
    assert selected == cli_hosts
