"""Read Ansible's YAML inventory format (`all: {hosts:, children:, vars:}`) into a builder.

The reading follows ansible.plugins.inventory.yaml: top-level keys are groups; a group maps to
`hosts` (names, ranges, `host:port`, each to its vars or null), `children` (groups, recursively)
and `vars`. A bare string stands for a one-entry mapping. What Ansible skips with a warning
(a group that is not a mapping, an unknown key) is skipped here too and recorded as a warning.
Errors in a valid YAML document are all reported at once: a group, host or var in error is
left out and reading goes on; vars that feed safety gates are checked (gate_values.py).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, NoReturn

from fleetfix.errors import InventoryError, SourcePosition
from fleetfix.inventory import datafiles
from fleetfix.inventory.addresses import AddressError, parse_address
from fleetfix.inventory.builder import BuildError, InventoryBuilder
from fleetfix.inventory.gate_values import gate_value_problem
from fleetfix.inventory.problems import InventoryErrors, flattened
from fleetfix.inventory.ranges import HostRangeError, expand_host_range, has_range

_SECTIONS = ("vars", "children", "hosts")

KeyPath = tuple[Hashable, ...]


class YamlInventoryError(InventoryError):
    """The file holds a YAML mapping that is not a valid YAML inventory."""


class YamlInventoryErrors(InventoryErrors, YamlInventoryError):
    """Several places where a YAML mapping is not a valid YAML inventory."""


def parse_yaml_inventory(builder: InventoryBuilder, path: str, text: str) -> None:
    """Add the groups, hosts and vars of the YAML inventory `text` (read from `path`).

    Raises:
        InventoryError: not YAML, or YAML that is not a mapping (then it may well be INI).
        YamlInventoryError: a YAML mapping that is not a valid inventory; names file and line.
    """
    data = datafiles.load_data(path, text)
    # Host lines are not tracked one by one in YAML; errors after parsing name the file.
    builder.origin = SourcePosition(path, 1)
    _YamlReader(builder, path, text).read(data)


class _YamlReader:
    def __init__(self, builder: InventoryBuilder, path: str, text: str) -> None:
        self._builder = builder
        self._path = path
        self._text = text
        self._errors: list[InventoryError] = []

    def read(self, data: Any) -> None:
        """Read the document; raise every error found at the end."""
        self._read_document(data)
        found = flattened(self._errors)
        if len(found) == 1:
            raise found[0]
        if found:
            raise YamlInventoryErrors(found)

    def _read_document(self, data: Any) -> None:
        if not data:
            raise InventoryError("Parsed empty YAML file", self._position(()))
        if not isinstance(data, dict):
            raise InventoryError(
                "YAML inventory has invalid structure, it should be a dictionary, got: "
                f"{type(data).__name__}",
                self._position(()),
            )
        if data.get("plugin"):
            self._fail(
                "Plugin configuration YAML file, not YAML inventory "
                "(fleetfix does not run inventory plugins)",
                ("plugin",),
            )
        for name, group_data in data.items():
            self._recorded(self._group, name, group_data, (name,))

    def _recorded(self, read: Any, *args: Any) -> None:
        """Call `read(*args)`, recording the error it raises and going on."""
        try:
            read(*args)
        except InventoryError as exc:
            self._errors.append(exc)

    def _group(self, name: Any, group_data: Any, where: KeyPath) -> Any:
        if not isinstance(group_data, (dict, type(None))):
            self._warn(f"Skipping '{name}' as this is not a valid group definition")
            return name
        try:
            group = self._builder.add_group(name)
        except BuildError as exc:
            self._fail(f"Unable to add group {name}: {exc}", where)
        if group_data is None:
            return group
        sections = self._sections(group, group_data, where)
        for key, value in sections.items():
            if not isinstance(value, (dict, type(None))):
                self._warn(
                    f"Skipping key ({key}) in group ({group}) as it is not a mapping, it is a"
                    f" {type(value).__name__}"
                )
            elif value is not None:
                self._recorded(self._section, group, key, value, (*where, key))
        return group

    def _sections(self, group: str, group_data: dict[Any, Any], where: KeyPath) -> dict[Any, Any]:
        sections = dict(group_data)
        for section in _SECTIONS:
            value = sections.get(section)
            if isinstance(value, str):
                sections[section] = {value: None}
            elif section in sections and not isinstance(value, (dict, type(None))):
                self._fail(
                    f'Invalid "{section}" entry for "{group}" group, requires a dictionary,'
                    f' found "{type(value).__name__}" instead.',
                    (*where, section),
                )
        return sections

    def _section(self, group: str, key: Any, value: dict[Any, Any], where: KeyPath) -> None:
        if key == "vars":
            for var, var_value in value.items():
                self._recorded(self._variable, group, var, var_value, (*where, var))
        elif key == "children":
            for child, child_data in value.items():
                self._recorded(self._child, group, child, child_data, (*where, child))
        elif key == "hosts":
            for pattern, host_vars in value.items():
                self._recorded(self._hosts, group, pattern, host_vars or {}, (*where, pattern))
        else:
            self._warn(
                f'Skipping unexpected key ({key}) in group ({group}), only "vars", "children"'
                ' and "hosts" are valid'
            )

    def _child(self, group: str, child: Any, child_data: Any, where: KeyPath) -> None:
        child_name = self._group(child, child_data, where)
        self._build(where, self._builder.add_child, group, child_name)

    def _variable(self, entity: str, var: Any, value: Any, where: KeyPath) -> None:
        problem = gate_value_problem(var, value)
        if problem is not None:
            self._fail(problem, where)
        self._build(where, self._builder.set_variable, entity, var, value)

    def _host_variable(self, names: list[str], var: Any, value: Any, where: KeyPath) -> None:
        """One var of a host pattern (a range too): checked once, set on each host."""
        problem = gate_value_problem(var, value)
        if problem is not None:
            self._fail(problem, where)
        for name in names:
            self._build(where, self._builder.set_variable, name, var, value)

    def _hosts(self, group: str, pattern: Any, host_vars: Any, where: KeyPath) -> None:
        names, port = self._expand(pattern, where)
        if not isinstance(host_vars, dict):
            self._fail(
                f"Invalid data from file, expected dictionary and got:\n\n{host_vars}", where
            )
        for name in names:
            self._build(where, self._builder.add_host, name, group, port)
        for var, var_value in host_vars.items():
            self._recorded(self._host_variable, names, var, var_value, (*where, var))

    def _expand(self, pattern: Any, where: KeyPath) -> tuple[list[str], int | None]:
        if not isinstance(pattern, str):
            self._fail(
                f"Host pattern {pattern} must be a string. Enclose integers/floats in quotation"
                " marks.",
                where,
            )
        try:
            name, port = parse_address(pattern, allow_ranges=True)
        except AddressError:
            name, port = pattern, None
        try:
            return (expand_host_range(name) if has_range(name) else [name]), port
        except HostRangeError as exc:
            self._fail(f"{exc} (in {pattern!r})", where)

    def _build(self, where: KeyPath, operation: Any, *args: Any) -> None:
        try:
            operation(*args)
        except BuildError as exc:
            self._fail(str(exc), where)

    def _warn(self, message: str) -> None:
        self._builder.warnings.append(f"{self._path}: {message}")

    def _position(self, where: KeyPath) -> SourcePosition:
        return datafiles.locate(self._path, self._text, where)

    def _fail(self, message: str, where: KeyPath) -> NoReturn:
        position = self._position(where)
        raise YamlInventoryError(
            message, position, source_line=datafiles.line_text(self._text, position)
        )
