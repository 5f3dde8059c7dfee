"""Tag selection with Ansible's special tags: always, never, all, tagged, untagged.

The rules are ansible-core's `Taggable.evaluate_tags`, kept in step by a test that compares
every combination against it: a step without tags is tagged `untagged`; `--tags` (default
`all`) selects `always` steps, any step sharing a tag with it, and with `all` or `tagged` every
(tagged) step not tagged `never`; `--skip-tags` then removes steps sharing a tag with it, every
tagged step for `tagged`, and everything but `always` steps for `all` (unless `always` is
skipped too). `PlayTags` renders templated tags with the play's variables first, as
ansible-core does once per play.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetfix.engine.context import Templating
from fleetfix.errors import FleetfixError, InputError, SourcePosition
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.model import Play
from fleetfix.playbook.vars_files import read_vars_files

UNTAGGED = frozenset({"untagged"})
DEFAULT_ONLY = frozenset({"all"})


def selected(step_tags: frozenset[str], only: frozenset[str], skip: frozenset[str]) -> bool:
    """Whether a step with `step_tags` runs under --tags `only` and --skip-tags `skip`.

    An empty `only` is Ansible's default, `all`."""
    tags = step_tags or UNTAGGED
    return _wanted(tags, only or DEFAULT_ONLY) and not _skipped(tags, skip)


def _wanted(tags: frozenset[str], only: frozenset[str]) -> bool:
    if "always" in tags or not tags.isdisjoint(only):
        return True
    if "never" in tags:
        return False  # only a tag it names (or always) selects a `never` step
    return "all" in only or ("tagged" in only and tags != UNTAGGED)


def _skipped(tags: frozenset[str], skip: frozenset[str]) -> bool:
    if "all" in skip:
        return "always" not in tags or "always" in skip
    return not tags.isdisjoint(skip) or ("tagged" in skip and tags != UNTAGGED)


class PlayTags:
    """The tags of a play's steps as Ansible reads them: a templated tag is rendered once per
    play with the play's own variables (extra vars, play vars, vars_files; no host's), as
    ansible-core's PlayIterator does before it filters steps, and in --list-tasks."""

    def __init__(self, templar: Templating, variables: Mapping[str, Any]) -> None:
        self._templar = templar
        self._variables = variables
        self._cache: dict[frozenset[str], frozenset[str]] = {}

    @classmethod
    def of_play(
        cls,
        templar: Templating,
        play: Play,
        extra_vars: Mapping[str, Any],
        playbook_dir: str,
        file_vars: Mapping[str, Any] | None = None,
    ) -> PlayTags:
        """The tags of `play`'s steps; `file_vars`: its vars_files, when already read."""
        if file_vars is None:
            here = Path(play.position.file).resolve().parent if play.position.line else None
            base = here or Path(playbook_dir)
            file_vars = read_vars_files(templar, play.vars_files, extra_vars, base)
        seed = {"playbook_dir": playbook_dir, **extra_vars}
        try:
            play_vars = templar.resolve(play.vars, seed)
        except FleetfixError:
            play_vars = dict(play.vars)  # a play var no tag uses may need a host's variables
        return cls(templar, {**seed, **play_vars, **file_vars, **extra_vars})

    def of(self, tags: frozenset[str], where: SourcePosition | None = None) -> frozenset[str]:
        """`tags` with templates rendered (a list a template renders to adds each element).

        Raises:
            InputError: a templated tag could not be rendered with the play's variables.
        """
        if tags not in self._cache:
            self._cache[tags] = frozenset(t for tag in tags for t in self._rendered(tag, where))
        return self._cache[tags]

    def _rendered(self, tag: str, where: SourcePosition | None) -> list[str]:
        if not is_template(tag):
            return [tag]
        try:
            value = self._templar.render(tag, self._variables)
        except FleetfixError as exc:
            raise InputError(f"tag {tag!r} cannot be rendered: {exc}", where) from exc
        if isinstance(value, list | tuple | set | frozenset):
            return [str(v) for v in value]
        return [str(value)]
