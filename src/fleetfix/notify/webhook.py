"""Webhook targets and delivery: one JSON POST over asyncio streams, bounded, retried.

A webhook URL is a secret (a Slack incoming-webhook URL is the credential itself): it is never
printed, logged or put in an error; messages show `Webhook.where` (scheme://host[:port]).

Delivery: a request has `timeout` seconds (connect, send, read the status line); a connection
error, a timeout or a 5xx is retried `retries` times after `backoff`, then twice that; a 4xx
(or any other status) is final. No proxy support: the controller must reach the URL.

Every request carries the notification's idempotency key (`Idempotency-Key`), the same on each
retry: a request that timed out after it was sent may have been received, and its retry lets
the receiver drop the second copy. A failure says which it was: `not delivered` (nothing
reached the receiver, or it refused: a 4xx, a connection refused) or `not confirmed` (a request
went out and no answer came back: it may have been received).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from fleetfix import __version__
from fleetfix.notify.render import Format

ENV_PREFIX = "env:"
"""`--webhook slack:env:NAME`: the URL is in $NAME (kept out of argv, `ps` and the journal)."""
SCHEMES = {"http": 80, "https": 443}
DETAIL_BYTES = 200
"""How much of an error response's body a warning quotes."""
KEY_HEADER = "Idempotency-Key"

Deadline = Callable[[], float | None]
"""When (the event loop's clock) this delivery must stop trying; None: no limit but its own."""


class WebhookError(ValueError):
    """A `--webhook` value that is not usable; the message never contains the URL."""


class DeliveryFailed(Exception):
    """A notification that did not arrive, or whose arrival is not known; the message never
    contains the URL."""

    def __init__(self, reason: str, *, attempts: int = 1, maybe_received: bool = False) -> None:
        times = f" (after {attempts} attempts)" if attempts > 1 else ""
        super().__init__(reason + times)
        self.reason = reason
        self.attempts = attempts
        self.maybe_received = maybe_received
        """A request went out whole and no answer said whether it was taken."""

    @property
    def verdict(self) -> str:
        """What a warning says: `not confirmed (timed out, 3 attempts; may have been
        received)` or `not delivered (HTTP 404: no_service)`."""
        times = f", {self.attempts} attempts" if self.attempts > 1 else ""
        if self.maybe_received:
            return f"not confirmed ({self.reason}{times}; may have been received)"
        return f"not delivered ({self.reason}{times})"


@dataclass(slots=True)
class Sending:
    """One notification's delivery as it goes."""

    key: str
    """Its idempotency key: the same on every request for it, to every webhook."""
    unanswered: int = 0
    """Requests that went out whole and got no status line back: each may have been taken."""


@dataclass(frozen=True, slots=True)
class Webhook:
    """Where notifications go and in which body format."""

    url: str = field(repr=False)
    form: Format = Format.JSON

    @property
    def where(self) -> str:
        """scheme://host[:port]: what may be printed about this webhook."""
        parts = urlsplit(self.url)
        host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
        port = f":{parts.port}" if parts.port else ""
        return f"{parts.scheme}://{host}{port}"


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    timeout: float = 5.0
    retries: int = 2
    backoff: float = 0.5


def parse_webhook(text: str, environ: Mapping[str, str]) -> Webhook:
    """`[json:|slack:]URL`, where URL is http(s)://... or env:NAME.

    Raises:
        WebhookError: an unknown format, a variable not set, not an http(s) URL with a host.
    """
    prefix, _, rest = text.partition(":")
    if prefix in tuple(Format):
        form, url = Format(prefix), rest
    elif prefix.lower() in SCHEMES:
        form, url = Format.JSON, text
    else:
        raise WebhookError(
            "expected [json:|slack:]URL with an http:// or https:// URL (or env:NAME);"
            " formats: json, slack"
        )
    if url.startswith(ENV_PREFIX):
        name = url.removeprefix(ENV_PREFIX)
        url = environ.get(name, "").strip()
        if not url:
            raise WebhookError(f"environment variable {name!r} is not set or empty")
    _check_url(url)
    return Webhook(url, form)


def _check_url(url: str) -> None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a bad port or a bad IPv6 literal; the text may hold the URL
        raise WebhookError("not a valid URL (bad port or host)") from exc
    if parts.scheme.lower() not in SCHEMES or not parts.hostname:
        raise WebhookError("the URL must be http:// or https:// with a host name")
    if port == 0:
        raise WebhookError("the URL's port must not be 0")


async def deliver(
    webhook: Webhook,
    body: bytes,
    policy: DeliveryPolicy,
    sending: Sending | None = None,
    deadline: Deadline = lambda: None,
) -> None:
    """POST `body` (JSON) to the webhook, retrying what may pass on a second try, each request
    with `sending.key` as its idempotency key; no request starts after `deadline()`, and none
    runs past it.

    Raises:
        DeliveryFailed: it did not arrive, or may have and was not confirmed; says why and
            after how many attempts.
    """
    sending = sending or Sending(key="")
    last = ""
    made = 0
    for attempt in range(policy.retries + 1):
        if attempt:
            await asyncio.sleep(_pause(policy.backoff * 2 ** (attempt - 1), deadline))
        allowed = _allowed(policy.timeout, deadline)
        if allowed <= 0:
            break
        made += 1
        try:
            async with asyncio.timeout(allowed):
                status, detail = await post_once(webhook.url, body, sending)
        except ssl.SSLCertVerificationError as exc:
            last = f"TLS certificate not trusted: {exc.verify_message}"
            break
        except (OSError, TimeoutError, BadResponse) as exc:
            last = _why(exc)
            continue
        if 200 <= status < 300:
            return
        last = f"HTTP {status}{detail}"
        if status < 500:
            break
    if not made:
        raise DeliveryFailed("not sent: no time was left before the deadline", attempts=0)
    raise DeliveryFailed(last, attempts=made, maybe_received=sending.unanswered > 0)


def _allowed(timeout: float, deadline: Deadline) -> float:
    """A request's time: its timeout, or less when the deadline comes first."""
    ends = deadline()
    if ends is None:
        return timeout
    return min(timeout, ends - asyncio.get_running_loop().time())


def _pause(seconds: float, deadline: Deadline) -> float:
    ends = deadline()
    if ends is None:
        return seconds
    return max(0.0, min(seconds, ends - asyncio.get_running_loop().time()))


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class BadResponse(Exception):
    """The server answered something that is not HTTP (or closed before the status line)."""


async def post_once(url: str, body: bytes, sending: Sending) -> tuple[int, str]:
    """One HTTP/1.1 POST; the status and a quoted bit of an error response's body. Marks
    it in `sending.unanswered` from when the whole request went out until its status line
    came back (between the two it may have been received)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    tls = ssl.create_default_context() if scheme == "https" else None
    reader, writer = await asyncio.open_connection(
        host, parts.port or SCHEMES[scheme], ssl=tls, server_hostname=host if tls else None
    )
    try:
        writer.write(_request(url, body, sending.key))
        await writer.drain()
        sending.unanswered += 1
        status = _status(await reader.readline())
        sending.unanswered -= 1
        detail = await _detail(reader) if status >= 300 else ""
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    return status, detail


def _request(url: str, body: bytes, key: str) -> bytes:
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host = parts.netloc.rpartition("@")[2]
    headers = [
        f"POST {target} HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json; charset=utf-8",
        f"Content-Length: {len(body)}",
        f"User-Agent: fleetfix/{__version__}",
        "Connection: close",
    ]
    if key:
        headers.append(f"{KEY_HEADER}: {key}")
    if parts.username is not None:
        user = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        headers.append(f"Authorization: Basic {base64.b64encode(user.encode()).decode()}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


def _status(line: bytes) -> int:
    fields = line.split(None, 2)
    if len(fields) < 2 or not fields[0].startswith(b"HTTP/") or not fields[1].isdigit():
        raise BadResponse("no HTTP status line in the answer" if line else "connection closed")
    return int(fields[1])


async def _detail(reader: asyncio.StreamReader) -> str:
    """The start of an error response's body (Slack says why: `invalid_payload`, ...)."""
    headers: dict[str, str] = {}
    while line := (await reader.readline()).strip():
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip().lower()
    if headers.get("content-length") == "0":
        return ""
    if headers.get("transfer-encoding") == "chunked":
        await reader.readline()  # the first chunk's size
    text = (await reader.read(DETAIL_BYTES)).decode("utf-8", "replace")
    words = " ".join(text.split())
    return f": {words}" if words else ""
