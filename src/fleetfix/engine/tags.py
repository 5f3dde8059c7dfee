"""Tag selection with Ansible's special tags: always, never, all, tagged, untagged."""

from __future__ import annotations


def selected(step_tags: frozenset[str], only: frozenset[str], skip: frozenset[str]) -> bool:
    """Whether a step with `step_tags` runs under --tags `only` and --skip-tags `skip`."""
    if skip and _matches(step_tags, skip):
        return False
    if "always" in step_tags and "always" not in skip:
        return True
    if not only or "all" in only:
        return "never" not in step_tags or bool(step_tags & only)
    return _matches(step_tags, only)


def _matches(step_tags: frozenset[str], wanted: frozenset[str]) -> bool:
    if "tagged" in wanted and step_tags - {"always"}:
        return True
    if "untagged" in wanted and not step_tags:
        return True
    return bool(step_tags & wanted)
