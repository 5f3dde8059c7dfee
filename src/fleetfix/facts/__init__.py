"""Ansible's facts gathering: one shell command per host (script.py), parsed on the controller
(parse.py), selected by gather_subset and filter (subsets.py), run as the play's "Gathering
Facts" step or the setup / gather_facts modules (step.py)."""
