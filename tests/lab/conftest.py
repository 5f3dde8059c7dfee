"""Lab test fixtures: the real /dev/shm is checked untouched across the whole session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.lab.support import dev_shm_listing


@pytest.fixture(scope="session", autouse=True)
def real_dev_shm_untouched() -> Iterator[None]:
    """Nothing the lab does may delete or change a file in the machine's real /dev/shm, and
    no lab file (stale NCCL segment, test marker) may appear there."""
    before = dev_shm_listing()
    yield
    after = dev_shm_listing()
    changed = {name for name, meta in before.items() if after.get(name) != meta}
    assert not changed, f"real /dev/shm entries deleted or modified: {sorted(changed)}"
    leaked = {name for name in after if name.startswith(("nccl-", "fleetfix-lab"))} - set(before)
    assert not leaked, f"lab files leaked into the real /dev/shm: {sorted(leaked)}"
