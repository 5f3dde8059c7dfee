"""Reading fleetfix's packaged knowledge tables (xid.yml, sxid.yml, nccl.yml)."""

from __future__ import annotations

from importlib import resources
from typing import Any

import yaml

from fleetfix.errors import KnowledgeError


def packaged_text(filename: str, what: str) -> str:
    """The text of a table shipped in this package.

    Raises:
        KnowledgeError: the file is missing (a packaging bug).
    """
    try:
        return resources.files("fleetfix.knowledge").joinpath(filename).read_text("utf-8")
    except OSError as exc:
        raise KnowledgeError(f"{what}: cannot read packaged {filename}: {exc}") from exc


_SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def yaml_mapping(text: str, what: str) -> dict[str, Any]:
    """A table's YAML text as its top-level mapping.

    Raises:
        KnowledgeError: not valid YAML, or not a mapping at the top.
    """
    try:
        # libyaml's safe loader where PyYAML has it: the tables load at every start.
        document = yaml.load(text, Loader=_SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise KnowledgeError(f"{what}: invalid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise KnowledgeError(f"{what}: top level must be a mapping")
    return document
