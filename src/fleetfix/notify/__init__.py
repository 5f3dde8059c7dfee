"""Webhook notifications of a run: RMAs, holds, repair-budget refusals and the run's end.

kinds.py     the kinds a team can ask for (`--notify-on`)
model.py     the notification values (no JSON, no HTTP)
evidence.py  what each node showed and what was tried on it; the RMA verdict and ticket
render.py    a notification as fleetfix's versioned JSON or a Slack incoming-webhook message
webhook.py   `--webhook` targets (the URL is a secret) and bounded, retried delivery
observer.py  Notifier: the RunObserver that decides, queues and delivers in the background

docs/notifications.md describes the payloads and the delivery guarantees.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetfix.notify.kinds import ALL_KINDS, Kind
    from fleetfix.notify.observer import Notifier
    from fleetfix.notify.render import Format
    from fleetfix.notify.webhook import DeliveryPolicy, Webhook, WebhookError, parse_webhook

_HOMES = {
    "ALL_KINDS": "kinds",
    "Kind": "kinds",
    "Notifier": "observer",
    "Format": "render",
    "DeliveryPolicy": "webhook",
    "Webhook": "webhook",
    "WebhookError": "webhook",
    "parse_webhook": "webhook",
}


def __getattr__(name: str) -> Any:
    """The public names load with their module on first use (PEP 562): `fleetfix run` reads
    `--notify-on` at every start, and the Notifier (the probes' parsers, the remedies) is
    needed only when a webhook is given."""
    if name not in _HOMES:
        raise AttributeError(f"module 'fleetfix.notify' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fleetfix.notify.{_HOMES[name]}"), name)


__all__ = [
    "ALL_KINDS",
    "DeliveryPolicy",
    "Format",
    "Kind",
    "Notifier",
    "Webhook",
    "WebhookError",
    "parse_webhook",
]
