"""Webhook targets and delivery: one JSON POST over asyncio streams, bounded, retried.

A webhook URL is a secret (a Slack incoming-webhook URL is the credential itself): it is never
printed, logged or put in an error; messages show `Webhook.where` (scheme://host[:port]).

Delivery: a request has `timeout` seconds (connect, send, read the status line); a connection
error, a timeout or a 5xx is retried `retries` times after `backoff`, then twice that; a 4xx
(or any other status) is final. No proxy support: the controller must reach the URL.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from fleetfix import __version__
from fleetfix.notify.render import Format

ENV_PREFIX = "env:"
"""`--webhook slack:env:NAME`: the URL is in $NAME (kept out of argv, `ps` and the journal)."""
SCHEMES = {"http": 80, "https": 443}
DETAIL_BYTES = 200
"""How much of an error response's body a warning quotes."""


class WebhookError(ValueError):
    """A `--webhook` value that is not usable; the message never contains the URL."""


class DeliveryFailed(Exception):
    """A notification that did not arrive; the message never contains the URL."""


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


async def deliver(webhook: Webhook, body: bytes, policy: DeliveryPolicy) -> None:
    """POST `body` (JSON) to the webhook, retrying what may pass on a second try.

    Raises:
        DeliveryFailed: it did not arrive; says why and after how many attempts.
    """
    last = ""
    attempts = policy.retries + 1
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(policy.backoff * 2 ** (attempt - 1))
        try:
            async with asyncio.timeout(policy.timeout):
                status, detail = await post_once(webhook.url, body)
        except ssl.SSLCertVerificationError as exc:
            raise DeliveryFailed(f"TLS certificate not trusted: {exc.verify_message}") from exc
        except (OSError, TimeoutError, BadResponse) as exc:
            last = _why(exc)
            continue
        if 200 <= status < 300:
            return
        if status < 500:
            raise DeliveryFailed(f"HTTP {status}{detail}")
        last = f"HTTP {status}{detail}"
    raise DeliveryFailed(f"{last} (after {attempts} attempts)")


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    return str(exc) or type(exc).__name__


class BadResponse(Exception):
    """The server answered something that is not HTTP (or closed before the status line)."""


async def post_once(url: str, body: bytes) -> tuple[int, str]:
    """One HTTP/1.1 POST; the status and a quoted bit of an error response's body."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    tls = ssl.create_default_context() if scheme == "https" else None
    reader, writer = await asyncio.open_connection(
        host, parts.port or SCHEMES[scheme], ssl=tls, server_hostname=host if tls else None
    )
    try:
        writer.write(_request(url, body))
        await writer.drain()
        status = _status(await reader.readline())
        detail = await _detail(reader) if status >= 300 else ""
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
    return status, detail


def _request(url: str, body: bytes) -> bytes:
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
