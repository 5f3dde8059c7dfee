"""wait_for's drained check: active connections on a port, read from /proc/net/tcp and tcp6
as Ansible's Linux check counts them."""

from __future__ import annotations

import pytest

# Imported first: fleetfix.modules.call imported before the engine is a circular import
# (engine/__init__ -> play -> kinds -> modules.registry -> modules.call).
import fleetfix.engine  # noqa: F401
from fleetfix.modules.call import ModuleFailed
from fleetfix.modules.waits import active_connections

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
PROC_NET_TCP = "\n".join(
    [
        HEADER,
        # 127.0.0.1:8080 listening (0A), not a connection
        "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0",
        # 127.0.0.1:8080 <- 127.0.0.1:51000 established (01)
        "   1: 0100007F:1F90 0100007F:C738 01 00000000:00000000 00:00000000 00000000     0",
        # 10.0.0.5:8080 in TIME_WAIT (06)
        "   2: 0500000A:1F90 0200000A:C739 06 00000000:00000000 00:00000000 00000000     0",
        # 127.0.0.1:22, another port
        "   3: 0100007F:0016 0100007F:C73A 01 00000000:00000000 00:00000000 00000000     0",
        HEADER,
        # tcp6: ::ffff:127.0.0.1:8080 established
        "   0: 0000000000000000FFFF00000100007F:1F90 0000000000000000FFFF00000100007F:C73B 01"
        " 00000000:00000000 00:00000000 00000000     0",
        # tcp6: ::1:8080 in FIN_WAIT2 (05)
        "   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C73C 05"
        " 00000000:00000000 00:00000000 00000000     0",
    ]
)


@pytest.mark.parametrize(
    ("host", "count"),
    [("127.0.0.1", 2), ("10.0.0.5", 1), ("::1", 1), ("0.0.0.0", 4), ("::", 4), ("10.9.9.9", 0)],
)
def test_drained_counts_active_connections_on_the_host_and_port(host: str, count: int) -> None:
    assert active_connections(PROC_NET_TCP, 8080, host) == count


def test_another_port_is_drained() -> None:
    assert active_connections(PROC_NET_TCP, 9090, "0.0.0.0") == 0


def test_drained_needs_an_address_not_a_name() -> None:
    with pytest.raises(ModuleFailed, match="needs host as an IP address"):
        active_connections(PROC_NET_TCP, 8080, "localhost")
