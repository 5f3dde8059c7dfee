"""The Templar: sandboxed conditions and templates, Ansible-compatible filters and tests."""

from __future__ import annotations

import dataclasses
import enum
import re
from pathlib import Path
from typing import Any

import pytest
from ansible.plugins.filter import core as ansible_filters
from ansible.plugins.test import core as ansible_tests

from fleetfix.errors import ConditionError
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.filters import FILTERS, TESTS
from fleetfix.playbook.yamlpos import UnsafeText

REMOTE = "{{ 7*7 }} {% for x in range(3) %}{{ x }}{% endfor %}"


class Health(enum.Enum):
    OK = "ok"
    BAD = "bad"


@dataclasses.dataclass(frozen=True, slots=True)
class Gpu:
    index: int
    health: Health


@dataclasses.dataclass(frozen=True, slots=True)
class SmiFacts:
    count: int
    gpus: tuple[Gpu, ...]


@pytest.fixture
def templar() -> Templar:
    return Templar()


@pytest.fixture
def host_vars() -> dict[str, Any]:
    facts = SmiFacts(2, (Gpu(0, Health.OK), Gpu(1, Health.BAD)))
    return {
        "inventory_hostname": "gpu001",
        "expected_gpus": 8,
        "flag": "false",
        "out": {
            "rc": 0,
            "stdout": REMOTE,
            "stdout_lines": [REMOTE],
            "changed": True,
            "failed": False,
        },
        "broken": {"rc": 1, "failed": True, "changed": False, "skipped": False},
        "skipped_step": {"skipped": True, "changed": False},
        "smi": {"facts": facts, "failed": False},
        "driver": "550.54.15",
        "gpus": [{"index": 0, "temp": 41}, {"index": 1, "temp": 87}],
    }


# ---------------------------------------------------------------- conditions


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("expected_gpus == 8", True),
        ("expected_gpus > 8", False),
        ("out.rc == 0 and 'gpu' in inventory_hostname", True),
        ("out is succeeded", True),
        ("out is changed", True),
        ("broken is failed", True),
        ("broken is not succeeded", True),
        ("skipped_step is skipped", True),
        ("out is skipped", False),
        ("flag | bool", False),
        ("'yes' | bool", True),
        ("driver is version('535.104.05', '>=')", True),
        ("driver is version('560', 'lt')", True),
        ("inventory_hostname is match('gpu0')", True),
        ("inventory_hostname is search('01$')", True),
        ("nothing is undefined", True),
        ("nothing is defined", False),
        ("nothing.deeper.still is defined", False),
        ("nothing | default(3) == 3", True),
        ("nothing | d(3) == 3", True),
        ("smi.facts.count == 2", True),
        (
            "smi.facts.gpus | selectattr('health.value', 'equalto', 'bad') | list | length == 1",
            True,
        ),
        ("gpus | map(attribute='temp') | max > 85", True),
        ("gpus | selectattr('temp', 'gt', 80) | map(attribute='index') | list == [1]", True),
        ("{{ expected_gpus == 8 }}", True),
        ("True", True),
        ("False", False),
    ],
)
def test_evaluate(
    templar: Templar, host_vars: dict[str, Any], expression: str, expected: bool
) -> None:
    assert templar.evaluate(expression, host_vars) is expected


def test_undefined_variable_is_named(templar: Templar, host_vars: dict[str, Any]) -> None:
    with pytest.raises(ConditionError) as caught:
        templar.evaluate("gpu_count < expected_gpus", host_vars)
    assert str(caught.value) == "'gpu_count' is undefined (in: gpu_count < expected_gpus)"
    assert caught.value.expression == "gpu_count < expected_gpus"


def test_bare_undefined_variable_is_an_error_not_false(
    templar: Templar, host_vars: dict[str, Any]
) -> None:
    with pytest.raises(ConditionError, match="'drained' is undefined"):
        templar.evaluate("drained", host_vars)


def test_missing_attribute_names_the_attribute(templar: Templar, host_vars: dict[str, Any]) -> None:
    with pytest.raises(ConditionError, match="has no attribute 'stdrr'"):
        templar.evaluate("out.stdrr == ''", host_vars)


@pytest.mark.parametrize(
    ("expression", "shown"),
    [("flag", "'false' is a str"), ("out.rc", "0 is a int"), ("gpus", "is a list")],
)
def test_condition_must_be_boolean(
    templar: Templar, host_vars: dict[str, Any], expression: str, shown: str
) -> None:
    # A string "false" from `-e flag=false` must never count as true on a remediation gate.
    with pytest.raises(ConditionError) as caught:
        templar.evaluate(expression, host_vars)
    assert shown in str(caught.value)
    assert "use '| bool'" in str(caught.value)


def test_bool_filter_refuses_to_guess(templar: Templar, host_vars: dict[str, Any]) -> None:
    with pytest.raises(ConditionError, match="cannot interpret 'maybe' as a boolean"):
        templar.evaluate("'maybe' | bool", host_vars)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("out.rc ==", "template syntax error: unexpected 'end of template'"),
        ("1 / 0 == 1", "ZeroDivisionError: division by zero"),
        ("'x' | from_json", "JSONDecodeError"),
        ("'1.a' is version('1.1', '<')", "TypeError: '<' not supported"),
        ("'a' is version('1', 'approx')", "invalid version operator 'approx'"),
        ("gpus is failed", "the 'failed' test expects a registered result, got list"),
        ("'x' | regex_search('(')", "error: missing ), unterminated subpattern"),
    ],
)
def test_every_failure_is_a_condition_error(
    templar: Templar, host_vars: dict[str, Any], expression: str, message: str
) -> None:
    with pytest.raises(ConditionError) as caught:
        templar.evaluate(expression, host_vars)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "payload",
    [
        "().__class__",
        "().__class__.__base__.__subclasses__()",
        "''.__class__.__mro__[1].__subclasses__()",
        "cycler.__init__.__globals__.os.popen('touch {marker}').read()",
        "joiner.__init__.__globals__['os'].system('touch {marker}') == 0",
        "namespace.__init__.__globals__.__builtins__.open('{marker}', 'w')",
        "lookup('pipe', 'touch {marker}')",
        "out.stdout.__class__.__subclasses__()",
        "'{{0.__class__}}'.format(out)",
        "out.update({{'rc': 1}})",
        "gpus.append(1)",
        "range(10**9) | list",
    ],
)
def test_sandbox_escapes_raise_and_never_execute(
    templar: Templar, host_vars: dict[str, Any], tmp_path: Path, payload: str
) -> None:
    marker = tmp_path / "escaped"
    expression = payload.format(marker=marker)
    with pytest.raises(ConditionError):
        templar.evaluate(expression, host_vars)
    with pytest.raises(ConditionError):
        templar.render("{{ " + expression + " }}", host_vars)
    with pytest.raises(ConditionError):
        templar.render("x {{ " + expression + " }} y", host_vars)
    assert not marker.exists()
    assert host_vars["out"]["rc"] == 0
    assert len(host_vars["gpus"]) == 2


def test_each_expression_is_compiled_once(templar: Templar) -> None:
    for count in range(50):
        assert templar.evaluate("n < 25", {"n": count}) is (count < 25)
        assert templar.render("n={{ n }}", {"n": count}) == f"n={count}"
    assert templar.compiled_count == 2


def test_check_reports_syntax_without_variables(templar: Templar) -> None:
    templar.check_expression("a and b")
    templar.check_template("{{ a }} and {{ b | quote }}")
    with pytest.raises(ConditionError, match="unknown Jinja2 filter 'quotee'"):
        templar.check_template("{{ a | quotee }}")
    with pytest.raises(ConditionError, match=re.escape("drop the {{ }} inside it")):
        templar.check_expression("{{ a }} == 1")


# ---------------------------------------------------------------- templates


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("plain text", "plain text"),
        ("{{ expected_gpus }}", 8),
        ("{{ expected_gpus * 2 }}", 16),
        ("{{ gpus | map(attribute='index') | list }}", [0, 1]),
        ("{{ out.rc == 0 }}", True),
        ("{{ nothing | default(None) }}", None),
        ("{{ {'a': expected_gpus} }}", {"a": 8}),
        ("{{ expected_gpus }} GPUs", "8 GPUs"),
        (" {{ expected_gpus }}", " 8"),
        ("{{ expected_gpus }}{{ expected_gpus }}", "88"),
        ("a{{ nothing | default(None) }}b", "ab"),
        ("{{ inventory_hostname | upper }}-{{ 'X' | lower }}", "GPU001-x"),
        ("{{ '  x ' | trim }}", "x"),
        ("{{ 'a-b' | replace('-', '_') }}", "a_b"),
        ("{{ gpus | length }} {{ gpus | count }}", "2 2"),
        ("{{ '42' | int + 1 }}", 43),
        ("{{ '1.5' | float }}", 1.5),
        ("{{ 3 | string }}", "3"),
        ("{{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ [3, 1, 2] | sum }}", "1 3 6"),
        ("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}", "32"),
        ("{{ [1, 1, 2] | unique | list }}", [1, 2]),
        ("{{ ['a', 'b'] | join(',') }}", "a,b"),
        ("{{ [1, 2, 3] | select('odd') | list }}", [1, 3]),
        ("{{ [1, 2, 3] | reject('odd') | list }}", [2]),
        ("{{ {'a': 1} | dict2items }}", [{"key": "a", "value": 1}]),
        ("{{ [{'key': 'a', 'value': 1}] | items2dict }}", {"a": 1}),
        ("{{ {'a': 1} | combine({'b': 2}) }}", {"a": 1, "b": 2}),
        ("{{ {'a': 1} | to_json }}", '{"a": 1}'),
        ("{{ '{\"a\": [1]}' | from_json }}", {"a": [1]}),
        ("{{ {'a': 1} | to_yaml }}", "{a: 1}\n"),
        ("{{ 'x: [1]' | from_yaml }}", {"x": [1]}),
        ("{{ 'fell off the bus' | regex_search('f(e)ll', '\\\\1') }}", ["e"]),
        ("{{ 'a1b22' | regex_findall('\\\\d+') }}", ["1", "22"]),
        ("{{ 'nccl-1 nccl-2' | regex_replace('nccl-(\\\\d)', 'n\\\\1') }}", "n1 n2"),
        ("{{ 'a b' | split }}", ["a", "b"]),
        ("{{ 'x' | b64encode | b64decode }}", "x"),
        ("{{ '/dev/shm/nccl-1' | basename }}", "nccl-1"),
        ("{{ true | ternary('yes', 'no') }}", "yes"),
        ("{{ [1, [2, [3]]] | flatten }}", [1, 2, 3]),
        ("{% for g in gpus %}{{ g.index }}{% endfor %}", "01"),
        ("line\n", "line\n"),
        ("{{ expected_gpus }}\n", "8\n"),
    ],
)
def test_render(templar: Templar, host_vars: dict[str, Any], template: str, expected: Any) -> None:
    assert templar.render(template, host_vars) == expected


def test_render_walks_containers_and_keeps_their_types(
    templar: Templar, host_vars: dict[str, Any]
) -> None:
    value = {
        "name": "{{ inventory_hostname }}",
        "argv": ("nvidia-smi", "-i", "{{ gpus[1].index }}"),
        "list": ["{{ expected_gpus }}", 3, None, True],
        "{{ inventory_hostname }}_key": "k",
    }
    assert templar.render(value, host_vars) == {
        "name": "gpu001",
        "argv": ("nvidia-smi", "-i", 1),
        "list": [8, 3, None, True],
        "gpu001_key": "k",
    }


def test_remote_output_is_data_never_rendered(templar: Templar, host_vars: dict[str, Any]) -> None:
    assert templar.render("{{ out.stdout }}", host_vars) == REMOTE
    assert templar.render("got: {{ out.stdout }}", host_vars) == f"got: {REMOTE}"
    assert templar.render("{{ out.stdout_lines }}", host_vars) == [REMOTE]
    assert templar.render("{{ out | to_json }}", host_vars).count("{{ 7*7 }}") == 2  # both keys
    assert templar.evaluate("out.stdout.startswith('{{ 7*7 }}')", host_vars) is True
    # Definitions are rendered once; a variable holding remote text is never re-rendered.
    resolved = templar.resolve({"copy": "{{ out.stdout }}", "again": "{{ copy }}"}, host_vars)
    assert resolved == {"copy": REMOTE, "again": REMOTE}


def test_unsafe_text_is_never_rendered(templar: Templar) -> None:
    text = UnsafeText("{{ 7*7 }}")
    assert templar.render(text, {}) is text
    assert templar.render([text], {}) == ["{{ 7*7 }}"]


def test_quote_makes_one_shell_word(templar: Templar) -> None:
    hostile = {"path": "/dev/shm/x; rm -rf / #", "empty": None, "q": "it's"}
    assert templar.render("rm -f {{ path | quote }}", hostile) == "rm -f '/dev/shm/x; rm -rf / #'"
    assert templar.render("echo {{ empty | quote }}", hostile) == "echo ''"
    assert templar.render("echo {{ q | quote }}", hostile) == "echo 'it'\"'\"'s'"


def test_undefined_in_template_is_named(templar: Templar) -> None:
    with pytest.raises(ConditionError, match="'slurm_head' is undefined"):
        templar.render("scontrol -h {{ slurm_head }}", {})
    with pytest.raises(ConditionError, match="'x' is undefined"):
        templar.render("{{ [x, 1] }}", {})
    with pytest.raises(ConditionError, match="mandatory"):
        templar.render("{{ x | mandatory('mandatory: set x') }}", {})


def test_facts_dataclasses_are_readable_and_serialisable(
    templar: Templar, host_vars: dict[str, Any]
) -> None:
    assert templar.render("{{ smi.facts.gpus[1].health.value }}", host_vars) == "bad"
    assert templar.render("{{ smi.facts | to_json }}", host_vars) == (
        '{"count": 2, "gpus": [{"index": 0, "health": "ok"}, {"index": 1, "health": "bad"}]}'
    )


def test_filters_do_not_leak_between_templars() -> None:
    first, second = Templar(), Templar()
    assert first.filter_names == second.filter_names
    assert {"quote", "regex_search", "default", "d", "bool"} <= first.filter_names
    assert {"version", "succeeded", "match", "search", "defined"} <= first.test_names


# ---------------------------------------------------------------- resolve


def test_resolve_orders_definitions_by_their_references(templar: Templar) -> None:
    definitions = {
        "reason": "fleetfix: {{ code_name }} on {{ host }}",
        "code_name": "xid{{ code }}",
        "code": 79,
        "limits": {"max": "{{ code + 1 }}", "list": ["{{ code_name }}"]},
    }
    assert templar.resolve(definitions, {"host": "gpu001", "code": 1}) == {
        "code": 79,  # a definition shadows a lower-precedence variable of the same name
        "code_name": "xid79",
        "reason": "fleetfix: xid79 on gpu001",
        "limits": {"max": 80, "list": ["xid79"]},
    }


@pytest.mark.parametrize(
    "definitions",
    [
        {"a": "{{ b }}", "b": "{{ a }}"},
        {"a": "{{ a + 1 }}"},
        {"a": "{{ b }}", "b": "{{ c }}", "c": "{{ a }}"},
    ],
)
def test_resolve_refuses_loops(templar: Templar, definitions: dict[str, Any]) -> None:
    with pytest.raises(ConditionError, match="variables refer to each other in a loop"):
        templar.resolve(definitions, {"a": 1})


# ---------------------------------------------------------------- Ansible compatibility

ANSIBLE_CASES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("regex_search", ("foo bar", "(o+) (b)", "\\1", "\\2"), {}),
    ("regex_search", ("foo bar", "(?P<x>o+)", "\\g<x>"), {}),
    ("regex_search", ("foo bar", "zz"), {}),
    ("regex_search", ("FOO", "foo"), {"ignorecase": True}),
    ("regex_search", ("a\nb", "^b"), {"multiline": True}),
    ("regex_replace", ("a-b-c", "-", "_"), {}),
    ("regex_replace", ("a-b-c", "-", "_"), {"count": 1}),
    ("regex_replace", ("A-a", "a", "x"), {"ignorecase": True}),
    ("regex_findall", ("a1b22", "\\d+"), {}),
    ("regex_findall", ("k=v x=y", "(\\w)=(\\w)"), {}),
    ("quote", ("it's a test",), {}),
    ("quote", (None,), {}),
    ("quote", (42,), {}),
    ("dict2items", ({"a": 1, "b": 2},), {}),
    ("dict2items", ({"a": 1},), {"key_name": "k", "value_name": "v"}),
    ("items2dict", ([{"key": "a", "value": 1}],), {}),
    ("combine", ({"a": {"b": 1}}, {"a": {"c": 2}}), {}),
    ("combine", ({"a": {"b": 1}}, {"a": {"c": 2}}), {"recursive": True}),
    ("combine", ({"l": [1, 2]}, {"l": [2, 3]}), {"list_merge": "append"}),
    ("combine", ({"l": [1, 2]}, {"l": [2, 3]}), {"list_merge": "prepend_rp"}),
    ("combine", ([{"a": 1}, {"b": 2}],), {}),
    ("flatten", ([1, [2, [3, None]]],), {}),
    ("flatten", ([1, [2, [3]]],), {"levels": 1}),
    ("ternary", (None, "t", "f", "n"), {}),
    ("ternary", (0, "t", "f"), {}),
    ("to_json", ({"a": [1, "x"]},), {}),
    ("to_nice_json", ({"b": 1, "a": [1]},), {}),
    ("from_json", ('{"a": [1, null]}',), {}),
    ("to_yaml", ({"a": [1, "x"]},), {}),
    ("to_nice_yaml", ({"a": {"b": [1]}},), {}),
    ("b64encode", ("gpu",), {}),
    ("b64decode", ("Z3B1",), {}),
    ("bool", ("Yes",), {}),
    ("bool", ("off",), {}),
    ("bool", (1,), {}),
    ("bool", (False,), {}),
]

_ANSIBLE_FILTERS = {
    **ansible_filters.FilterModule().filters(),
    "bool": ansible_filters.to_bool,
}


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    ANSIBLE_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(ANSIBLE_CASES)],
)
def test_filters_match_ansible_core(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    assert FILTERS[name](*args, **kwargs) == _ANSIBLE_FILTERS[name](*args, **kwargs)


VERSION_CASES = [
    ("550.54.15", "535.104.05", ">"),
    ("550.54.15", "550.54.15", "=="),
    ("550.54.15", "550.54.14", "le"),
    ("12.4", "12.10", "<"),
    ("2.19.1", "2.19", "ge"),
    ("1.0a", "1.0", "gt"),
    ("1.0", "1.0.0", "ne"),
]


@pytest.mark.parametrize(("a", "b", "op"), VERSION_CASES)
def test_version_test_matches_ansible_core(a: str, b: str, op: str) -> None:
    assert TESTS["version"](a, b, op) == ansible_tests.version_compare(a, b, op)


@pytest.mark.parametrize(
    ("test", "value"),
    [
        ("failed", {"failed": True}),
        ("failed", {}),
        ("succeeded", {"failed": False}),
        ("changed", {"changed": True}),
        ("skipped", {"skipped": True}),
        ("unreachable", {"unreachable": True}),
        ("reachable", {}),
    ],
)
def test_result_tests_match_ansible_core(test: str, value: dict[str, Any]) -> None:
    assert TESTS[test](value) == ansible_tests.TestModule().tests()[test](value)
