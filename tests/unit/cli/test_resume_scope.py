"""The scope a --resume must share with its run, read from the stored command line
(tests/e2e/test_resume_scope.py runs it on the lab)."""

from __future__ import annotations

import argparse

import pytest

from fleetfix.cli.resume_scope import refuse_another_scope, resume_command, scope_of, stored_scope
from fleetfix.cli.run_cmd import _run_parser
from fleetfix.cli.team_options import stored_argv, stored_extra_vars
from fleetfix.errors import UsageError
from fleetfix.secrets import Redactor

RUN = ["/usr/bin/fleetfix", "run", "pb.yml", "-i", "hosts.ini", "--yes"]


def _args(*extra: str) -> argparse.Namespace:
    return _run_parser().parse_args([*RUN[1:], *extra])


def test_the_same_options_in_another_order_and_spelling_resume() -> None:
    then = stored_scope(_run_parser(), [*RUN, "-l", "gpu1", "-t", "fix", "-e", "a=1"])
    now = scope_of(_args("--tags", "fix", "--limit=gpu1", "--extra-vars", "a=1", "--resume", "r"))
    refuse_another_scope("r", then, now)


def test_each_difference_is_named() -> None:
    then = stored_scope(_run_parser(), [*RUN, "--limit", "gpu1", "--skip-tags", "slow"])
    with pytest.raises(UsageError) as refused:
        refuse_another_scope("r1", then, scope_of(_args("--check")))
    assert str(refused.value).startswith(
        "cannot resume run r1 with other options: --limit was 'gpu1', now none;"
        " --skip-tags was 'slow', now none; --check was off, now on."
    )


def test_a_secret_is_compared_as_stored() -> None:
    """The journal keeps `-e db_password=...` masked; the resume's value is masked the same
    way before the comparison. So the same secret resumes, and so does another value of it
    (the journal never knew the first); another variable is refused."""
    args = _args("-e", "db_password=hunter2")
    redactor = Redactor(frozenset({"hunter2"}))
    kept = stored_argv(args, [*RUN, "-e", "db_password=hunter2"], redactor)
    assert "hunter2" not in " ".join(kept)
    then = stored_scope(_run_parser(), kept)
    for value in ("hunter2", "rotated"):
        again = _args("-e", f"db_password={value}")
        masked = stored_extra_vars(again, Redactor(frozenset({value})))
        refuse_another_scope("r", then, scope_of({**vars(again), "extra_vars": masked}))
    other = _args("-e", "db_user=ops")
    now = scope_of({**vars(other), "extra_vars": stored_extra_vars(other, Redactor())})
    with pytest.raises(UsageError, match=r"-e was 'db_password=[*]+', now 'db_user=ops'"):
        refuse_another_scope("r", then, now)


def test_a_command_line_this_version_cannot_read_is_not_compared() -> None:
    assert stored_scope(_run_parser(), ["pytest", "-q", "tests/"]) is None
    refuse_another_scope("r", None, scope_of(_args("--check")))


def test_the_resume_command_repeats_the_run_and_names_it_once() -> None:
    stored = [*RUN, "--limit", "gpu0[01:02]", "-e", "db_password=***"]
    assert resume_command(stored, "r1") == (
        "fleetfix run pb.yml -i hosts.ini --yes --limit 'gpu0[01:02]' -e 'db_password=***'"
        " --resume r1"
    )
    assert resume_command([*RUN, "--resume", "r1"], "r1") == (
        "fleetfix run pb.yml -i hosts.ini --yes --resume r1"
    )
    assert resume_command([*RUN, "--resume=r1"], "r1").endswith("--yes --resume r1")
