"""Ansible's `ansible.builtin` modules, run natively over fleetfix's transport.

`spec.py` and `specs.py` say what each module accepts (pure data, read by the playbook loader);
`registry.py` maps each to the coroutine that runs it on a host (engine side). Modules that
only read (stat, slurp, pause) run in --check; wait_for is skipped there, as Ansible's (it has
no check mode); the others report what they would change there. A module that takes a node
out of service (reboot) or changes a unit (systemd, service) runs through fleetfix's own
action, so every engine gate holds for it (docs/modules.md).
"""
