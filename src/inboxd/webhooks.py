"""Webhook signatures: how inboxd signs an `email.received` call, and how a receiver verifies it.

inboxd sends three headers with every webhook POST:

    X-Webhook-ID         the event id (`evt_…`), the same on every retry of one event
    X-Webhook-Timestamp  Unix seconds when this attempt was signed (fresh on every attempt)
    X-Webhook-Signature  "sha256=" + hex HMAC-SHA256(key = secret, msg = timestamp + "." + raw body)

The key is the secret string exactly as shown at creation or rotation, `whsec_` prefix included,
as UTF-8 bytes. A receiver verifies with `verify(...)`, which needs only the standard library:

    from inboxd.webhooks import verify, VerificationError

    try:
        event_id = verify(secret, request.headers, raw_body)   # raw bytes, before any JSON parse
    except VerificationError as exc:
        return 400, str(exc)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

ID_HEADER = "X-Webhook-ID"
TIMESTAMP_HEADER = "X-Webhook-Timestamp"
SIGNATURE_HEADER = "X-Webhook-Signature"
SCHEME = "sha256="
DEFAULT_TOLERANCE = 300


class VerificationError(ValueError):
    """The call is not a valid inboxd webhook call; the message says why (safe to log)."""


def sign(secret: str, timestamp: int | str, body: bytes) -> str:
    """The `X-Webhook-Signature` value for `body` sent at `timestamp` (Unix seconds)."""
    message = str(timestamp).encode("ascii") + b"." + body
    return SCHEME + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if value is None:
        # Plain dicts are case-sensitive; frameworks' header maps usually are not.
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    if value is None:
        raise VerificationError(f"missing header {name}")
    return value


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE,
    *,
    now: float | None = None,
) -> str:
    """Check an inboxd webhook call; return its event id (`X-Webhook-ID`) when it is genuine.

    secret: the webhook's secret, `whsec_…`, exactly as inboxd returned it.
    headers: the request headers (any mapping; names are matched case-insensitively).
    body: the raw request body bytes, exactly as received (verify before parsing the JSON).
    tolerance: seconds the timestamp may differ from now (either way); 0 or less turns the check off.
    now: the current Unix time, for tests; defaults to `time.time()`.

    Raises `VerificationError` when a header is missing or malformed, the timestamp is older
    (or newer) than `tolerance`, or the signature does not match. The signature comparison runs
    in constant time. A receiver should also remember event ids it processed: a retry carries
    the same id with a fresh timestamp and signature.
    """
    raw_timestamp = _header(headers, TIMESTAMP_HEADER).strip()
    if not raw_timestamp.isascii() or not raw_timestamp.isdigit():
        raise VerificationError(f"malformed {TIMESTAMP_HEADER}")
    timestamp = int(raw_timestamp)
    current = time.time() if now is None else now
    if tolerance > 0 and abs(current - timestamp) > tolerance:
        raise VerificationError(f"{TIMESTAMP_HEADER} is outside the tolerance of {tolerance:g} s")
    expected = sign(secret, raw_timestamp, body)
    given = _header(headers, SIGNATURE_HEADER).strip()
    if not hmac.compare_digest(expected.encode("ascii"), given.encode("utf-8", "replace")):
        raise VerificationError("signature mismatch")
    return _header(headers, ID_HEADER).strip()
