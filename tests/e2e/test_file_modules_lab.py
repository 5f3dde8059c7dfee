"""The file modules over real SSH, from the user's side: `fleetfix run` against a lab node
copies, stats and edits files (only under this test's tmp dir, which the node's bash sees),
and the bytes on disk afterwards are the ones asked for; a 300 KiB copy crosses SSH in
chunks (one SSH command is one `sh -c` argument, limited to 128 KiB)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import fleetfix_run, write_inventory
from tests.lab.support import running_lab

pytestmark = pytest.mark.timeout(300)

SCENARIO = """\
name: files
description: one healthy node to write files on
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 1, node_name: "f{:02d}"}
ssh: {port: 0}
"""

PLAYBOOK = """\
- hosts: all
  gather_facts: false
  vars:
    out: "{{ playbook_dir }}/out"
  tasks:
    - name: a directory
      file: {path: "{{ out }}", state: directory, mode: "0750"}
    - name: copy a file
      copy: {src: big.bin, dest: "{{ out }}/big.bin", mode: "0600"}
      register: big
    - name: copy it again
      copy: {src: big.bin, dest: "{{ out }}/big.bin", mode: "0600"}
      register: big_again
    - name: copy content
      copy: {content: "mtu=1500\\n", dest: "{{ out }}/net.conf"}
    - name: stat it
      stat: {path: "{{ out }}/big.bin"}
      register: st
    - name: edit a line
      lineinfile: {path: "{{ out }}/net.conf", regexp: '^mtu=', line: mtu=9000}
      register: edited
    - name: add a line
      lineinfile: {path: "{{ out }}/net.conf", insertbefore: BOF, line: "# managed"}
    - name: as Ansible returns them
      assert:
        that:
          - (big is changed) == (first_run | bool)
          - big_again is not changed
          - big.checksum == big_sha1
          - st.stat.checksum == big_sha1
          - st.stat.size == 300 * 1024
          - st.stat.mode == '0600'
          - st.stat.isreg
          - edited.msg == 'line replaced'
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabHandle, Path]]:
    scenario = tmp_path / "files.yml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    with running_lab(str(scenario), tmp_path / "lab") as handle:
        yield handle, write_inventory(handle, tmp_path / "hosts.ini")


def test_copy_stat_lineinfile_over_ssh(lab: tuple[LabHandle, Path], tmp_path: Path) -> None:
    _, inventory = lab
    work = tmp_path / "play"
    (work / "files").mkdir(parents=True)
    data = os.urandom(300 * 1024)
    (work / "files" / "big.bin").write_bytes(data)
    book = work / "files_play.yml"
    book.write_text(PLAYBOOK, encoding="utf-8")
    sha1 = hashlib.sha1(data).hexdigest()

    done = fleetfix_run(book, inventory, tmp_path, "-e", f"big_sha1={sha1} first_run=true")

    assert done.returncode == 0, done.output
    assert done.recap["f01"]["failed"] == 0, done.output
    assert done.recap["f01"]["changed"] == 5, done.output
    out = work / "out"
    assert (out / "big.bin").read_bytes() == data
    assert (out / "big.bin").stat().st_mode & 0o7777 == 0o600
    assert (out / "net.conf").read_text() == "# managed\nmtu=9000\n"
    assert not [p.name for p in out.iterdir() if "fleetfix" in p.name], "temp files left behind"

    again = fleetfix_run(book, inventory, tmp_path, "-e", f"big_sha1={sha1} first_run=false")
    assert again.returncode == 0, again.output
    # Only the directory and the big copy are as asked already; net.conf is rewritten and
    # edited again.
    assert again.recap["f01"]["changed"] == 3, again.output
    assert (out / "net.conf").read_text() == "# managed\nmtu=9000\n"
