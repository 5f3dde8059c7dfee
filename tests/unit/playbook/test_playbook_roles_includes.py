"""Roles, includes and imports as ansible's own playbooks write them (issue 22): what the
loader accepts now and the model values it builds."""

from __future__ import annotations

from pathlib import Path

from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import load_playbook, validate_playbook
from fleetfix.playbook.model import Playbook, RoleInfo, Step, StepKind, handler_search_order


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "site.yml"


def _load(root: Path, catalog: StepCatalog, files: dict[str, str]) -> Playbook:
    return load_playbook(_write(root, files), catalog)


def test_role_handler_includes_a_file_from_the_roles_tasks_dir(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    """A role without tasks/main.yml is valid; its handler's include_tasks finds tasks/x.yml,
    and the included steps are the role's (named `role : step`, with its defaults)."""
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  roles: [cleanup]\n  tasks:\n"
            "    - debug: msg=hi\n      changed_when: true\n      notify: delete tmp\n",
            "roles/cleanup/handlers/main.yml": "- name: delete tmp\n"
            "  include_tasks: default-cleanup.yml\n",
            "roles/cleanup/tasks/default-cleanup.yml": "- name: rm\n  debug: msg={{ what }}\n",
            "roles/cleanup/defaults/main.yml": "what: tmp\n",
        },
    )
    (play,) = playbook.plays
    (handler,) = play.handlers
    assert handler.kind is StepKind.INCLUDE_TASKS
    (included,) = handler.args["steps"]
    assert included.name == "cleanup : rm"
    assert included.role is not None and dict(included.role.defaults) == {"what": "tmp"}


def test_nested_dependency_path_is_found_under_the_playbooks_roles(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  roles: [parent]\n",
            "roles/parent/meta/main.yml": "dependencies:\n  - role: group/child\n",
            "roles/group/child/tasks/main.yml": "- name: c\n  debug: msg=c\n",
        },
    )
    assert [s.name for s in playbook.plays[0].tasks] == ["group/child : c"]


def test_dependency_is_found_next_to_the_depending_role(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    """Ansible also searches the depending role's parent directory (role_basedir)."""
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  roles: [elsewhere/parent]\n",
            "elsewhere/parent/meta/main.yml": "dependencies: [sibling]\n",
            "elsewhere/parent/tasks/main.yml": "- name: p\n  debug: msg=p\n",
            "elsewhere/sibling/tasks/main.yml": "- name: s\n  debug: msg=s\n",
        },
    )
    assert [s.name for s in playbook.plays[0].tasks] == [
        "sibling : s",
        "elsewhere/parent : p",
    ]


def test_templated_notify_is_left_to_run_time_and_a_literal_unknown_one_refused(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    site = _write(
        tmp_path,
        {
            "site.yml": "- hosts: all\n  tasks:\n"
            '    - debug: msg=hi\n      notify: "{{ which }}"\n'
            "    - debug: msg=hi\n      notify: nobody\n"
            "  handlers:\n    - name: somebody\n      debug: msg=x\n",
        },
    )
    errors = validate_playbook(site, catalog)
    assert [e.message for e in errors] == ["notify names no handler of this play: 'nobody'"]


def test_a_templated_handler_name_leaves_every_notify_to_run_time(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    site = _write(
        tmp_path,
        {
            "site.yml": "- hosts: all\n  tasks:\n"
            "    - debug: msg=hi\n      notify: handler for myvar\n"
            '  handlers:\n    - name: "handler for {{ v }}"\n      debug: msg=x\n',
        },
    )
    assert validate_playbook(site, catalog) == []


def test_handlers_of_one_name_keep_the_first_of_the_play_and_every_listener(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    # ansible-core 2.19 searches one source's handlers first to first-found; a listener stays
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  tasks: []\n  handlers:\n"
            "    - name: h\n      debug: msg=first\n"
            "    - name: h\n      debug: msg=second\n"
            "    - name: h\n      debug: msg=third\n      listen: topic\n",
        },
    )
    assert [h.args["msg"] for h in playbook.plays[0].handlers] == ["first", "third"]


def test_handler_search_order_is_sources_last_to_first_each_in_order() -> None:
    def handler(name: str, role: str | None) -> Step:
        info = None if role is None else RoleInfo(name=role, path=f"/roles/{role}")
        return Step(kind=StepKind.DEBUG, name=name, role=info)

    handlers = [handler("a", "r1"), handler("b", "r1"), handler("c", None), handler("d", None)]
    handlers.append(handler("e", "r2"))
    assert handler_search_order(handlers) == [4, 2, 3, 0, 1]


def test_import_playbook_when_tags_and_vars_go_onto_the_imported_plays(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- import_playbook: other.yml\n  when: go\n  tags: [t]\n  vars: {a: 1}\n",
            "other.yml": "- hosts: all\n  vars: {a: 0, b: 2}\n  tasks:\n"
            "    - debug: msg=x\n      when: also\n",
        },
    )
    (play,) = playbook.plays
    assert dict(play.vars) == {"a": 1, "b": 2}
    assert play.tags == frozenset({"t"})
    assert play.tasks[0].when == ("go", "also")


def test_import_tasks_keywords_and_include_apply_go_onto_the_steps(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  tasks:\n"
            "    - import_tasks: t.yml\n      check_mode: true\n      become: true\n"
            "    - include_tasks:\n        file: t.yml\n        apply:\n"
            "          tags: [x]\n          no_log: true\n"
            "    - action: include_tasks t.yml\n",
            "t.yml": "- block:\n    - name: inner\n      shell: 'true'\n"
            "- name: own\n  shell: 'true'\n  check_mode: false\n",
        },
    )
    imported_block, own, include, old_form = playbook.plays[0].tasks
    assert imported_block.block[0].check_mode is True and imported_block.block[0].become
    assert own.check_mode is False  # the step's own keyword wins
    assert all(s.tags == frozenset({"x"}) and s.no_log for s in include.args["steps"])
    assert old_form.kind is StepKind.INCLUDE_TASKS and old_form.args["file"] == "t.yml"


def test_an_imports_keywords_reach_the_steps_of_an_include_inside_it(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    playbook = _load(
        tmp_path,
        catalog,
        {
            "site.yml": "- hosts: all\n  tasks:\n"
            "    - import_tasks: outer.yml\n      check_mode: true\n",
            "outer.yml": "- include_tasks: inner.yml\n",
            "inner.yml": "- name: deep\n  shell: 'true'\n",
        },
    )
    (include,) = playbook.plays[0].tasks
    assert [s.check_mode for s in include.args["steps"]] == [True]
