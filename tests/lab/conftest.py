"""Lab tests share the suite-wide check (tests/conftest.py) that the real /dev/shm and kernel
modules are untouched; nothing lab-specific is needed here."""
