"""The spam score: the raw message and its envelope given to a real rspamd over its HTTP API.

`POST {INBOXD_RSPAMD_URL}/checkv2` (rspamd's normal worker, or its controller) with the envelope in
rspamd's request headers (`IP`, `Helo`, `From`, one `Rcpt` per recipient); rspamd answers its score,
the score at which it would reject (`required_score`), its action and every symbol that fired with
its score and description. Without the setting nothing is asked and the part says it is not
configured: inboxd never makes a score up.

Whatever rspamd answers is the spam part's result: an HTTP error, a body that is not JSON, JSON of
another shape, a cut or oversized answer each come back as `SpamResult.error` (the part's
`spam_check_failed`), never as an exception. One user's checks hold at most `_PER_USER` of the
`_TOTAL` requests in flight to rspamd (`gate.UserGate`), so a user whose mail makes rspamd slow
never makes another user's score wait; each request ends within `INBOXD_RSPAMD_TIMEOUT`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import msgspec
from multidict import CIMultiDict

from inboxd.config import Settings
from inboxd.services.checks.gate import UserGate

# rspamd's actions, mildest first; "no action" is the only one that lets mail through untouched.
REJECT = "reject"
FLAGGED = frozenset({"add header", "rewrite subject", "soft reject", "greylist"})
# rspamd's answer to one message is a few KB; anything far beyond it is not a check.
_MAX_ANSWER = 1024 * 1024
# Requests to rspamd in flight: per user, and for the server (rspamd is local and quick; these
# only stop one user's flood from filling its queue).
_PER_USER = 2
_TOTAL = 8


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str
    score: float
    description: str


@dataclass(frozen=True, slots=True)
class SpamResult:
    """rspamd's answer; `error` says why there is none (rspamd unreachable or answering nonsense)."""

    score: float | None = None
    required: float | None = None
    action: str | None = None
    symbols: list[Symbol] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Envelope:
    """What the SMTP session knew; every field optional (a local file has none)."""

    client_ip: str | None = None
    helo: str | None = None
    mail_from: str | None = None
    recipients: Sequence[str] = ()


class _Symbol(msgspec.Struct):
    name: str
    score: float = 0.0
    description: str = ""


class _Answer(msgspec.Struct):
    score: float
    required_score: float
    action: str
    symbols: dict[str, _Symbol] = msgspec.field(default_factory=dict)


_decode = msgspec.json.Decoder(_Answer).decode


class SpamChecker:
    def __init__(self, settings: Settings) -> None:
        self._url = settings.rspamd_url.rstrip("/")
        self._password = settings.rspamd_password
        self._timeout = settings.rspamd_timeout
        self._gate = UserGate(per_user=_PER_USER, total=_TOTAL)

    @property
    def configured(self) -> bool:
        return bool(self._url)

    async def check(self, raw: bytes, envelope: Envelope, *, user_key: str | None = None) -> SpamResult:
        """Ask rspamd in one of `user_key`'s slots (without a user, in one of the server's alone);
        never raises for rspamd's fault, the result's `error` says it."""
        assert self.configured, "INBOXD_RSPAMD_URL is not set"
        async with self._gate.slot(user_key):
            body = await self._ask(raw, envelope)
        if isinstance(body, SpamResult):
            return body
        return _result_of(body)

    async def _ask(self, raw: bytes, envelope: Envelope) -> bytes | SpamResult:
        headers: CIMultiDict[str] = CIMultiDict()
        if envelope.client_ip:
            headers["IP"] = envelope.client_ip
        if envelope.helo:
            headers["Helo"] = envelope.helo
        if envelope.mail_from is not None:
            headers["From"] = envelope.mail_from or "<>"
        for rcpt in envelope.recipients:
            headers.add("Rcpt", rcpt)
        if self._password:
            headers["Password"] = self._password
        try:
            # One session per check: checks are rare (on request, then kept), and rspamd is local.
            timeout = aiohttp.ClientTimeout(total=self._timeout)
            async with (
                aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
                session.post(f"{self._url}/checkv2", data=raw, headers=headers) as response,
            ):
                if response.status != 200:
                    return SpamResult(error=f"rspamd answered HTTP {response.status}")
                return await _read_capped(response)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            return SpamResult(error=f"rspamd unreachable: {str(exc).strip() or type(exc).__name__}"[:300])


async def _read_capped(response: aiohttp.ClientResponse) -> bytes | SpamResult:
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.content.iter_chunked(65536):
            size += len(chunk)
            if size > _MAX_ANSWER:
                return SpamResult(error=f"rspamd's answer is over {_MAX_ANSWER} bytes, not a check")
            chunks.append(chunk)
    except aiohttp.ClientPayloadError as exc:  # cut short: fewer bytes than announced
        return SpamResult(error=f"rspamd's answer was cut: {str(exc).strip() or type(exc).__name__}"[:300])
    return b"".join(chunks)


def _result_of(body: bytes) -> SpamResult:
    try:
        answer = _decode(body)
    except msgspec.DecodeError as exc:  # not JSON, cut JSON, or JSON of another shape (ValidationError)
        return SpamResult(error=f"rspamd answered something else than a check: {exc}"[:300])
    symbols = sorted(
        (Symbol(s.name or name, s.score, s.description) for name, s in answer.symbols.items()),
        key=lambda s: (-abs(s.score), s.name),
    )
    return SpamResult(score=answer.score, required=answer.required_score, action=answer.action, symbols=symbols)
