"""Tag selection with Ansible's special tags: always, never, all, tagged, untagged.

The rules are ansible-core's `Taggable.evaluate_tags`, kept in step by a test that compares
every combination against it: a step without tags is tagged `untagged`; `--tags` (default
`all`) selects `always` steps, any step sharing a tag with it, and with `all` or `tagged` every
(tagged) step not tagged `never`; `--skip-tags` then removes steps sharing a tag with it, every
tagged step for `tagged`, and everything but `always` steps for `all` (unless `always` is
skipped too).
"""

from __future__ import annotations

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
