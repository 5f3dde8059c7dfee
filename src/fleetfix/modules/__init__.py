"""Ansible's `ansible.builtin` modules, run natively over fleetfix's transport.

`spec.py` and `specs.py` say what each module accepts (pure data, read by the playbook loader);
`registry.py` maps each to the coroutine that runs it on a host (engine side). Modules that
only read (stat, slurp, wait_for, pause) run in --check; the others report what they would
change there. A module that takes a node out of service (reboot) runs through fleetfix's own
action, so every engine gate holds for it (docs/modules.md).
"""
