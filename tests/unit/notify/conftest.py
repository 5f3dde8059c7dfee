"""A webhook receiver on 127.0.0.1 for every notify test that asks for one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.webhook_receiver import Receiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running
