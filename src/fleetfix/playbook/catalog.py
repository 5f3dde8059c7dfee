"""The playbook language's vocabulary: the keywords fleetfix accepts and refuses, and their types.

The loader walks the YAML; this module says what each word may be. Accepted play keywords are
exactly the Play fields (`gather_facts` is accepted and stored but probes replace facts). Ansible
keywords fleetfix does not implement are refused with the reason, not ignored: a silently ignored
`loop:` or `remote_user:` would run something other than what the operator wrote.

Step `args` shapes (what the engine reads):

    probe / action   {'name': str, 'params': dict}
    shell            {'cmd': str} + optional 'chdir', 'creates', 'removes'
    command          {'cmd': str} or {'argv': tuple[str, ...]}, + the shell options
    block            {} (the steps are Step.block / .rescue / .always)
    debug            {'msg': Any} or {'var': str}, + optional 'verbosity': int
    set_fact         {name: value, ...}
    assert           {'that': tuple[str, ...]} + optional 'fail_msg', 'success_msg', 'quiet': bool
    fail             {'msg': str}
    meta             {'name': 'flush_handlers' | 'end_host' | 'end_role' | 'end_play' | 'noop' ...}
    add_host         {'name': str, 'groups': tuple[str, ...], 'vars': dict} (templates kept)
    group_by         {'key': str, 'parents': tuple[str, ...]} (templates kept)
"""

from __future__ import annotations

import difflib
import keyword
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from fleetfix.errors import PlaybookError
from fleetfix.modules.specs import MODULE_ALIASES, MODULE_SPECS
from fleetfix.playbook.model import Duration, StepKind
from fleetfix.playbook.yamlpos import Node


@dataclass(frozen=True, slots=True)
class StepCatalog:
    """What probes and actions exist and which params each accepts."""

    probes: Mapping[str, frozenset[str]]  # name -> accepted param names
    actions: Mapping[str, frozenset[str]]


PLAY_KEYWORDS: frozenset[str] = frozenset(
    {
        "name",
        "hosts",
        "vars",
        "vars_files",
        "serial",
        "max_fail_percentage",
        "any_errors_fatal",
        "order",
        "strategy",
        "gather_facts",
        "gather_subset",
        "gather_timeout",
        "become",
        "become_user",
        "tags",
        "pre_tasks",
        "tasks",
        "roles",
        "post_tasks",
        "handlers",
        "max_unavailable_per",
        "environment",
        "timeout",
        "check_mode",
        "force_handlers",
        "ignore_errors",
        "ignore_unreachable",
        "run_once",
        "module_defaults",
    }
)

STEP_KEYWORDS: frozenset[str] = frozenset(
    {
        "name",
        "when",
        "register",
        "until",
        "retries",
        "delay",
        "changed_when",
        "failed_when",
        "ignore_errors",
        "ignore_unreachable",
        "any_errors_fatal",
        "diff",
        "timeout",
        "tags",
        "check_mode",
        "notify",
        "run_once",
        "delegate_to",
        "become",
        "become_user",
        "environment",
        "no_log",
        "vars",
        "listen",
        "verify",
        "escalate",
        "expect_unreachable",
        "cooldown",
        "max_attempts",
        *("loop", "with_items", "with_list", "with_sequence", "with_indexed_items"),
        *("with_dict", "with_nested", "with_together", "with_subelements", "with_first_found"),
        "loop_control",
    }
)
LOOP_KEYWORDS: tuple[str, ...] = (
    "loop",
    "with_items",
    "with_list",
    "with_sequence",
    "with_indexed_items",
    "with_dict",
    "with_nested",
    "with_together",
    "with_subelements",
    "with_first_found",
)
LOOP_CONTROL_ARGS: frozenset[str] = frozenset(
    {"loop_var", "index_var", "label", "pause", "extended", "extended_allitems", "break_when"}
)

_KIND_WORDS: Mapping[str, StepKind] = {
    kind.value: kind for kind in StepKind if kind is not StepKind.MODULE
}
# Ansible's fully qualified names for the builtins fleetfix implements (not probe/action/block).
_FQCN_KINDS = (StepKind.SHELL, StepKind.COMMAND, StepKind.DEBUG, StepKind.SET_FACT)
_FQCN_KINDS_MORE = (
    StepKind.ASSERT,
    StepKind.FAIL,
    StepKind.META,
    StepKind.ADD_HOST,
    StepKind.GROUP_BY,
    StepKind.INCLUDE_TASKS,
    StepKind.INCLUDE_ROLE,
)

STEP_KINDS: Mapping[str, StepKind] = MappingProxyType(
    {
        **_KIND_WORDS,
        **{
            f"ansible.{collection}.{kind.value}": kind
            for collection in ("builtin", "legacy")
            for kind in _FQCN_KINDS + _FQCN_KINDS_MORE
        },
        **{
            f"{prefix}{name}": StepKind.MODULE
            for prefix in ("", "ansible.builtin.", "ansible.legacy.")
            for name in (*MODULE_SPECS, *MODULE_ALIASES)
        },
    }
)
"""Step key -> kind. A module's key names its module too (modules/specs.py: module_named)."""

BLOCK_PARTS: frozenset[str] = frozenset({"rescue", "always"})  # only next to `block:`
OTHER_STEP_KEYS: frozenset[str] = BLOCK_PARTS | {"args", "module_defaults"}
"""Step keys that are neither kinds nor Step fields (args: merges into the kind's arguments)."""

KIND_LIST = (
    "probe, action, shell, command, block, debug, set_fact, assert, fail, meta, include_tasks,"
    " include_role,"
    " or a module (docs/modules.md)"
)

META_ACTIONS: tuple[str, ...] = (
    "flush_handlers",
    "end_host",
    "end_batch",
    "end_play",
    "noop",
    "reset_connection",
    "clear_host_errors",
    "refresh_inventory",
    "clear_facts",
    "end_role",
)
UNSUPPORTED_META: Mapping[str, str] = MappingProxyType({})
TOPOLOGY_DOMAINS: tuple[str, ...] = ("rack", "leaf", "spine", "pod", "nvlink_domain", "rail", "pdu")
PLAY_ORDERS: tuple[str, ...] = (
    "inventory",
    "reverse_inventory",
    "sorted",
    "reverse_sorted",
    "shuffle",
)
STRATEGIES: tuple[str, ...] = ("linear", "free", "host_pinned")
"""host_pinned runs as free: fleetfix has no worker per host to pin (Ansible's difference)."""

SHELL_ARGS: frozenset[str] = frozenset({"cmd", "chdir", "creates", "removes"})
COMMAND_ARGS: frozenset[str] = SHELL_ARGS | {"argv"}
DEBUG_ARGS: frozenset[str] = frozenset({"msg", "var", "verbosity"})
ASSERT_ARGS: frozenset[str] = frozenset({"that", "fail_msg", "msg", "success_msg", "quiet"})
FAIL_ARGS: frozenset[str] = frozenset({"msg"})

# Keywords that only make sense on some step kinds or some places.
ACTION_ONLY: frozenset[str] = frozenset({"verify", "escalate", "cooldown", "max_attempts"})
EXPECT_UNREACHABLE_KINDS: frozenset[StepKind] = frozenset(
    {StepKind.ACTION, StepKind.SHELL, StepKind.COMMAND}
)
VERIFY_KINDS: frozenset[StepKind] = frozenset({StepKind.PROBE, StepKind.ASSERT})
NOT_ON_BLOCK: frozenset[str] = frozenset(
    {
        "register",
        "until",
        "retries",
        "delay",
        "changed_when",
        "failed_when",
        "listen",
        "expect_unreachable",
        *LOOP_KEYWORDS,
        "loop_control",
    }
    | ACTION_ONLY
)

LOOP_HINT = (
    "fleetfix loops with loop:, with_items:, with_list:, with_sequence:, with_indexed_items:,"
    " with_dict:, with_nested:, with_together:, with_subelements: or with_first_found:;"
    ' write another with_ as a loop: with filters (loop: "{{ d | dict2items }}")'
)
_INCLUDES = "'include' is gone from Ansible: use import_playbook (plays) or import_tasks (steps)"
_FACTS = "fleetfix reads facts.d from /etc/ansible/facts.d (setup: fact_path: for another)"
_COLLECTIONS = (
    "collections are not supported: name modules ansible.builtin.NAME or by their short name"
)
_DEBUGGER = "the debugger is not supported: register the result and print it with debug: var="
_CONNECTION = "connection settings come from the inventory and the command line (-u, --transport)"

UNSUPPORTED_PLAY_KEYWORDS: Mapping[str, str] = MappingProxyType(
    {
        "include": _INCLUDES,
        "import_tasks": "import_tasks goes in a list of steps (tasks:, pre_tasks:, ...)",
        "connection": _CONNECTION,
        "remote_user": _CONNECTION,
        "port": _CONNECTION,
        "vars_prompt": "prompts are not supported: pass values with -e",
        "fact_path": _FACTS,
        "become_method": "fleetfix becomes root with sudo",
        "become_flags": "fleetfix becomes root with sudo",
        "no_log": "set no_log on the steps whose output is secret",
        "throttle": "use serial or max_unavailable_per",
        "collections": _COLLECTIONS,
        "debugger": _DEBUGGER,
        "diff": "use --diff",
    }
)

UNSUPPORTED_STEP_KEYWORDS: Mapping[str, str] = MappingProxyType(
    {
        "async": "use timeout: (every step has one)",
        "poll": "use timeout: (every step has one)",
        "delegate_facts": "facts are not delegated in fleetfix: set_fact in a play on that host,"
        " or keep the value in a registered variable (hostvars[host] reads it)",
        "throttle": "use serial or max_unavailable_per on the play",
        "connection": _CONNECTION,
        "remote_user": _CONNECTION,
        "port": _CONNECTION,
        "become_method": "fleetfix becomes root with sudo",
        "become_flags": "fleetfix becomes root with sudo",
        "include": _INCLUDES,
        "collections": _COLLECTIONS,
        "debugger": _DEBUGGER,
    }
)

# Common Ansible modules an operator may paste; refused with a pointer to what fleetfix has.
ANSIBLE_MODULES: frozenset[str] = frozenset(
    {
        "cron",
        "fetch",
        "get_url",
        "group",
        "modprobe",
        "mount",
        "script",
        "sysctl",
        "uri",
        "user",
    }
)

# Jinja2 literals and operators: a variable with one of these names could never be read.
_JINJA_RESERVED = frozenset(
    {"true", "false", "none", "True", "False", "None", "and", "or", "not", "in", "is", "if"}
    | {"else", "for", "recursive", "loop", "self", "varargs", "kwargs", "caller"}
)

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?[smhd])+")
_UNIT_SECONDS = MappingProxyType({"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0})
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%")


def suggest(word: str, candidates: Collection[str]) -> str | None:
    """`did you mean 'x'?` for the closest candidate, or None."""
    matches = difflib.get_close_matches(word, sorted(candidates), n=1)
    return f"did you mean {matches[0]!r}?" if matches else None


def is_variable_name(name: object) -> bool:
    """True when `name` can be used as a Jinja2 variable (register, set_fact, vars)."""
    return (
        isinstance(name, str)
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and name not in _JINJA_RESERVED
    )


def reserved_argument(action: str, name: str) -> str:
    """ansible-core's load-time refusal of an argument named `_ansible_...` (mod_args.py)."""
    return (
        f"Invalid parameter specified beginning with keyword '_ansible_' for action "
        f"'{action}': '{name}'. The prefix '_ansible_' is reserved for internal use only."
    )


def to_bool(node: Node, what: str) -> bool:
    """A YAML boolean (true/false/yes/no); anything else is an error."""
    if isinstance(node.value, bool):
        return node.value
    raise node.error(f"{what} must be true or false, not {shown(node.value)}")


def to_string(node: Node, what: str) -> str:
    """A non-empty string."""
    if isinstance(node.value, str) and node.value.strip():
        return node.value
    raise node.error(f"{what} must be a non-empty string, not {shown(node.value)}")


def to_int(node: Node, what: str, *, minimum: int) -> int:
    """An integer >= minimum, also written as digits in a string (booleans are not integers)."""
    value = node.value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())  # `retries: "3"` and free-form `verbosity=1`, as in Ansible
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise node.error(f"{what} must be an integer >= {minimum}, not {shown(value)}")


def to_seconds(node: Node, what: str, *, allow_zero: bool = False) -> float:
    """Seconds from a number or a duration like '90s', '15m', '2h', '1h30m', '1d'."""
    seconds = parse_duration(node.value)
    if seconds is None:
        raise node.error(
            f"{what} must be a number of seconds or a duration like '90s', '15m', '2h', "
            f"not {shown(node.value)}"
        )
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise node.error(f"{what} must be {bound}, not {shown(node.value)}")
    return seconds


def to_duration(node: Node, what: str) -> Duration:
    """A positive Duration."""
    return Duration(to_seconds(node, what))


def parse_duration(value: object) -> float | None:
    """Seconds from a number, a numeric string or 'NNs/m/h/d' parts; None when not a duration."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip().lower().replace(" ", "")
    try:
        return float(text)
    except ValueError:
        pass
    if not _DURATION_FULL.fullmatch(text):
        return None
    return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))


def to_names(node: Node, what: str, *, split_commas: bool = False) -> tuple[str, ...]:
    """A string or a list of strings (tags: 'a,b' splits on commas, as Ansible does)."""
    items = node.items if node.is_sequence else (node,)
    names: list[str] = []
    for item in items:
        value = item.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = str(value)  # `tags: [2024]` is a tag, as in Ansible
        if not isinstance(value, str) or not value.strip():
            raise item.error(f"{what} must be a string or a list of strings, not {shown(value)}")
        parts = value.split(",") if split_commas else [value]
        names.extend(part.strip() for part in parts if part.strip())
    return tuple(names)


def to_environment(node: Node, what: str) -> dict[str, str]:
    """A mapping of environment variable names to scalar values (kept as strings)."""
    if not node.is_mapping:
        raise node.error(f"{what} must be a mapping of NAME: value, not {shown(node.value)}")
    environment: dict[str, str] = {}
    for entry in node.entries:
        name = entry.key.value
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise entry.key.error(f"invalid environment variable name {shown(name)}")
        value = entry.value.value
        if value is None or isinstance(value, dict | list):
            raise entry.value.error(f"environment value of {name} must be a string or number")
        environment[name] = _scalar_text(value)
    return environment


def to_percent(node: Node, what: str) -> float:
    """A percentage 0..100 from a number or 'N%'."""
    value = node.value
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str) and (match := _PERCENT.fullmatch(value.strip())):
        number = float(match.group(1))
    if number is None or not 0 <= number <= 100:
        raise node.error(f"{what} must be a percentage from 0 to 100, not {shown(value)}")
    return number


def to_batch_size(node: Node) -> int | str:
    """One serial batch size: a positive int or 'N%' (1..100), kept as written."""
    value = node.value
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    match = _PERCENT.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is not None and 0 < float(match.group(1)) <= 100:
        return f"{match.group(1)}%"
    raise node.error(
        f"serial must be a positive number of hosts or a percentage like '25%', not {shown(value)}",
        hint="omit serial to run all hosts in one batch",
    )


def to_choice(node: Node, what: str, choices: tuple[str, ...]) -> str:
    """One of a fixed set of words."""
    if isinstance(node.value, str) and node.value in choices:
        return node.value
    hint = suggest(node.value, choices) if isinstance(node.value, str) else None
    raise node.error(
        f"{what} must be one of {', '.join(choices)}, not {shown(node.value)}", hint=hint
    )


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"  # what a shell script expects, not Python's True
    return str(value)


def shown(value: object) -> str:
    """A value as an error message shows it: short, and named by its YAML type when unclear."""
    if value is None:
        return "null (empty)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def to_serial(node: Node) -> tuple[int | str, ...]:
    """`serial`: one batch size or a list of them."""
    if node.is_sequence:
        return tuple(to_batch_size(item) for item in node.items)
    return (to_batch_size(node),)


def to_unavailable_caps(node: Node) -> dict[str, int]:
    """`max_unavailable_per`: topology domain -> positive int."""
    if not node.is_mapping:
        raise node.error(
            f"max_unavailable_per must be a mapping like {{rack: 1}}, not {shown(node.value)}"
        )
    caps: dict[str, int] = {}
    for entry in node.entries:
        domain = entry.key.value
        if domain not in TOPOLOGY_DOMAINS:
            hint = suggest(domain, TOPOLOGY_DOMAINS) if isinstance(domain, str) else None
            hint = hint or f"domains are {', '.join(TOPOLOGY_DOMAINS)}"
            raise entry.key.error(f"unknown topology domain {shown(domain)}", hint=hint)
        caps[domain] = to_int(entry.value, f"max_unavailable_per {domain}", minimum=1)
    return caps


def to_register(node: Node) -> str:
    """`register`: a name a condition can read."""
    if is_variable_name(node.value):
        return str(node.value)
    raise node.error(
        f"register must be a variable name, not {shown(node.value)}",
        hint="letters, digits and _, not starting with a digit, e.g. register: smi",
    )


def to_meta(node: Node) -> dict[str, Any]:
    """`meta: NAME` as args {'name': NAME}, the same shape as probe and action."""
    value = node.value
    if isinstance(value, str) and value in META_ACTIONS:
        return {"name": value}
    if isinstance(value, str) and value in UNSUPPORTED_META:
        raise node.error(f"meta: {value} is not supported", hint=UNSUPPORTED_META[value])
    hint = suggest(value, META_ACTIONS) if isinstance(value, str) else None
    raise node.error(
        f"meta must be one of {', '.join(META_ACTIONS)}, not {shown(value)}", hint=hint
    )


def to_argv(node: Node) -> tuple[str, ...]:
    """`command: {argv: [...]}`: a non-empty list of words (numbers become words)."""
    if not node.is_sequence or not node.items:
        raise node.error(f"argv must be a non-empty list of words, not {shown(node.value)}")
    words: list[str] = []
    for item in node.items:
        if isinstance(item.value, bool) or not isinstance(item.value, str | int | float):
            raise item.error(f"argv words must be strings, not {shown(item.value)}")
        words.append(str(item.value))
    return tuple(words)


def unknown_step_key(key_node: Node, catalog: StepCatalog) -> PlaybookError:
    """Why a step key is not known, with the closest thing fleetfix has."""
    key = key_node.value
    if not isinstance(key, str):
        return key_node.error(f"step keywords are words, not {shown(key)}")
    short = key.removeprefix("ansible.builtin.").removeprefix("ansible.legacy.")
    if short in UNSUPPORTED_STEP_KEYWORDS:
        return key_node.error(
            f"unsupported step keyword {key!r}", hint=UNSUPPORTED_STEP_KEYWORDS[short]
        )
    if key.startswith("with_"):
        return key_node.error(f"unsupported step keyword {key!r}", hint=LOOP_HINT)
    if short in catalog.actions:
        return key_node.error(
            f"unknown step keyword {key!r}",
            hint=f"{short!r} is an action: write 'action: {short}'",
        )
    if short in catalog.probes:
        return key_node.error(
            f"unknown step keyword {key!r}",
            hint=f"{short!r} is a probe: write 'probe: {short}'",
        )
    if short in ANSIBLE_MODULES or key.startswith("ansible."):
        return key_node.error(
            f"Ansible module {key!r} is not available in fleetfix",
            hint=f"fleetfix runs these modules: {', '.join(sorted(MODULE_SPECS))}; a step is"
            f" one of: {KIND_LIST}",
        )
    candidates = STEP_KEYWORDS | BLOCK_PARTS | set(_KIND_WORDS) | set(MODULE_SPECS)
    return key_node.error(f"unknown step keyword {key!r}", hint=suggest(key, candidates))


def default_step_name(kind: StepKind, args: Mapping[str, Any]) -> str:
    """'probe nvidia_smi', 'shell: <first 40 chars>', 'meta: flush_handlers', 'debug'..."""
    if kind in (StepKind.PROBE, StepKind.ACTION):
        return f"{kind.value} {args['name']}"
    if kind in (StepKind.SHELL, StepKind.COMMAND):
        text = args.get("cmd") or shlex.join(args.get("argv", ()))
        return f"{kind.value}: {' '.join(text.split())[:40]}"
    if kind is StepKind.META:
        return f"meta: {args['name']}"
    if kind is StepKind.MODULE:
        return str(args["as"])  # Ansible's banner: the module as written
    if kind is StepKind.INCLUDE_ROLE:
        return f"include_role : {args['role']}"
    return kind.value
