"""Secrets on the lab, from the user's side: the real CLI, then every byte it stored or showed.

A secret extra var, a no_log set_fact and no_log steps that fail must be in neither the
journal (file bytes, every table value, every compressed BLOB), nor `fleetfix journal export`,
nor a report file, nor the console, and neither may the password of a PostgreSQL journal's
DSN given with `--journal`; report files are 0600. Neither may anything a template made from a
secret (`| upper`, `| b64encode`, `[:8]`, a fact of a fact, a registered output's transform),
nor reach a webhook or the metrics file. nccl_tests `args` cannot run a command on the node."""

from __future__ import annotations

import base64
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fleetfix.lab.control import LabHandle
from fleetfix.secrets import MASK, NO_LOG_TEXT
from tests.e2e.labrun import fleetfix_run, node_shell, write_inventory
from tests.lab.support import running_lab
from tests.support.postgres import PostgresServer
from tests.support.secrets_support import holding, journal_texts, postgres_journal_texts
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(300)

SCENARIO = """\
name: secrets
description: two healthy nodes outside Slurm scheduling concerns
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 2, node_name: "s{:02d}"}
ssh: {port: 0}
timing: {nccl: 0.2}
"""
PASSWORD = "S3cr3t-XYZ"
FACT = "N0L0G-fact-7731"
TOKEN = "T0KEN-in-json-5150"
SECRETS = (PASSWORD, FACT, TOKEN)
PLAYBOOK = """\
- name: secrets never stored
  hosts: all
  tasks:
    - name: connect with the password
      shell: "echo connecting as {{ db_user }} with {{ db_password }}"
    - name: use the token
      shell: "echo {{ vault.token }}"
    - name: fetch a credential
      set_fact:
        fetched: "N0L0G-fact-7731"
      no_log: true
    - name: a no_log command that fails
      shell: "echo {{ fetched }} {{ db_password }} >&2; exit 3"
      no_log: true
      ignore_errors: true
    - name: a no_log action that fails
      action: {name: service, params: {name: "{{ fetched }}.service", state: restarted}}
      no_log: true
      ignore_errors: true
    - name: a no_log fail
      fail:
        msg: "cannot use {{ fetched }}"
      no_log: true
      ignore_errors: true
    - name: the fact, shown by a step without no_log
      debug:
        msg: "fetched {{ fetched }}"
    - name: write the credential into a file on the node
      copy:
        content: "password={{ db_password }}\\n"
        dest: "{{ conf_dir }}/{{ inventory_hostname }}-db.conf"
        mode: "0600"
"""
WRITTEN = f"password={PASSWORD}\n"
ENCODED = tuple(base64.b64encode(WRITTEN.encode()[skip:]).decode()[4:20] for skip in range(3))
"""Base64 of the file's content, at each alignment: a payload on its way to the node must not
be kept either (redaction matches the plain text only)."""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    scenario = tmp_path / "secrets.yml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    with running_lab(str(scenario), tmp_path / "lab") as handle:
        yield handle, write_inventory(handle, tmp_path / "hosts.ini")


def test_secrets_reach_no_journal_report_or_console(
    lab: tuple[LabHandle, Path],
    tmp_path: Path,
    journal_target: Path | str,
    request: pytest.FixtureRequest,
) -> None:
    _, inventory = lab
    book = tmp_path / "book.yml"
    book.write_text(PLAYBOOK, encoding="utf-8")
    reports = [tmp_path / name for name in ("run.json", "run.html", "run.xml")]
    done = fleetfix_run(
        book,
        inventory,
        tmp_path,
        "-v",
        "-e",
        f"db_password={PASSWORD} db_user=ops conf_dir={tmp_path}",
        "-e",
        f'{{"vault": {{"token": "{TOKEN}"}}}}',
        *(arg for path in reports for arg in ("--report", str(path))),
        "--journal",
        str(journal_target),
    )
    assert done.returncode == 0, done.output
    assert done.recap["s01"]["ignored"] == 3, done.output
    assert "connecting as ops with ********" in done.stdout  # it ran, with the real value
    assert f"fetched {MASK}" in done.stdout
    assert NO_LOG_TEXT in done.stdout

    secrets: tuple[str, ...] = SECRETS
    if not isinstance(journal_target, Path):  # `--journal postgresql://fleetfix:PASSWORD@...`
        password = urlsplit(journal_target).password
        assert password
        secrets += (password,)
    assert holding([done.stdout, done.stderr], secrets) == []
    stored = _stored(journal_target, request)
    assert any(MASK in text for text in stored)  # the journal has the masked rows
    assert holding(stored, secrets + ENCODED) == []
    exported = _exported(journal_target)
    assert holding(exported, secrets + ENCODED) == []
    for node in ("s01", "s02"):  # the copy did write the real value, on the node only
        written = tmp_path / f"{node}-db.conf"
        assert written.read_text(encoding="utf-8") == WRITTEN, done.output
        assert stat.S_IMODE(written.stat().st_mode) == 0o600
    for path in reports:
        assert holding([path.read_text(encoding="utf-8")], SECRETS) == [], path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def _stored(journal_target: Path | str, request: pytest.FixtureRequest) -> list[str]:
    """Everything the journal holds, on either backend (tests/support/secrets_support.py)."""
    if isinstance(journal_target, Path):
        return journal_texts(journal_target)
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return postgres_journal_texts(journal_target, server.directory / "data", server.admin)


def _exported(journal_target: Path | str) -> list[str]:
    """`fleetfix journal export`'s stdout and stderr."""
    exported = subprocess.run(
        [sys.executable, "-m", "fleetfix", "journal", "export", "--journal", str(journal_target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert '"table":"runs"' in exported.stdout
    return [exported.stdout, exported.stderr]


DERIVED_PLAYBOOK = """\
- name: what a template makes from a secret is a secret
  hosts: all
  tasks:
    - name: "connect as {{ db_password | upper | reverse }}"
      debug:
        msg: "upper {{ db_password | upper }}, joined {{ 'x' ~ db_password }}"
    - name: the node gets the real value
      shell: "echo {{ db_password | upper }} > {{ conf_dir }}/{{ inventory_hostname }}-upper"
    - name: encode it on the controller
      shell: "echo {{ db_password | b64encode }}"
      register: encoded
    - name: facts made from it
      set_fact:
        prefix: "{{ db_password[:8] }}"
    - name: a fact made from a fact
      set_fact:
        backwards: "{{ prefix | reverse }}"
    - name: say it
      shell: "echo pw is {{ db_password }}"
      register: said
    - name: show what was made
      debug:
        msg: >-
          {{ prefix }} {{ backwards }}
          {{ encoded.stdout | b64decode | lower }} {{ said.stdout | title }}
    - name: show a fact by name
      debug:
        var: backwards
    - name: refuse on s02
      fail:
        msg: "refused {{ db_password | b64encode | reverse }}"
      when: inventory_hostname == 's02'
"""
UPPER = PASSWORD.upper()
B64 = base64.b64encode(PASSWORD.encode()).decode()
DERIVED = (
    UPPER,
    UPPER[::-1],
    B64,
    B64[::-1],
    PASSWORD[:8],
    PASSWORD[:8][::-1],
    PASSWORD.lower(),
    f"pw is {PASSWORD}".title(),
)
"""What the playbook makes from the password; each is at least LEARNED_MIN characters."""


def test_values_made_from_a_secret_reach_no_sink(
    lab: tuple[LabHandle, Path],
    tmp_path: Path,
    journal_target: Path | str,
    request: pytest.FixtureRequest,
) -> None:
    _, inventory = lab
    book = tmp_path / "derived.yml"
    book.write_text(DERIVED_PLAYBOOK, encoding="utf-8")
    reports = [tmp_path / name for name in ("run.json", "run.html", "run.xml")]
    metrics = tmp_path / "run.prom"
    with Receiver() as receiver:
        done = fleetfix_run(
            book,
            inventory,
            tmp_path,
            "-v",
            "-e",
            f"db_password={PASSWORD} conf_dir={tmp_path}",
            *(arg for path in reports for arg in ("--report", str(path))),
            *("--journal", str(journal_target)),
            *("--webhook", receiver.url("/json"), "--notify-on", "run_finished"),
            *("--metrics-file", str(metrics)),
        )
    assert done.returncode == 2, done.output  # s02 failed on purpose
    assert done.recap["s01"]["failed"] == 0, done.output
    for node in ("s01", "s02"):  # the commands ran with the real values
        assert (tmp_path / f"{node}-upper").read_text(encoding="utf-8") == UPPER + "\n"
    assert f"upper {MASK}, joined {MASK}" in done.stdout, done.output
    assert f"{MASK} {MASK} {MASK} {MASK}" in done.stdout, done.output
    assert f"refused {MASK}" in done.stdout, done.output
    shown = (PASSWORD, *DERIVED)
    assert holding([done.stdout, done.stderr], shown) == []
    assert holding(_stored(journal_target, request), shown) == []
    assert holding(_exported(journal_target), shown) == []
    for path in reports:
        assert holding([path.read_text(encoding="utf-8")], shown) == [], path
    posted = [request.body.decode() for request in receiver.requests]
    assert any("s02" in body for body in posted), posted  # the run's end named the failure
    assert holding(posted, shown) == []
    assert holding([metrics.read_text(encoding="utf-8")], shown) == []


NCCL_PLAYBOOK = """\
- name: nccl-tests args are arguments
  hosts: s01
  tasks:
    - name: the node can write there (the check below reads the node's filesystem)
      shell: "touch {control}"
    - name: all_reduce_perf with a shell command in its args
      action: {{name: nccl_tests, params: {{args: "-b 8 -e 1G; touch {injected} #"}}}}
      ignore_errors: true
"""


def test_nccl_tests_args_cannot_run_a_command_on_the_node(
    lab: tuple[LabHandle, Path], tmp_path: Path
) -> None:
    handle, inventory = lab
    control, injected = tmp_path / "control", tmp_path / "injected"
    book = tmp_path / "nccl.yml"
    book.write_text(NCCL_PLAYBOOK.format(control=control, injected=injected), encoding="utf-8")
    done = fleetfix_run(book, inventory, tmp_path, "-vv", "-e", "fleetfix_slurm=false")
    assert node_shell(handle, "s01", f"test -e {control} && echo yes").strip() == "yes"
    assert node_shell(handle, "s01", f"test -e {injected} || echo absent").strip() == "absent"
    assert "g=$(nvidia-smi -L" in done.stdout, done.output  # the action did run
    assert f"all_reduce_perf -b 8 -e '1G;' touch {injected} '#' -g" in done.stdout, done.output
