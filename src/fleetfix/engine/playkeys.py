"""A play's templated keywords rendered before it runs, with the variables a play has."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetfix.engine.context import Templating
from fleetfix.errors import FleetfixError
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import Play
from fleetfix.playbook.playkeywords import render_play
from fleetfix.playbook.vars_files import read_vars_files


def rendered_play(
    templar: Templating,
    play: Play,
    extra_vars: Mapping[str, Any],
    playbook_dir: str,
    groups: Mapping[str, list[str]],
) -> Play:
    """`play` with `hosts`, `serial`, ... rendered as ansible-core's PlaybookExecutor renders
    them: extra vars, the play's vars and vars_files, `groups` and `playbook_dir`, no host's.

    Raises:
        PlaybookError: a keyword cannot be rendered (at its line:col in the playbook).
    """
    if not play.templated and not is_template(play.name) and not is_template(play.hosts):
        return play
    seed = {"playbook_dir": playbook_dir, "groups": dict(groups), **extra_vars}
    here = Path(play.position.file).resolve().parent if play.position.line else Path(playbook_dir)
    file_vars = read_vars_files(templar, play.vars_files, seed, here) if play.vars_files else {}
    try:
        play_vars = templar.resolve(play.vars, seed)
    except FleetfixError:
        play_vars = dict(play.vars)  # a var no keyword uses may need a host's variables
    return render_play(play, templar.render, {**seed, **play_vars, **file_vars, **extra_vars})
