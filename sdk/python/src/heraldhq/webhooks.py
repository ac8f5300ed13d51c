"""Standard Webhooks (https://www.standardwebhooks.com) signatures, as herald
signs its outbound webhooks: webhook-id, webhook-timestamp (integer Unix
seconds) and webhook-signature ("v1," + base64 of HMAC-SHA256(key,
id + "." + timestamp + "." + body), space-separated when there are several),
key = the base64-decoded part of the endpoint's "whsec_" secret."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import time
from collections.abc import Iterable, Mapping

SECRET_PREFIX = "whsec_"

_B64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


class WebhookVerificationError(ValueError):
    """A message that does not verify; nothing of it should be trusted."""


def secret_key(secret: str) -> bytes:
    """Decodes a "whsec_" secret into its HMAC key (24 to 64 bytes)."""
    if not secret.startswith(SECRET_PREFIX):
        raise WebhookVerificationError(f"a secret starts with {SECRET_PREFIX}")
    b64 = secret[len(SECRET_PREFIX) :]
    try:
        if not _B64.match(b64):
            raise binascii.Error
        key = base64.b64decode(b64, validate=True)
    except binascii.Error:
        raise WebhookVerificationError("a secret is whsec_ and standard base64") from None
    if not 24 <= len(key) <= 64:
        raise WebhookVerificationError(f"a secret's key is 24 to 64 bytes, not {len(key)}")
    return key


def _bytes(body: bytes | str) -> bytes:
    return body.encode() if isinstance(body, str) else bytes(body)


def sign_webhook(secret: str, msg_id: str, timestamp: int, body: bytes | str) -> str:
    """The webhook-signature value of one message: "v1," and the base64 HMAC."""
    mac = hmac.new(secret_key(secret), f"{msg_id}.{timestamp}.".encode() + _bytes(body), hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode()


def _header(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str) -> str | None:
    items = headers.items() if isinstance(headers, Mapping) else headers
    for k, v in items:
        if k.lower() == name:
            return v
    return None


def verify_webhook(
    secrets: str | Iterable[str],
    headers: Mapping[str, str] | Iterable[tuple[str, str]],
    body: bytes | str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> str:
    """Verifies a received webhook as a Standard Webhooks consumer does: the
    three headers are present, webhook-timestamp is within tolerance seconds
    of now, and one of the v1 signatures matches one of the secrets
    (compared in constant time; pass several while rotating). body must be
    the raw bytes received, not re-encoded JSON. Returns the webhook-id (the
    same on every retry of one event: use it to drop repeats); raises
    WebhookVerificationError otherwise."""
    msg_id = _header(headers, "webhook-id")
    ts = _header(headers, "webhook-timestamp")
    sigs = _header(headers, "webhook-signature")
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    if not (ts.isascii() and ts.isdigit()):
        raise WebhookVerificationError("webhook-timestamp is not integer seconds")
    sec = int(ts)
    now = time.time() if now is None else now
    if abs(now - sec) > tolerance:
        raise WebhookVerificationError(f"webhook-timestamp is {round(now - sec)} s away from now")
    given = [s.encode() for s in sigs.split(" ") if s]
    for secret in [secrets] if isinstance(secrets, str) else secrets:
        try:
            want = sign_webhook(secret, msg_id, sec, body).encode()
        except WebhookVerificationError:
            continue  # an unusable secret among several is passed over
        if any(hmac.compare_digest(g, want) for g in given):
            return msg_id
    raise WebhookVerificationError("no signature matches")
