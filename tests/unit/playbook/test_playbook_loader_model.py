"""Good playbooks load into exactly the model values the engine reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import load_playbook, validate_playbook
from fleetfix.playbook.model import Duration, Play, Playbook, Step, StepKind
from fleetfix.playbook.yamlpos import UnsafeText

from .conftest import PLAYBOOKS

GOOD = sorted((PLAYBOOKS / "good").glob("*.yml"))


def test_realistic_xid79_remediation_loads_into_the_expected_model(catalog: StepCatalog) -> None:
    path = PLAYBOOKS / "good" / "xid79_remediation.yml"

    def at(line: int, column: int) -> SourcePosition:
        return SourcePosition(str(path), line, column)

    verify = (
        Step(
            StepKind.PROBE,
            "probe nvidia_smi",
            {"name": "nvidia_smi", "params": {}},
            at(40, 15),
            register="smi",
        ),
        Step(
            StepKind.ASSERT,
            "assert",
            {
                "that": (
                    "smi.facts.count == expected_gpus",
                    "smi.facts.gpus | selectattr('fell_off_bus') | list | length == 0",
                ),
                "fail_msg": "only {{ smi.facts.count }} of {{ expected_gpus }} GPUs visible",
            },
            at(42, 15),
        ),
    )
    escalate = (
        Step(
            StepKind.ACTION,
            "action reload_driver",
            {"name": "reload_driver", "params": {}},
            at(48, 15),
        ),
        Step(
            StepKind.ACTION,
            "action reboot",
            {"name": "reboot", "params": {}},
            at(49, 15),
            expect_unreachable=Duration(900.0),
        ),
    )
    block = (
        Step(
            StepKind.ACTION,
            "Collect evidence first",
            {"name": "collect_evidence", "params": {}},
            at(31, 11),
        ),
        Step(
            StepKind.ACTION,
            "Reset the GPU, escalating to a driver reload, then a reboot",
            {"name": "gpu_reset", "params": {"gpus": "all"}},
            at(34, 11),
            timeout=600.0,
            verify=verify,
            escalate=escalate,
            cooldown=Duration(86400.0),
            max_attempts=2,
            notify=("GPU remediated",),
        ),
    )
    rescue = (
        Step(
            StepKind.DEBUG,
            "Leave the node drained with a reason",
            {"msg": "{{ inventory_hostname }} needs RMA"},
            at(55, 11),
        ),
        Step(
            StepKind.FAIL,
            "fail",
            {"msg": "remediation failed on {{ inventory_hostname }}"},
            at(58, 11),
        ),
    )
    always = (
        Step(
            StepKind.PROBE,
            "Record the final state",
            {"name": "nvidia_smi", "params": {}},
            at(60, 11),
            changed_when=("False",),
            failed_when=("False",),
        ),
    )
    expected = Playbook(
        str(path),
        (
            Play(
                name="Remediate Xid 79",
                hosts="{{ target | default('gpu') }}",
                position=at(3, 3),
                vars={
                    "expected_gpus": 8,
                    "drain_reason": "fleetfix: xid79 on {{ inventory_hostname }}",
                },
                vars_files=("../vars/site.yml",),
                serial=(1, "25%"),
                max_fail_percentage=10.0,
                order="sorted",
                become=True,
                tags=frozenset({"xid", "gpu"}),
                max_unavailable_per={"rack": 1, "leaf": 2},
                pre_tasks=(
                    Step(
                        StepKind.ACTION,
                        "Drain the node in Slurm",
                        {
                            "name": "slurm_drain",
                            "params": {"reason": "{{ drain_reason }}", "wait": True},
                        },
                        at(17, 7),
                        delegate_to="{{ slurm_head }}",
                        tags=frozenset({"drain"}),
                    ),
                ),
                tasks=(
                    Step(
                        StepKind.PROBE,
                        "Look for Xid 79 since boot",
                        {"name": "xid", "params": {"since_boot": True}},
                        at(25, 7),
                        register="xids",
                    ),
                    Step(
                        StepKind.BLOCK,
                        "Remediate",
                        {},
                        at(28, 7),
                        when=(
                            "xids.facts.events | selectattr('code', 'equalto', 79) | list "
                            "| length > 0",
                        ),
                        block=block,
                        rescue=rescue,
                        always=always,
                    ),
                ),
                post_tasks=(
                    Step(
                        StepKind.ACTION,
                        "Return the node to service",
                        {"name": "slurm_resume", "params": {}},
                        at(66, 7),
                        delegate_to="{{ slurm_head }}",
                        when=("smi is defined", "smi is succeeded"),
                    ),
                ),
                handlers=(
                    Step(StepKind.DEBUG, "GPU remediated", {"var": "smi.facts.count"}, at(73, 7)),
                ),
            ),
        ),
    )
    assert load_playbook(path, catalog) == expected


@pytest.mark.parametrize("path", GOOD, ids=[p.stem for p in GOOD])
def test_good_playbooks_validate_clean(path: Path, catalog: StepCatalog) -> None:
    assert validate_playbook(path, catalog) == []


def _forms(catalog: StepCatalog) -> dict[int, Step]:
    """The steps of forms.yml by line, so each test names the line it is about."""
    play = load_playbook(PLAYBOOKS / "good" / "forms.yml", catalog).plays[0]
    return {step.position.line: step for step in play.tasks}


def test_probe_and_action_forms_normalise_to_name_and_params(catalog: StepCatalog) -> None:
    steps = _forms(catalog)
    assert steps[8].args == {"name": "nvidia_smi", "params": {}}
    assert steps[9].args == {"name": "xid", "params": {"since_boot": False}}
    assert steps[10].args == {
        "name": "clean_shm",
        "params": {"older_than": "2h", "patterns": ["nccl-*", "/dev/shm/cuda.*"]},
    }


def test_shell_and_command_forms(catalog: StepCatalog) -> None:
    steps = _forms(catalog)
    assert steps[11].kind is StepKind.SHELL
    assert steps[11].args == {"cmd": "nvidia-smi -q | grep -c 'Retired Pages'"}
    assert steps[11].changed_when == ("False",)
    assert steps[14].args == {
        "cmd": "ls {{ dir | quote }}",
        "chdir": "/tmp",
        "creates": "/tmp/x",
        "removes": "/tmp/y",
    }
    assert steps[15].kind is StepKind.COMMAND
    assert steps[15].args == {"cmd": "nvidia-smi -L"}
    assert steps[16].args == {"argv": ("nvidia-smi", "-i", "0", "--query-gpu=name")}
    assert steps[16].name == "command: nvidia-smi -i 0 --query-gpu=name"


def test_fqcn_aliases_are_the_builtin_kinds(catalog: StepCatalog) -> None:
    steps = _forms(catalog)
    assert (steps[17].kind, steps[17].args) == (StepKind.COMMAND, {"cmd": "uptime"})
    assert steps[19].kind is StepKind.SHELL
    assert (steps[19].until, steps[19].retries, steps[19].delay) == (("pages.rc == 0",), 5, 10.0)
    assert (steps[35].kind, steps[35].args) == (StepKind.META, {"name": "noop"})


def test_debug_set_fact_assert_fail_meta_forms(catalog: StepCatalog) -> None:
    steps = _forms(catalog)
    assert steps[23].args == {"msg": "{{ pages.stdout }} pages", "verbosity": 1}
    assert steps[24].args == {"msg": "Hello world!"}
    assert steps[25].args == {"var": "{{ pages.stdout_lines }}"}  # rendered, then evaluated
    assert steps[26].args == {"gpu_ok": "{{ pages.rc == 0 }}", "attempt": 1}
    assert steps[27].args == {"note": "hello world"}
    assert steps[28].args == {
        "that": ("pages.rc == 0",),
        "fail_msg": "bad {{ pages.rc }}",
        "quiet": True,
    }
    assert steps[29].args == {"that": ("True", "pages is succeeded"), "success_msg": "fine"}
    assert steps[32].args == {"msg": "Failed as requested from task"}
    assert steps[33].args == {"msg": "stop"}
    assert (steps[34].name, steps[34].args) == (
        "meta: flush_handlers",
        {"name": "flush_handlers"},
    )


def test_block_with_empty_rescue_and_always(catalog: StepCatalog) -> None:
    step = _forms(catalog)[36]
    assert step.kind is StepKind.BLOCK
    assert [s.args for s in step.block] == [{"msg": "inner"}]
    assert (step.rescue, step.always) == ((), ())


def test_every_step_keyword_is_converted(catalog: StepCatalog) -> None:
    step = _forms(catalog)[40]
    assert step.name == "{{ 'templated' }} name"
    assert step.expect_unreachable == Duration(900.0)
    assert step.ignore_unreachable is True
    assert step.tags == frozenset({"reboot", "disruptive"})  # "a, b" splits like Ansible
    assert (step.check_mode, step.run_once, step.no_log) == (False, False, True)
    assert step.become_user == "root"
    assert step.environment == {"A": "{{ x }}"}
    assert step.vars == {"x": 1, "y": "{{ x + 1 }}"}
    assert step.timeout == 5400.0
    assert step.ignore_errors is True
    assert step.when == ("x == 1",)


def test_play_keywords_are_converted(catalog: StepCatalog) -> None:
    play = load_playbook(PLAYBOOKS / "good" / "forms.yml", catalog).plays[0]
    assert play.name == "gpu[001:004]"  # defaults to the hosts pattern, as in Ansible
    assert (play.strategy, play.gather_facts, play.timeout) == ("free", True, 90.0)
    # environment values are strings; a YAML boolean becomes what a shell expects
    assert play.environment == {"LC_ALL": "C", "RETRIES": "3", "VERBOSE": "true"}


def test_anchors_aliases_and_merge_keys(catalog: StepCatalog) -> None:
    play = load_playbook(PLAYBOOKS / "good" / "anchors.yml", catalog).plays[0]
    assert play.vars["sweep"] == {"threshold": 80, "mode": "lenient"}
    first, alias, merged = play.tasks
    assert first == alias
    assert merged.name == "check shm again"
    assert merged.args == first.args


def test_default_step_names(tmp_path: Path, catalog: StepCatalog) -> None:
    long_command = "nvidia-smi --query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total"
    path = tmp_path / "names.yml"
    path.write_text(
        "- hosts: gpu\n  tasks:\n"
        "    - probe: nvidia_smi\n"
        "    - action: reboot\n"
        f"    - shell: |\n        {long_command}\n        echo   done\n"
        "    - set_fact: {a: 1}\n",
        encoding="utf-8",
    )
    names = [s.name for s in load_playbook(path, catalog).plays[0].tasks]
    assert names == [
        "probe nvidia_smi",
        "action reboot",
        "shell: " + long_command[:40],
        "set_fact",
    ]


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        ("true", ("True",)),
        ("false", ("False",)),
        ("'gpu_count < 8'", ("gpu_count < 8",)),
        ('"{{ gpu_count < 8 }}"', ("gpu_count < 8",)),
        ('"{{- gpu_count < 8 -}}"', ("gpu_count < 8",)),
        ('[a is defined, true, "{{ b }}"]', ("a is defined", "True", "b")),
        ("[]", ()),
        ("\"'{{' in out.stdout\"", ("'{{' in out.stdout",)),
    ],
)
def test_conditions_normalise_to_expression_tuples(
    tmp_path: Path, catalog: StepCatalog, when: str, expected: tuple[str, ...]
) -> None:
    path = tmp_path / "when.yml"
    path.write_text(
        f"- hosts: gpu\n  tasks:\n    - probe: nvidia_smi\n      when: {when}\n", encoding="utf-8"
    )
    assert load_playbook(path, catalog).plays[0].tasks[0].when == expected


def test_unsafe_tag_keeps_braces_literal_and_skips_compilation(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    path = tmp_path / "unsafe.yml"
    path.write_text(
        "- hosts: gpu\n  tasks:\n    - shell: !unsafe 'echo {{ not jinja }'\n", encoding="utf-8"
    )
    cmd = load_playbook(path, catalog).plays[0].tasks[0].args["cmd"]
    assert cmd == "echo {{ not jinja }"
    assert isinstance(cmd, UnsafeText)


def test_hosts_list_joins_like_ansible(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("- hosts: [gpu001, 'rack1:&idle']\n", encoding="utf-8")
    assert load_playbook(path, catalog).plays[0].hosts == "gpu001,rack1:&idle"


def test_listen_and_notify_by_topic(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "listen.yml"
    path.write_text(
        "- hosts: gpu\n  tasks:\n    - shell: x\n      notify: [gpu services]\n"
        "  handlers:\n    - shell: systemctl restart nvidia-dcgm\n      listen: gpu services\n",
        encoding="utf-8",
    )
    play = load_playbook(path, catalog).plays[0]
    assert play.tasks[0].notify == ("gpu services",)
    assert play.handlers[0].listen == ("gpu services",)


def test_free_form_and_mapping_debug_agree(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "debug.yml"
    path.write_text(
        "- hosts: gpu\n  tasks:\n"
        "    - debug: msg=\"{{ a | default('x y') }} z\"\n"
        "    - debug: {msg: \"{{ a | default('x y') }} z\"}\n",
        encoding="utf-8",
    )
    free, mapping = load_playbook(path, catalog).plays[0].tasks
    assert free.args == mapping.args == {"msg": "{{ a | default('x y') }} z"}


def test_params_given_twice_is_an_error(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "twice.yml"
    path.write_text(
        "- hosts: gpu\n  tasks:\n"
        "    - probe: {name: xid, since_boot: true, params: {since_boot: false}}\n",
        encoding="utf-8",
    )
    with pytest.raises(PlaybookError) as caught:
        load_playbook(path, catalog)
    assert caught.value.message == "parameter 'since_boot' given twice"
    assert caught.value.position == SourcePosition(str(path), 3, 53)  # the second one
