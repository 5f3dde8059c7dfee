"""Tests of fleetfix.inventory; oracle.py runs ansible-core as the reference."""
