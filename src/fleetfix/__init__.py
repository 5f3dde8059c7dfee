"""fleetfix: Ansible-style fleet remediation orchestrator for GPU clusters."""

__all__ = ["__version__"]

__version__ = "0.1.0"
