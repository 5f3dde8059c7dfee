"""--step: Ansible's (N)o/(y)es/(c)ontinue before each step, answered on stdin, and the end of
input (Ctrl-D, no terminal), which answers no to every step left."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

INTERRUPTED = 99
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first
      debug: {msg: said-one}
    - name: second
      debug: {msg: said-two}
    - name: third
      debug: {msg: said-three}
    - name: fourth
      debug: {msg: said-four}
"""


def _command(tmp_path: Path) -> tuple[list[str], dict[str, str]]:
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts.ini").write_text("localhost ansible_connection=local\n")
    env = {**os.environ, "NO_COLOR": "1", "FLEETFIX_JOURNAL": str(tmp_path / "j.sqlite")}
    command = [sys.executable, "-m", "fleetfix", "run", "-i", str(tmp_path / "hosts.ini")]
    command += ["--transport", "local", "--yes", "--step", str(tmp_path / "site.yml")]
    return command, env


def _step(tmp_path: Path, answers: str) -> subprocess.CompletedProcess[str]:
    command, env = _command(tmp_path)
    return _finished(command, env, tmp_path, answers)


def _finished(
    command: list[str], env: dict[str, str], cwd: Path, answers: str | None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        env=env,
        cwd=cwd,
        input=answers,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _said(stdout: str) -> list[str]:
    words = ("said-one", "said-two", "said-three", "said-four")
    return [word for word in words if f'"msg": "{word}"' in stdout]  # as Ansible prints debug


def test_each_answer_decides_its_step(tmp_path: Path) -> None:
    done = _step(tmp_path, "y\nn\nc\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("Perform task:") == 3  # continue: no more questions
    assert _said(done.stdout) == ["said-one", "said-three", "said-four"], done.stdout


def test_the_end_of_input_performs_nothing_more(tmp_path: Path) -> None:
    done = _step(tmp_path, "y\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert _said(done.stdout) == ["said-one"], done.stdout
    assert done.stdout.count("Perform task:") == 2  # asked once more, then no one to ask
    assert "no answer (end of input)" in done.stdout
    assert "internal error" not in done.stderr, done.stderr


def test_ctrl_c_at_the_question_stops_the_run(tmp_path: Path) -> None:
    """The question waits off the event loop: Ctrl-C stops the run there (exit 99), without
    an answer (before, the signal waited until someone answered), and says how to go on."""
    command, env = _command(tmp_path)
    with subprocess.Popen(
        command, env=env, cwd=tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as process:
        try:
            assert process.stdout is not None
            shown = b""
            while b"Perform task: first" not in shown:  # the prompt has no newline: read bytes
                chunk = os.read(process.stdout.fileno(), 4096)
                assert chunk, f"the run ended before asking\n{shown.decode()}"
                shown += chunk
            process.send_signal(signal.SIGINT)
            returncode = process.wait(timeout=60)  # a bound for a hang, not a timing claim
            shown += process.stdout.read()
        finally:
            if process.poll() is None:
                process.kill()
    assert returncode == INTERRUPTED
    # the command it prints goes on: asked again, `c` performs every step
    said = shown.decode().split("to go on where it stopped: ", 1)[1].splitlines()[0]
    words = shlex.split(said)
    assert words[0] == "fleetfix" and words[-2] == "--resume", said
    resumed = _finished([sys.executable, "-m", *words], env, tmp_path, "c\n")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert _said(resumed.stdout) == ["said-one", "said-two", "said-three", "said-four"]


def test_a_closed_stdin_performs_nothing(tmp_path: Path) -> None:
    """`<&-`: Python starts without sys.stdin; no one can answer, nothing is performed."""
    command, env = _command(tmp_path)
    done = _finished(["sh", "-c", f"{shlex.join(command)} <&-"], env, tmp_path, None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _said(done.stdout) == [], done.stdout
    assert "no answer (end of input)" in done.stdout, done.stdout + done.stderr
