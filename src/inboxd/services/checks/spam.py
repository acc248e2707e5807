"""The spam score: the raw message and its envelope given to a real rspamd over its HTTP API.

`POST {INBOXD_RSPAMD_URL}/checkv2` (rspamd's normal worker, or its controller) with the envelope in
rspamd's request headers (`IP`, `Helo`, `From`, one `Rcpt` per recipient); rspamd answers its score,
the score at which it would reject (`required_score`), its action and every symbol that fired with
its score and description. Without the setting nothing is asked and the part says it is not
configured: inboxd never makes a score up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
import msgspec
from multidict import CIMultiDict

from inboxd.config import Settings

# rspamd's actions, mildest first; "no action" is the only one that lets mail through untouched.
REJECT = "reject"
FLAGGED = frozenset({"add header", "rewrite subject", "soft reject", "greylist"})


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

    @property
    def configured(self) -> bool:
        return bool(self._url)

    async def check(self, raw: bytes, envelope: Envelope) -> SpamResult:
        """Ask rspamd; never raises for rspamd's fault, the result's `error` says it."""
        assert self.configured, "INBOXD_RSPAMD_URL is not set"
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
                body = await response.read()
                if response.status != 200:
                    return SpamResult(error=f"rspamd answered HTTP {response.status}")
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return SpamResult(error=f"rspamd unreachable: {str(exc).strip() or type(exc).__name__}"[:300])
        try:
            answer = _decode(body)
        except msgspec.ValidationError as exc:
            return SpamResult(error=f"rspamd answered something else than a check: {exc}"[:300])
        symbols = sorted(
            (Symbol(s.name or name, s.score, s.description) for name, s in answer.symbols.items()),
            key=lambda s: (-abs(s.score), s.name),
        )
        return SpamResult(score=answer.score, required=answer.required_score, action=answer.action, symbols=symbols)
