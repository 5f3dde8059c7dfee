"""The `ansible.builtin` modules fleetfix runs natively, with Ansible's parameters.

Names, aliases, defaults and choices follow ansible-core's module documentation (2.19). A
parameter fleetfix does not take is refused at load with the reason (`refused`), never ignored:
a silently dropped `validate:` or `reboot_command:` would do something else than written.
`command` and `shell` are step kinds of their own (engine/kinds.py), not listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fleetfix.modules.facts_specs import FACT_SPECS
from fleetfix.modules.spec import ModuleSpec, Param

_PATH = Param("path", required=True, aliases=("dest", "name"))
_OWNERSHIP: Mapping[str, Param] = {
    "mode": Param("raw"),
    "owner": Param("str"),
    "group": Param("str"),
}
_SELINUX_REFUSED = {
    name: "SELinux contexts and file attributes are not set by fleetfix"
    for name in ("seuser", "serole", "setype", "selevel", "attributes", "unsafe_writes")
}
_STATES = ("reloaded", "restarted", "started", "stopped")


def _spec(spec: ModuleSpec) -> tuple[str, ModuleSpec]:
    return spec.name, spec


INCLUDE_VARS_SPEC = ModuleSpec(
    "include_vars",
    "set variables from YAML/JSON files (or a directory of them) on the controller",
    {
        "file": Param("str"),
        "dir": Param("str"),
        "name": Param("str"),
        "depth": Param("int", default=0),
        "files_matching": Param("str"),
        "ignore_files": Param("raw"),
        "extensions": Param("list", default=["yaml", "yml", "json"]),
        "ignore_unknown_extensions": Param("bool", default=False),
        "hash_behaviour": Param("str", choices=("merge", "replace")),
    },
    free_form="file",
    read_only=True,
    mutually_exclusive=(("file", "dir"),),
)


_PACKAGE_NAMES = Param("list", aliases=("pkg", "package"))
_PACKAGE_REFUSED = {
    name: "fleetfix installs named packages from the node's repositories"
    for name in ("deb", "upgrade", "list", "download_only", "download_dir", "conf_file")
}
_RPM_PARAMS: Mapping[str, Param] = {
    "name": _PACKAGE_NAMES,
    "state": Param("str", choices=("absent", "installed", "latest", "present", "removed")),
    "update_cache": Param("bool", default=False, aliases=("expire-cache",)),
    "disable_gpg_check": Param("bool", default=False),
    "enablerepo": Param("list", default=[]),
    "disablerepo": Param("list", default=[]),
    "allow_downgrade": Param("bool", default=False),
}
_PACKAGE_SPECS = (
    _spec(
        ModuleSpec(
            "package",
            "install or remove OS packages with the node's manager (apt, dnf or yum)",
            {
                "name": Param("list", required=True),
                "state": Param(
                    "str",
                    required=True,
                    choices=("absent", "installed", "latest", "present", "removed"),
                ),
                "use": Param("str", default="auto", choices=("apt", "auto", "dnf", "yum")),
            },
        )
    ),
    _spec(
        ModuleSpec(
            "apt",
            "install, pin (name=version), upgrade or remove Debian packages; update the cache",
            {
                "name": _PACKAGE_NAMES,
                "state": Param(
                    "str",
                    default="present",
                    choices=("absent", "installed", "latest", "present", "removed"),
                ),
                "update_cache": Param("bool", default=False, aliases=("update-cache",)),
                "cache_valid_time": Param("int", default=0),
                "purge": Param("bool", default=False),
                "autoremove": Param("bool", default=False),
                "install_recommends": Param("bool", aliases=("install-recommends",)),
                "allow_downgrade": Param(
                    "bool",
                    default=False,
                    aliases=("allow-downgrade", "allow_downgrades", "allow-downgrades"),
                ),
                "only_upgrade": Param("bool", default=False),
                "default_release": Param("str", aliases=("default-release",)),
                "lock_timeout": Param("int", default=60),
            },
            required_one_of=(("name", "update_cache"),),
            refused={
                **_PACKAGE_REFUSED,
                "force": "fleetfix does not force apt past its checks: pin the version",
                "dpkg_options": "fleetfix keeps the node's config files (confdef, confold)",
                "policy_rc_d": "services start as the package's scripts say",
                "fail_on_autoremove": "not supported",
                "clean": "run apt-get clean with command:",
                "allow_unauthenticated": "fleetfix installs only authenticated packages",
                "allow_change_held_packages": "release the hold with command: apt-mark",
            },
        )
    ),
    *(
        _spec(
            ModuleSpec(
                tool,
                f"install, pin (name-version), upgrade or remove RPM packages with {tool}",
                _RPM_PARAMS,
                required_one_of=(("name", "update_cache"),),
                refused={
                    **_PACKAGE_REFUSED,
                    "exclude": "name the packages to install instead",
                    "security": "name the packages to install instead",
                    "bugfix": "name the packages to install instead",
                    "autoremove": "run dnf autoremove with command:",
                    "installroot": "fleetfix installs into the node's root",
                    "releasever": "fleetfix installs the node's release",
                },
            )
        )
        for tool in ("dnf", "yum")
    ),
)


MODULE_SPECS: Mapping[str, ModuleSpec] = MappingProxyType(
    dict(
        [
            _spec(
                ModuleSpec(
                    "raw",
                    "run a command through the remote shell, as typed (no module machinery)",
                    {"_raw_params": Param("str", required=True), "executable": Param("path")},
                    free_form="_raw_params",
                )
            ),
            _spec(
                ModuleSpec(
                    "stat",
                    "facts about a path: exists, type, mode, owner, size, times, checksum",
                    {
                        "path": _PATH,
                        "follow": Param("bool", default=False),
                        "get_checksum": Param("bool", default=True),
                        "checksum_algorithm": Param(
                            "str",
                            default="sha1",
                            choices=("md5", "sha1", "sha224", "sha256", "sha384", "sha512"),
                            aliases=("checksum", "checksum_algo"),
                        ),
                        "get_mime": Param("bool", default=True, aliases=("mime", "mime_type")),
                        "get_attributes": Param(
                            "bool", default=True, aliases=("attr", "attributes")
                        ),
                    },
                    read_only=True,
                )
            ),
            _spec(
                ModuleSpec(
                    "file",
                    "make a path a file, directory, link or absent; set its mode and owner",
                    {
                        "path": Param("path", required=True, aliases=("dest", "name")),
                        "state": Param(
                            "str", choices=("absent", "directory", "file", "hard", "link", "touch")
                        ),
                        "src": Param("path"),
                        "recurse": Param("bool", default=False),
                        "force": Param("bool", default=False),
                        "follow": Param("bool", default=True),
                        **_OWNERSHIP,
                    },
                    refused={
                        **_SELINUX_REFUSED,
                        "modification_time": "file times are not set by fleetfix",
                        "access_time": "file times are not set by fleetfix",
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "copy",
                    "write a controller file or given content to a path on the node",
                    {
                        "src": Param("path"),
                        "content": Param("raw", no_log=True),
                        "dest": Param("path", required=True),
                        "backup": Param("bool", default=False),
                        "force": Param("bool", default=True, aliases=("thirsty",)),
                        "remote_src": Param("bool", default=False),
                        "follow": Param("bool", default=False),
                        "validate": Param("str"),
                        **_OWNERSHIP,
                    },
                    mutually_exclusive=(("src", "content"),),
                    required_one_of=(("src", "content"),),
                    refused={
                        **_SELINUX_REFUSED,
                        "decrypt": "fleetfix has no vault",
                        "directory_mode": "copying directories is not supported; copy files",
                        "local_follow": "copying directories is not supported; copy files",
                        "checksum": "fleetfix computes the checksum of what it writes",
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "template",
                    "render a Jinja2 template from the controller to a path on the node",
                    {
                        "src": Param("path", required=True),
                        "dest": Param("path", required=True),
                        "backup": Param("bool", default=False),
                        "force": Param("bool", default=True),
                        "follow": Param("bool", default=False),
                        "validate": Param("str"),
                        "output_encoding": Param("str", default="utf-8"),
                        "trim_blocks": Param("bool", default=True),
                        "lstrip_blocks": Param("bool", default=False),
                        "newline_sequence": Param(
                            "str", default="\n", choices=("\n", "\r", "\r\n")
                        ),
                        **_OWNERSHIP,
                    },
                    refused={
                        **_SELINUX_REFUSED,
                        **{
                            name: "fleetfix renders templates with Ansible's default delimiters"
                            for name in (
                                "variable_start_string",
                                "variable_end_string",
                                "block_start_string",
                                "block_end_string",
                                "comment_start_string",
                                "comment_end_string",
                            )
                        },
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "lineinfile",
                    "make sure a line is in a file (or not), replacing the line a regexp finds",
                    {
                        "path": Param("path", required=True, aliases=("dest", "destfile", "name")),
                        "regexp": Param("str", aliases=("regex",)),
                        "search_string": Param("str"),
                        "state": Param("str", default="present", choices=("absent", "present")),
                        "line": Param("str", aliases=("value",)),
                        "backrefs": Param("bool", default=False),
                        "insertafter": Param("str"),
                        "insertbefore": Param("str"),
                        "create": Param("bool", default=False),
                        "backup": Param("bool", default=False),
                        "firstmatch": Param("bool", default=False),
                        "validate": Param("str"),
                        **_OWNERSHIP,
                    },
                    mutually_exclusive=(
                        ("insertbefore", "insertafter"),
                        ("regexp", "search_string"),
                        ("backrefs", "search_string"),
                    ),
                    refused=_SELINUX_REFUSED,
                )
            ),
            _spec(
                ModuleSpec(
                    "slurp",
                    "read a file from the node, base64-encoded",
                    {"src": Param("path", required=True, aliases=("path",))},
                    read_only=True,
                )
            ),
            _spec(
                ModuleSpec(
                    "wait_for",
                    "wait for a port, a path, or a string in a file, seen from the node",
                    {
                        "host": Param("str", default="127.0.0.1"),
                        "port": Param("int"),
                        "path": Param("path"),
                        "state": Param(
                            "str",
                            default="started",
                            choices=("absent", "drained", "present", "started", "stopped"),
                        ),
                        "search_regex": Param("str"),
                        "delay": Param("int", default=0),
                        "timeout": Param("int", default=300),
                        "connect_timeout": Param("int", default=5),
                        "sleep": Param("int", default=1),
                        "msg": Param("str"),
                    },
                    read_only=True,
                    mutually_exclusive=(("port", "path"),),
                    refused={
                        "exclude_hosts": "drained-state host filters are not supported",
                        "active_connection_states": "drained-state filters are not supported",
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "tempfile",
                    "make a temporary file or directory on the node (its path is returned)",
                    {
                        "state": Param("str", default="file", choices=("file", "directory")),
                        "path": Param("path"),
                        "prefix": Param("str", default="ansible."),
                        "suffix": Param("str", default=""),
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "wait_for_connection",
                    "wait until the node answers over the transport again",
                    {
                        "connect_timeout": Param("float", default=5.0),
                        "delay": Param("float", default=0.0),
                        "sleep": Param("float", default=1.0),
                        "timeout": Param("float", default=600.0),
                    },
                    read_only=True,
                )
            ),
            _spec(
                ModuleSpec(
                    "ping",
                    "check that the node answers over the transport (registers ping: DATA)",
                    {"data": Param("str", default="pong")},
                    read_only=True,
                )
            ),
            _spec(
                ModuleSpec(
                    "pause",
                    "wait a number of seconds or minutes (prompts are refused: no one answers)",
                    {
                        "seconds": Param("float"),
                        "minutes": Param("float"),
                        "echo": Param("bool", default=True),
                    },
                    read_only=True,
                    mutually_exclusive=(("seconds", "minutes"),),
                    required_one_of=(("seconds", "minutes"),),
                    refused={
                        "prompt": "fleetfix runs unattended: no one answers a prompt at 3 a.m.;"
                        " give seconds: or minutes:"
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "systemd",
                    "start, stop, restart or reload a systemd unit; enable, mask, daemon-reload",
                    {
                        "name": Param("str", aliases=("service", "unit")),
                        "state": Param("str", choices=_STATES),
                        "enabled": Param("bool"),
                        "masked": Param("bool"),
                        "daemon_reload": Param("bool", default=False, aliases=("daemon-reload",)),
                        "daemon_reexec": Param("bool", default=False, aliases=("daemon-reexec",)),
                        "scope": Param("str", default="system", choices=("system",)),
                        "no_block": Param("bool", default=False),
                        "force": Param("bool"),
                    },
                    required_by=(
                        ("state", ("name",)),
                        ("enabled", ("name",)),
                        ("masked", ("name",)),
                    ),
                )
            ),
            _spec(
                ModuleSpec(
                    "service",
                    "start, stop, restart or reload a service; enable it at boot",
                    {
                        "name": Param("str", required=True),
                        "state": Param("str", choices=_STATES),
                        "enabled": Param("bool"),
                        "sleep": Param("int"),
                        "use": Param("str", default="auto", choices=("auto", "systemd")),
                    },
                    required_one_of=(("state", "enabled"),),
                    refused={
                        "pattern": "fleetfix manages services through systemd only",
                        "runlevel": "fleetfix manages services through systemd only",
                        "arguments": "fleetfix manages services through systemd only",
                        "args": "fleetfix manages services through systemd only",
                    },
                )
            ),
            _spec(
                ModuleSpec(
                    "reboot",
                    "reboot through fleetfix's reboot action: ownership and busy gates, intent"
                    " journaled with the boot id, wait for a new boot id",
                    {
                        "reboot_timeout": Param("float", default=600.0),
                        "connect_timeout": Param("float"),
                        "msg": Param("str", default="Reboot initiated by Ansible"),
                        "pre_reboot_delay": Param("int", default=0),
                        "post_reboot_delay": Param("float", default=0.0),
                        "test_command": Param("str"),
                    },
                    refused={
                        "reboot_command": "fleetfix sends reboots itself (over SSH or through"
                        " Slurm: host var fleetfix_reboot_via)",
                        "boot_time_command": "fleetfix tells a reboot by the kernel's boot id",
                        "search_paths": "fleetfix sends reboots itself",
                    },
                )
            ),
            *FACT_SPECS.items(),
            *_PACKAGE_SPECS,
            _spec(INCLUDE_VARS_SPEC),
        ]
    )
)
"""Module name (short) -> spec. `ansible.builtin.NAME` and `ansible.legacy.NAME` name them too;
`systemd_service` is `systemd`."""

MODULE_ALIASES: Mapping[str, str] = MappingProxyType({"systemd_service": "systemd"})


def module_named(written: str) -> ModuleSpec | None:
    """The spec a step key names (`copy`, `ansible.builtin.copy`, ...), or None."""
    short = written.removeprefix("ansible.builtin.").removeprefix("ansible.legacy.")
    return MODULE_SPECS.get(MODULE_ALIASES.get(short, short))
