"""fleetfix.secrets: which extra vars are secret, the Redactor, the stored command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleetfix.events import CommandRan, EventBus, HostStepFinished, RunStarted
from fleetfix.playbook.extravars import parse_extra_vars
from fleetfix.results import CommandResult, Status, StepResult
from fleetfix.secrets import MASK, Redactor, is_secret_name, redact_argv, secret_values


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("db_password", True),
        ("BMC_PASSWD", True),
        ("client_secret", True),
        ("VAULT_TOKEN", True),
        ("api_key", True),
        ("ApiKey", True),
        ("credentials", True),
        ("ssh_private_key", True),
        ("private-key", False),  # not a variable name, and not the pattern's words
        ("passenger", False),
        ("key", False),
        ("db_user", False),
    ],
)
def test_secret_names_by_pattern(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret


def test_declared_names_and_nesting() -> None:
    variables: dict[str, Any] = {
        "bmc": "hunter22",
        "db": {"user": "ops", "password": 123456, "flags": [True, None]},
        "vault_token": {"value": "abc", "list": ["x1", {"deep": "y2"}]},
        "plain": "visible",
    }
    assert secret_values(variables, {"bmc"}) == {"hunter22", "123456", "abc", "x1", "y2"}
    assert secret_values(variables) == {"123456", "abc", "x1", "y2"}


def test_longest_secret_first_and_every_occurrence() -> None:
    redactor = Redactor(["abc", "abcdef"])
    assert redactor.text("abcdef abc xabcdefx") == f"{MASK} {MASK} x{MASK}x"


def test_nothing_to_mask_returns_the_very_same_objects() -> None:
    event = _step_event({"stdout": "all fine", "facts": {"gpus": [{"name": "H100"}]}})
    assert Redactor().redact(event) is event
    assert Redactor(["not-there"]).redact(event) is event


def test_only_what_holds_a_secret_is_rebuilt() -> None:
    facts = {"gpus": [{"name": "H100"}]}
    event = _step_event({"stdout": "pw=hunter22\n", "facts": facts}, message="used hunter22")
    masked = Redactor(["hunter22"]).redact(event)
    assert masked.result.data["stdout"] == f"pw={MASK}\n"
    assert masked.result.message == f"used {MASK}"
    assert masked.result.data["facts"] is facts
    assert masked.result.status is Status.OK
    assert event.result.data["stdout"] == "pw=hunter22\n"  # the engine's own value is untouched


def test_host_names_are_never_rewritten() -> None:
    event = RunStarted(playbook="p.yml", hosts=("gpu001",), check=False)
    assert Redactor(["gpu0"]).redact(event) is event


def test_the_bus_masks_once_for_every_subscriber() -> None:
    seen: list[Any] = []
    bus = EventBus(Redactor(["hunter22"]))
    bus.subscribe(seen.append)
    bus.subscribe(seen.append)
    bus.emit(CommandRan(host="h", step="s", result=CommandResult("echo hunter22", 0, "", "")))
    assert [e.result.command for e in seen] == [f"echo {MASK}"] * 2
    assert seen[0] is seen[1]
    bus.redactor.add(["late-value"])
    bus.emit(CommandRan(host="h", step="s", result=CommandResult("late-value", 0, "", "")))
    assert seen[-1].result.command == MASK


def test_learned_values_below_the_minimum_are_ignored() -> None:
    redactor = Redactor()
    redactor.add(["ok", "", "1"], min_length=4)
    assert not redactor
    redactor.add(["done!"], min_length=4)
    assert redactor.text("done!") == MASK


def _argv(*extra: str, declared: frozenset[str] = frozenset()) -> list[str]:
    items = [extra[i + 1] for i, word in enumerate(extra) if word in ("-e", "--extra-vars")]
    items += [w.partition("=")[2] for w in extra if w.startswith("--extra-vars=")]
    items += [w[2:] for w in extra if w.startswith("-e") and len(w) > 2 and w[1] != "-"]
    variables = parse_extra_vars(items, Path.cwd())
    redactor = Redactor(secret_values(variables, declared))
    return redact_argv(
        ["fleetfix", "run", "p.yml", *extra],
        redactor,
        declared,
        lambda item: parse_extra_vars([item], Path.cwd()),
    )[3:]


def test_stored_argv_masks_every_form_of_extra_vars(tmp_path: Path) -> None:
    assert _argv("-e", "db_password=S3cr3t user='a b'") == [
        "-e",
        f"db_password={MASK} user='a b'",
    ]
    assert _argv("--extra-vars=token=abc123") == [f"--extra-vars=token={MASK}"]
    assert _argv("-eapi_key=abc123") == [f"-eapi_key={MASK}"]
    stored = _argv("-e", '{"db": {"password": "x\\"y"}, "n": 1}')
    assert json.loads(stored[1]) == {"db": {"password": MASK}, "n": 1}
    assert _argv("-e", "bmc=hunter22", declared=frozenset({"bmc"})) == ["-e", f"bmc={MASK}"]
    assert _argv("-e", "user=ops") == ["-e", "user=ops"]


def test_stored_argv_keeps_a_vars_file_path_and_masks_its_values_elsewhere(
    tmp_path: Path,
) -> None:
    vars_file = tmp_path / "vault.yml"
    vars_file.write_text("vault_token: abc123\n")
    stored = _argv("-e", f"@{vars_file}", "--limit", "abc123")
    assert stored == ["-e", f"@{vars_file}", "--limit", MASK]


def _step_event(data: dict[str, Any], message: str = "") -> HostStepFinished:
    result = StepResult(host="gpu001", step="s", status=Status.OK, message=message, data=data)
    return HostStepFinished(result=result)
