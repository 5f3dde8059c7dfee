"""A transport that routes each host to the transport its vars ask for (ssh, local, ...)."""

from __future__ import annotations

from collections.abc import Callable

from fleetfix.transport.base import Connection, ConnectionSpec, Transport

TransportFactory = Callable[[str], Transport]


class RoutingTransport:
    """Opens each host through `spec.extra['connection']`, else the default transport;
    transports are created on first use and closed together."""

    name = "routing"

    def __init__(self, default: str, factory: TransportFactory) -> None:
        self._default = default
        self._factory = factory
        self._transports: dict[str, Transport] = {}

    def _for(self, spec: ConnectionSpec) -> Transport:
        name = spec.extra.get("connection", self._default)
        if name not in self._transports:
            self._transports[name] = self._factory(name)
        return self._transports[name]

    async def connect(self, spec: ConnectionSpec) -> Connection:
        return await self._for(spec).connect(spec)

    async def aclose(self) -> None:
        for transport in self._transports.values():
            await transport.aclose()
        self._transports.clear()
