"""`-e` parsing and play vars_files loading."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.parsing.splitter import parse_kv as ansible_parse_kv

from fleetfix.errors import PlaybookError, SourcePosition, UsageError
from fleetfix.playbook.extravars import (
    load_vars_files,
    parse_extra_vars,
    parse_kv,
    split_args,
)

from .conftest import PLAYBOOKS


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        (["target=gpu042"], {"target": "gpu042"}),
        (["a=1 b=two"], {"a": "1", "b": "two"}),  # k=v values stay strings, as in Ansible
        (['reason="xid 79 at night"'], {"reason": "xid 79 at night"}),
        (["reason='it is \"fine\"'"], {"reason": 'it is "fine"'}),
        (["x=a=b"], {"x": "a=b"}),
        (["empty="], {"empty": ""}),
        (['{"gpus": 8, "ok": true}'], {"gpus": 8, "ok": True}),
        (["{gpus: 8, list: [1, 2]}"], {"gpus": 8, "list": [1, 2]}),
        (["a=1", "a=2"], {"a": "2"}),
        (["a=1 b=1", '{"b": 2}', "c=3"], {"a": "1", "b": 2, "c": "3"}),
        (["msg={{ a | default('x y') }}"], {"msg": "{{ a | default('x y') }}"}),
        # Ansible's rule: words that are not key=value are the value of _raw_params
        (["novalue"], {"_raw_params": "novalue"}),
        (["flag: False a=1"], {"_raw_params": "flag: False", "a": "1"}),
    ],
)
def test_parse_extra_vars(items: list[str], expected: dict[str, object], tmp_path: Path) -> None:
    assert parse_extra_vars(items, tmp_path) == expected


def test_at_file_yaml_and_json_relative_to_base_dir(tmp_path: Path) -> None:
    (tmp_path / "site.yml").write_text("slurm_head: head01\ngpus: 8\n", encoding="utf-8")
    (tmp_path / "extra.json").write_text('{"gpus": 4}', encoding="utf-8")
    result = parse_extra_vars(["@site.yml", "@extra.json", "a=1"], tmp_path)
    assert result == {"slurm_head": "head01", "gpus": 4, "a": "1"}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("", "-e '': empty extra vars"),
        ("1abc=2", "-e '1abc=2': expected key=value, got '1abc=2'"),
        ("./vars.yml", "-e './vars.yml': Please prepend extra_vars filename './vars.yml' with '@'"),
        ('a="unclosed', "-e 'a=\"unclosed': unterminated \" quote"),
        ("a={{ b", "-e 'a={{ b': unterminated {{ ... }}"),
        (
            "[1, 2]",
            "-e '[1, 2]': extra vars must be a mapping of variable names to values, not a list",
        ),
        ("{a: [1}", "-e '{a: [1}': invalid YAML: expected ',' or ']', but got '}' at column 7"),
        ("{bad-name: 1}", "-e '{bad-name: 1}': invalid variable name 'bad-name' at column 2"),
    ],
)
def test_bad_extra_vars_are_usage_errors_quoting_the_item(
    tmp_path: Path, item: str, message: str
) -> None:
    with pytest.raises(UsageError) as caught:
        parse_extra_vars([item], tmp_path)
    assert str(caught.value) == message


def test_missing_and_broken_at_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^-e '@nope.yml': cannot read .*nope\.yml"):
        parse_extra_vars(["@nope.yml"], tmp_path)
    (tmp_path / "bad.yml").write_text("a: [1\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        parse_extra_vars(["@bad.yml"], tmp_path)
    assert str(caught.value).startswith(f"-e '@bad.yml': {tmp_path / 'bad.yml'}:2:1: invalid YAML")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a b  c", ["a", "b", "c"]),
        ("a='b c' d", ["a=b c", "d"]),
        ('a="x \\"y\\""', ['a=x "y"']),
        ("a=\\ b", ["a= b"]),
        ("msg={{ x | default('a b') }} n=1", ["msg={{ x | default('a b') }}", "n=1"]),
        ('msg="{{ x | default("a b") }} tail"', ['msg={{ x | default("a b") }} tail']),
        ("{% if a %}x y{% endif %}", ["{% if a %}x", "y{% endif %}"]),  # as Ansible splits it
        ("a='' b", ["a=", "b"]),
        ("''", [""]),
        ("", []),
    ],
)
def test_split_args_keeps_jinja_blocks_whole(text: str, words: list[str]) -> None:
    assert split_args(text) == words


@pytest.mark.parametrize(
    "text",
    [
        "a=1 b=two",
        'reason="xid 79 at night"',
        "x=a=b",
        "empty=",
        "msg={{ a | default('x y') }}",
        'msg="{{ a }} tail" n=1',
        "r='it is \"fine\"'",
        "a='' b=2",
        "patterns=/dev/shm/nccl-*",
    ],
)
def test_parse_kv_matches_ansible_core(text: str) -> None:
    assert parse_kv(text) == ansible_parse_kv(text)


def test_parse_kv_rejects_non_pairs() -> None:
    assert parse_kv("a=1 b=2") == {"a": "1", "b": "2"}
    with pytest.raises(ValueError, match="expected key=value, got 'x'"):
        parse_kv("a=1 x")


def test_load_vars_files_in_order(tmp_path: Path) -> None:
    (tmp_path / "a.yml").write_text("x: 1\ny: [1]\n", encoding="utf-8")
    (tmp_path / "b.yml").write_text("y: 2\n", encoding="utf-8")
    (tmp_path / "empty.yml").write_text("", encoding="utf-8")
    result = load_vars_files(["a.yml", "b.yml", "empty.yml", str(tmp_path / "a.yml")], tmp_path)
    assert result == {"x": 1, "y": [1]}
    assert load_vars_files(["a.yml", "b.yml"], tmp_path) == {"x": 1, "y": 2}


@pytest.mark.parametrize(
    ("name", "position", "message"),
    [
        ("bad_names.yml", (2, 1), "invalid variable name 'bad-name'"),
        (
            "not_mapping.yml",
            (1, 1),
            "a vars file must be a mapping of variable names to values, not a list",
        ),
        ("broken.yml", (3, 1), "invalid YAML: expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_bad_vars_files_point_into_the_file(
    name: str, position: tuple[int, int], message: str
) -> None:
    vars_dir = PLAYBOOKS / "vars"
    with pytest.raises(PlaybookError) as caught:
        load_vars_files(["site.yml", name], vars_dir)
    assert caught.value.position == SourcePosition(str(vars_dir / name), *position)
    assert caught.value.message == message


def test_duplicate_key_in_vars_file(tmp_path: Path) -> None:
    (tmp_path / "dup.yml").write_text("a: 1\nb: 2\na: 3\n", encoding="utf-8")
    with pytest.raises(PlaybookError) as caught:
        load_vars_files(["dup.yml"], tmp_path)
    assert (caught.value.message, caught.value.position) == (
        "duplicate key 'a'",
        SourcePosition(str(tmp_path / "dup.yml"), 3, 1),
    )


def test_missing_vars_file(tmp_path: Path) -> None:
    with pytest.raises(PlaybookError, match=r"cannot read .*nope\.yml: No such file"):
        load_vars_files(["nope.yml"], tmp_path)
