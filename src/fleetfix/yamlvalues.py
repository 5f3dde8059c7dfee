"""YAML values PyYAML cannot build, refused with their place like PyYAML's own errors."""

from __future__ import annotations

from typing import Any

import yaml


class PlacedValueErrors(yaml.constructor.SafeConstructor):
    """Mix into a safe loader (before it in the bases): PyYAML lets a value it cannot build
    escape as a bare ValueError (`2024-13-45` is a timestamp with month 13); this gives it the
    node's place, as a ConstructorError."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, OverflowError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read this value: {exc}", node.start_mark
            ) from exc
