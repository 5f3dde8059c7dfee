"""Webhook notifications of a run: RMAs, holds, repair-budget refusals and the run's end.

model.py     the notification values (no JSON, no HTTP)
evidence.py  what each node showed and what was tried on it; the RMA verdict and ticket
render.py    a notification as fleetfix's versioned JSON or a Slack incoming-webhook message
webhook.py   `--webhook` targets (the URL is a secret) and bounded, retried delivery
observer.py  Notifier: the RunObserver that decides, queues and delivers in the background

docs/notifications.md describes the payloads and the delivery guarantees.
"""

from fleetfix.notify.model import ALL_KINDS, Kind
from fleetfix.notify.observer import Notifier
from fleetfix.notify.render import Format
from fleetfix.notify.webhook import DeliveryPolicy, Webhook, WebhookError, parse_webhook

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
