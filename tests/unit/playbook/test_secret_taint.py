"""Taint (playbook/taint.py): what a template makes from a secret, the run's Redactor masks.

Each test renders with a Templar holding a Redactor that knows the password, then asks the
Redactor to mask the rendered text: what it masks is what every sink (console, journal,
reports, webhooks, metrics) would mask, since the EventBus redacts with that same Redactor."""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from fleetfix.errors import ConditionError
from fleetfix.playbook.conditions import Templar
from fleetfix.secrets import LEARNED_MIN, MASK, Redactor

PASSWORD = "S3cr3t-XYZ"
REMOTE_OUTPUT = "pw is " + PASSWORD


class LazyHosts(Mapping[str, Mapping[str, Any]]):
    """Like the engine's `hostvars`: a Mapping that builds each host's variables when asked
    (walking it whole costs a fleet's worth); says whether it was walked."""

    def __init__(self, hosts: dict[str, dict[str, Any]]) -> None:
        self._hosts = hosts
        self.walked = False

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        return self._hosts[name]

    def __iter__(self) -> Iterator[str]:
        self.walked = True
        return iter(self._hosts)

    def __len__(self) -> int:
        return len(self._hosts)


@dataclasses.dataclass(frozen=True, slots=True)
class Login:
    user: str
    password: str


@pytest.fixture
def redactor() -> Redactor:
    return Redactor([PASSWORD])


@pytest.fixture
def templar(redactor: Redactor) -> Templar:
    return Templar(redactor)


@pytest.fixture
def variables() -> dict[str, Any]:
    return {
        "db_password": PASSWORD,
        "user": "operator",
        "vault": {"token": PASSWORD, "url": "https://vault"},
        "said": {"rc": 0, "stdout": REMOTE_OUTPUT, "stdout_lines": [REMOTE_OUTPUT]},
        "hostvars": LazyHosts({"gpu001": {"bmc_pass": PASSWORD, "rack": "r01"}}),
        "login": Login("operator", PASSWORD),
    }


@pytest.mark.parametrize(
    ("template", "made"),
    [
        ("{{ db_password | upper }}", PASSWORD.upper()),
        ("{{ db_password | b64encode }}", base64.b64encode(PASSWORD.encode()).decode()),
        ("{{ db_password[:8] }}", PASSWORD[:8]),
        ("{{ db_password[::-1] }}", PASSWORD[::-1]),
        ("{{ 'x' ~ db_password }}", "x" + PASSWORD),
        ("{{ db_password.lower() }}", PASSWORD.lower()),
        ("{{ db_password | replace('-', '') }}", PASSWORD.replace("-", "")),
        ("{{ vault.token | upper }}", PASSWORD.upper()),
        ("{{ vault['token'] | title }}", None),
        ("{{ vault | to_json | b64encode }}", None),
        ("{{ hostvars['gpu001'].bmc_pass | reverse }}", PASSWORD[::-1]),
        ("{{ login.password | lower }}", PASSWORD.lower()),
        ("{{ lookup('vars', 'db_password') | upper }}", PASSWORD.upper()),
        ("{{ said.stdout | upper }}", REMOTE_OUTPUT.upper()),
        ("{{ said.stdout_lines | map('upper') | list }}", None),
    ],
)
def test_what_a_template_makes_from_a_secret_is_masked(
    templar: Templar,
    redactor: Redactor,
    variables: dict[str, Any],
    template: str,
    made: str | None,
) -> None:
    rendered = templar.render(template, variables)
    if made is not None:
        assert rendered == made  # the engine keeps the real value
    if isinstance(rendered, list):
        assert redactor.redact(rendered) == [MASK]
    else:
        assert redactor.text(f"before {rendered} after") == f"before {MASK} after"


def test_only_the_expression_that_read_a_secret_is_masked(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    rendered = templar.render("mysql -u {{ user }} -p{{ db_password | upper }} db", variables)
    assert rendered == f"mysql -u operator -p{PASSWORD.upper()} db"
    assert redactor.text(rendered) == f"mysql -u operator -p{MASK} db"
    assert redactor.text("operator") == "operator"


def test_a_template_with_statements_is_masked_whole(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    template = "{% for c in db_password %}{{ c | upper }}{% endfor %} for {{ user }}"
    rendered = templar.render(template, variables)
    assert rendered == f"{PASSWORD.upper()} for operator"
    assert redactor.text(rendered) == MASK


def test_the_taint_travels_from_fact_to_fact(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    prefix = templar.render("{{ db_password[:8] }}", variables)
    facts = {**variables, "prefix": prefix}  # what set_fact keeps
    backwards = templar.render("{{ prefix | reverse }}", facts)
    then = templar.render("{{ third | b64encode }}", {**facts, "third": backwards})
    for value in (prefix, backwards, then):
        assert redactor.text(f"[{value}]") == f"[{MASK}]"


def test_what_reads_no_secret_is_not_masked(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    assert templar.render("{{ user | upper }} {{ said.rc }}", variables) == "OPERATOR 0"
    assert templar.render("{{ vault.url | upper }}", variables) == "HTTPS://VAULT"
    assert templar.render("{{ hostvars['gpu001'].rack | upper }}", variables) == "R01"
    assert not variables["hostvars"].walked  # a way to the rack, not a value the template used
    assert templar.evaluate("db_password | upper == 'NOPE'", variables) is False
    assert redactor.text("OPERATOR HTTPS://VAULT R01") == "OPERATOR HTTPS://VAULT R01"


def test_short_results_are_not_learned(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    """Masking every 3-character fragment would destroy the output (LEARNED_MIN)."""
    assert LEARNED_MIN == 4
    assert templar.render("{{ db_password[:3] }}-{{ db_password | length }}", variables) == "S3c-10"
    assert redactor.text("S3c-10") == "S3c-10"
    assert templar.render("{{ db_password[:4] }}", variables) == "S3cr"
    assert redactor.text("S3cr") == MASK


def test_every_scalar_of_a_native_result_is_learned(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    made = templar.render("{{ {'pw': db_password | upper, 'n': [db_password[2:7]]} }}", variables)
    assert made == {"pw": PASSWORD.upper(), "n": [PASSWORD[2:7]]}
    assert redactor.redact(made) == {"pw": MASK, "n": [MASK]}


def test_a_template_file_that_reads_a_secret_is_masked(
    templar: Templar, redactor: Redactor, variables: dict[str, Any]
) -> None:
    text = "user={{ user }}\n{% if true %}key={{ db_password | b64encode }}\n{% endif %}"
    rendered = templar.render_file(text, variables, name="db.conf.j2")
    assert redactor.text(rendered) == MASK


def test_an_error_after_reading_a_secret_hides_its_message(
    templar: Templar, variables: dict[str, Any]
) -> None:
    with pytest.raises(ConditionError) as failed:
        templar.render("x {{ vault[db_password | upper] }}", variables)
    assert PASSWORD.upper() not in str(failed.value)
    assert "its message is hidden: the template used a secret" in str(failed.value)
    with pytest.raises(ConditionError, match="'no_such_var' is undefined"):
        templar.render("{{ db_password ~ no_such_var }}", variables)  # a name quotes no value
    with pytest.raises(ConditionError, match="has no attribute 'OPERATOR'"):
        templar.render("{{ said[user | upper] }}", variables)  # read no secret: said as is


@pytest.mark.parametrize(
    "template",
    [
        "a {{ n }} b {{ none_value }} c",
        "{{- n }}  {{ flag -}}  x",
        "{{ items }} and {{ items | join(',') }} {{ items[1:] }}\n",
        "{{ 'lit' }}{{ n + 1 }}{# a comment #}",
        "{% raw %}{{ not rendered }}{% endraw %} {{ n }}",
        "{{ mapping.k }} {{ mapping['k'] }} {{ 'abc'.upper() }} {{ mapping.items() | list }}",
        "{% for i in items %}{{ loop.index }}={{ i }};{% endfor %}",
        "{% macro m(x) %}<{{ caller(x) }}>{% endmacro %}{% call(y) m(n) %}got {{ y }}{% endcall %}",
        "{% set ns = namespace(c=0) %}{% for i in items %}{% set ns.c = ns.c + 1 %}{% endfor %}"
        "{{ ns.c }}{% filter upper %}x{{ mapping.k }}{% endfilter %}",
    ],
)
def test_watched_templates_render_as_jinja2_does(template: str) -> None:
    """The reads a compiled template is given change nothing it writes, with or without a
    secret known."""
    variables = {"n": 1, "none_value": None, "flag": True, "items": [1, "a"], "mapping": {"k": 1}}
    jinja = ImmutableSandboxedEnvironment(
        finalize=lambda value: "" if value is None else value, keep_trailing_newline=True
    )
    expected = jinja.from_string(template).render(variables)
    assert Templar().render(template, variables) == expected
    assert Templar(Redactor(["unrelated-secret"])).render(template, variables) == expected


def test_an_undefined_value_fails_the_same_when_watched() -> None:
    for templar in (Templar(), Templar(Redactor(["unrelated-secret"]))):
        with pytest.raises(ConditionError, match="'missing' is undefined"):
            templar.render("a {{ missing }} b", {})


def test_holds_is_one_or_contains_a_long_one() -> None:
    redactor = Redactor(["ab", PASSWORD])
    assert redactor.holds("ab")
    assert not redactor.holds("tab")  # too short to be found inside another text
    assert redactor.holds(f"x{PASSWORD}x")
    assert redactor.holds({"outer": [("x", {"deep": PASSWORD})]})
    assert redactor.holds({PASSWORD: 1})  # a key too
    assert redactor.holds(Login("u", PASSWORD))
    assert Redactor(["1234"]).holds(1234)
    assert not redactor.holds(True)
    assert redactor.holds(LazyHosts({"gpu001": {"bmc": PASSWORD}}))
    assert not redactor.holds(LazyHosts({"gpu001": {"bmc": "visible"}}))
    assert not Redactor().holds(PASSWORD)
