"""`--webhook` values and delivery: one POST, retries on connection errors and 5xx, never on
4xx, a bounded wait; the URL (a secret) in no message."""

from __future__ import annotations

import base64
import json
import time

import pytest

from fleetfix.notify import DeliveryPolicy, Format, Webhook, WebhookError, parse_webhook
from fleetfix.notify.webhook import DeliveryFailed, deliver
from tests.support import free_port
from tests.support.webhook_receiver import DROP, HANG, Receiver

SECRET = "T0000/B0000/XXXXsecretXXXX"
QUICK = DeliveryPolicy(timeout=2.0, retries=2, backoff=0.01)
BODY = json.dumps({"fleetfix": 1, "kind": "run_finished"}).encode()


@pytest.mark.parametrize(
    ("text", "form", "url"),
    [
        (f"https://hooks.slack.com/services/{SECRET}", Format.JSON, None),
        (f"slack:https://hooks.slack.com/services/{SECRET}", Format.SLACK, None),
        ("json:http://127.0.0.1:8080/hook?token=abc", Format.JSON, None),
        ("slack:env:TEAM_SLACK", Format.SLACK, f"https://hooks.slack.com/services/{SECRET}"),
    ],
)
def test_a_webhook_names_its_format_and_url(text: str, form: Format, url: str | None) -> None:
    environ = {"TEAM_SLACK": f"https://hooks.slack.com/services/{SECRET}"}
    webhook = parse_webhook(text, environ)
    assert webhook.form is form
    assert webhook.url == (url or text.removeprefix(f"{form}:"))


@pytest.mark.parametrize(
    "text",
    [
        f"teams:https://example.com/{SECRET}",
        f"hooks.slack.com/services/{SECRET}",
        f"slack:ftp://hooks.slack.com/{SECRET}",
        f"slack:https:///{SECRET}",
        f"json:https://hooks.slack.com:99999/{SECRET}",
        "slack:env:NOT_SET_ANYWHERE",
        "",
    ],
)
def test_a_bad_webhook_is_refused_without_repeating_it(text: str) -> None:
    with pytest.raises(WebhookError) as caught:
        parse_webhook(text, {})
    assert SECRET not in str(caught.value)
    assert "hooks.slack.com" not in str(caught.value)


def test_only_scheme_and_host_are_ever_shown() -> None:
    webhook = Webhook(f"https://user:pass@hooks.slack.com:8443/services/{SECRET}?x=1")
    assert webhook.where == "https://hooks.slack.com:8443"
    assert SECRET not in repr(webhook) and "pass" not in repr(webhook)


async def test_a_notification_is_one_json_post(receiver: Receiver) -> None:
    url = receiver.url(f"/services/{SECRET}?token=t1").replace("://", "://bot:pw%21@")
    await deliver(Webhook(url), BODY, QUICK)
    [request] = receiver.requests
    assert request.path == f"/services/{SECRET}?token=t1"
    assert request.json() == json.loads(BODY)
    assert request.headers["content-type"].startswith("application/json")
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"bot:pw!").decode()
    assert request.headers["host"] == f"127.0.0.1:{receiver.port}"


async def test_a_5xx_is_retried_until_it_passes(receiver: Receiver) -> None:
    receiver.script(503, 502)
    await deliver(Webhook(receiver.url()), BODY, QUICK)
    assert len(receiver.requests) == 3


async def test_a_5xx_is_retried_twice_then_given_up(receiver: Receiver) -> None:
    receiver.script(500, 500, 500, 200)
    with pytest.raises(DeliveryFailed, match=r"HTTP 500: no_service \(after 3 attempts\)"):
        await deliver(Webhook(receiver.url()), BODY, QUICK)
    assert len(receiver.requests) == 3


@pytest.mark.parametrize("status", [400, 403, 404, 410, 429])
async def test_a_4xx_is_never_retried(receiver: Receiver, status: int) -> None:
    receiver.script(status)
    with pytest.raises(DeliveryFailed, match=f"^HTTP {status}: no_service$"):
        await deliver(Webhook(receiver.url()), BODY, QUICK)
    assert len(receiver.requests) == 1


async def test_a_dropped_connection_is_retried(receiver: Receiver) -> None:
    receiver.script(DROP)
    await deliver(Webhook(receiver.url()), BODY, QUICK)
    assert len(receiver.requests) == 2


async def test_a_refused_connection_is_retried_then_given_up() -> None:
    url = f"http://127.0.0.1:{free_port()}/services/{SECRET}"
    with pytest.raises(DeliveryFailed, match=r"after 3 attempts") as caught:
        await deliver(Webhook(url), BODY, QUICK)
    assert SECRET not in str(caught.value)


async def test_a_server_that_never_answers_times_out(receiver: Receiver) -> None:
    receiver.script(HANG, HANG)
    policy = DeliveryPolicy(timeout=0.3, retries=1, backoff=0.01)
    started = time.monotonic()
    with pytest.raises(DeliveryFailed, match=r"^timed out \(after 2 attempts\)$"):
        await deliver(Webhook(receiver.url()), BODY, policy)
    assert time.monotonic() - started < 3.0
    assert len(receiver.requests) == 2
