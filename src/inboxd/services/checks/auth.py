"""The authentication check: SPF, the DKIM signatures, DMARC and the ARC chain of one message,
over the configured resolver (`INBOXD_DNS_NAMESERVERS`, the system's when empty).

- SPF (pyspf) for the client address, HELO and MAIL FROM recorded at reception (RFC 7208: a null
  MAIL FROM is checked as `postmaster@<HELO>`). Mail received before they were recorded, or a
  local file, has no SPF result, and the part says so.
- DKIM (dkimpy): at most `MAX_DKIM_SIGNATURES` signatures, each apart, with its domain, selector,
  algorithm, result and whether the body still matches the signed hash; those whose `d=` aligns
  with the From domain first (they are the ones DMARC needs), then in header order. The others are
  not verified and the part says how many (`dkim_not_checked`). No key published at the selector
  is `permerror`, a DNS failure `temperror`. Each key is asked once per check.
- DMARC: the policy at `_dmarc.<From domain>`, else at its organizational domain, found with the
  Public Suffix List shipped in `publicsuffixlist` (its private section included, so
  `attacker.github.io` and `victim.github.io` are two organizations; nothing is downloaded), and
  the RFC 7489 evaluation: pass when SPF or a DKIM signature passes for a domain aligned with the
  From domain (relaxed or strict as `aspf`/`adkim` say). Several DMARC records at one name are no
  policy (RFC 7489 §6.6.3), said as `dmarc_multiple_records`.
- ARC (dkimpy's ARC verification): the chain's validation (`pass`, `fail`, `none`).
- An `Authentication-Results` header (authres) sums them up, as a receiver would write it.

The message is parsed once (dkimpy's parse, shared by DKIM, ARC and the From domain). The whole
part has one deadline, `DEADLINE_LOOKUPS` lookup timeouts (15 s with `INBOXD_DNS_TIMEOUT=5`):
every lookup is given at most what is left of it, a step not started by then is not run, and the
part answers what it has with an `auth_cut` finding naming what was cut.

dkimpy and pyspf are blocking and do their own lookups: the check runs on the checker's own small
thread pool (`_WORKERS` threads), never on the default one that ingest and password hashing use,
and one user's checks hold at most `_PER_USER` of its threads (`gate.UserGate`), so a user whose
mail points at black-holed domains waits for its own checks only. Both libraries are given a
lookup over our resolver (dkimpy's `dnsfunc`; pyspf's module-level `DNSLookup`, the hook it
offers, which reads the resolver of the running check from a context variable, so checks with
different resolvers never mix).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import ipaddress
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import compat32
from functools import partial
from typing import Any, Literal, TypeVar

import authres
import authres.arc
import authres.dmarc
import dkim
import dns.exception
import dns.nameserver
import dns.resolver
import spf
from dkim.util import parse_tag_value

from inboxd.dns import parse_nameserver
from inboxd.mail.org_domain import organizational_domain
from inboxd.services.checks.gate import UserGate

Severity = Literal["error", "warning", "info"]
# A finding as (severity, code, message, where): the report's `Finding` is made of it by the service.
RawFinding = tuple[Severity, str, str, str]

SPF_RESULTS = ("pass", "fail", "softfail", "neutral", "none", "temperror", "permerror")
# Signatures verified per message: a real message carries one to three (the author's domain, its
# ESP's, a forwarder's); each costs a key lookup and a body hash, so more only lets a sender
# multiply the check's time.
MAX_DKIM_SIGNATURES = 5
# The whole part's deadline, in lookup timeouts (INBOXD_DNS_TIMEOUT).
DEADLINE_LOOKUPS = 3
# The checker's threads, and how many of them one user's checks may hold at once.
_WORKERS = 4
_PER_USER = 1
_CUT = "not checked: the authentication check's deadline passed"

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SpfOutcome:
    result: str
    domain: str = ""
    client_ip: str | None = None
    helo: str | None = None
    mail_from: str | None = None
    explanation: str = ""


@dataclass(frozen=True, slots=True)
class DkimOutcome:
    domain: str
    selector: str
    result: str  # pass|fail|neutral|temperror|permerror
    algorithm: str = ""
    body_hash: str = ""  # pass|fail, "" when it could not be computed
    error: str | None = None


@dataclass(frozen=True, slots=True)
class DmarcOutcome:
    result: str  # pass|fail|none|temperror|permerror
    domain: str = ""
    policy: str | None = None
    spf_aligned: bool | None = None
    dkim_aligned: bool | None = None


@dataclass(frozen=True, slots=True)
class ArcOutcome:
    result: str  # pass|fail|none
    instances: int = 0


@dataclass(frozen=True, slots=True)
class AuthOutcome:
    spf: SpfOutcome | None
    dkim: list[DkimOutcome]
    dmarc: DmarcOutcome
    arc: ArcOutcome
    authentication_results: str
    findings: list[RawFinding] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SignaturesOutcome:
    """DKIM and ARC alone (`AuthChecker.check_signatures_blocking`): SPF and DMARC were not run."""

    dkim: list[DkimOutcome]
    arc: ArcOutcome
    authentication_results: str
    findings: list[RawFinding] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Reception:
    """What the SMTP session recorded; `client_ip` None when it was not recorded."""

    client_ip: str | None
    helo: str | None
    mail_from: str


class _DeadlinePassed(dns.exception.DNSException):
    """The part's deadline passed before this lookup was asked."""


class _Resolver:
    """Blocking TXT/A/AAAA/MX/PTR lookups through the configured nameservers (thread side), each
    given at most what is left of the check's deadline; notes the steps the deadline cut."""

    def __init__(self, *, nameservers: Sequence[str], timeout: float, deadline: float) -> None:
        resolver = dns.resolver.Resolver(configure=not nameservers)
        if nameservers:
            resolver.nameservers = [parse_nameserver(s) for s in nameservers]
        resolver.timeout = timeout
        resolver.lifetime = timeout
        resolver.cache = None
        self._resolver = resolver
        self._timeout = timeout
        self._deadline = deadline  # time.monotonic()
        self._keys: dict[str, bytes | dkim.DnsTimeoutError | None] = {}
        self.step = ""
        self.cut: list[str] = []

    def expired(self) -> bool:
        return time.monotonic() >= self._deadline

    def note_cut(self, step: str) -> None:
        if step and step not in self.cut:
            self.cut.append(step)

    def answer(self, name: str, rdtype: str) -> dns.resolver.Answer | None:
        """The answer, None when the name has none; raises dns.exception.Timeout/NoNameservers,
        or _DeadlinePassed."""
        left = self._deadline - time.monotonic()
        if left <= 0:
            self.note_cut(self.step)
            raise _DeadlinePassed(f"{name}: {_CUT}")  # type: ignore[no-untyped-call]
        try:
            return self._resolver.resolve(name, rdtype, search=False, lifetime=min(self._timeout, left))
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None
        except dns.exception.Timeout:
            if left < self._timeout:  # cut short by the deadline, not by the lookup's own timeout
                self.note_cut(self.step)
            raise

    def txt(self, name: str) -> list[bytes]:
        found = self.answer(name, "TXT")
        return [] if found is None else [b"".join(r.strings) for r in found]

    def dkim_key(self, name: bytes | str, timeout: float = 5) -> bytes | None:
        """dkimpy's `dnsfunc`: the first TXT record at `name`, None when there is none; asked
        once per check (a failure too)."""
        text = name.decode("ascii", "replace") if isinstance(name, bytes) else name
        key = text.lower().rstrip(".")
        if key not in self._keys:
            try:
                records = self.txt(text)
                self._keys[key] = records[0] if records else None
            except dns.exception.DNSException as exc:
                self._keys[key] = dkim.DnsTimeoutError(str(exc))
        found = self._keys[key]
        if isinstance(found, dkim.DnsTimeoutError):
            raise found
        return found


_current: contextvars.ContextVar[_Resolver] = contextvars.ContextVar("inboxd_spf_resolver")


def _spf_lookup(name: str, qtype: str, strict: bool = True, timeout: float = 20) -> list[tuple[Any, Any]]:
    """pyspf's `DNSLookup` over the running check's resolver (same answers as pyspf's own)."""
    resolver = _current.get()
    try:
        found = resolver.answer(name, qtype)
    except dns.exception.DNSException as exc:
        raise spf.TempError(f"DNS {exc}") from exc
    out: list[tuple[Any, Any]] = []
    for rdata in found or ():
        if qtype in ("A", "AAAA"):
            out.append(((name, qtype), rdata.address))
        elif qtype == "MX":
            out.append(((name, qtype), (rdata.preference, rdata.exchange)))
        elif qtype == "PTR":
            out.append(((name, qtype), rdata.target.to_text(True)))
        elif qtype in ("TXT", "SPF"):
            out.append(((name, qtype), rdata.strings))
    return out


spf.DNSLookup = _spf_lookup


@dataclass(frozen=True, slots=True)
class _Parsed:
    """The message parsed once (dkimpy's parse): DKIM verifies from it, ARC reads the same
    headers and body, the From domain comes from its headers. `message` is None when dkimpy
    cannot parse the header block (then no signature can be verified)."""

    message: dkim.DKIM | None
    from_domain: str

    @classmethod
    def of(cls, raw: bytes) -> _Parsed:
        try:
            message = dkim.DKIM(raw)
        except dkim.MessageFormatError:
            headers = BytesHeaderParser(policy=compat32).parsebytes(raw)
            return cls(None, _domain_of([str(v) for v in headers.get_all("From") or []]))
        values = [v.decode("utf-8", "replace").replace("\r\n", "") for n, v in message.headers if n.lower() == b"from"]
        return cls(message, _domain_of(values))

    def has(self, name: bytes) -> bool:
        return self.message is not None and any(n.lower() == name for n, _v in self.message.headers)


class AuthChecker:
    """Owns the thread pool of the checks (opened at the first check), the per-user gate, and
    the Public Suffix List (loaded at the first DMARC evaluation)."""

    def __init__(self, *, nameservers: Sequence[str], timeout: float, authserv_id: str) -> None:
        self._nameservers = list(nameservers)
        self._timeout = timeout
        self._deadline = DEADLINE_LOOKUPS * timeout
        self._authserv_id = authserv_id
        self._pool: ThreadPoolExecutor | None = None
        self._gate = UserGate(per_user=_PER_USER, total=_WORKERS)

    async def check(self, raw: bytes, reception: Reception | None, *, user_key: str | None = None) -> AuthOutcome:
        """The check on the checker's threads, in one of `user_key`'s slots (without a user, in
        one of the server's alone)."""
        async with self._gate.slot(user_key):
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=_WORKERS, thread_name_prefix="inboxd-auth")
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            return await loop.run_in_executor(self._pool, context.run, self.check_blocking, raw, reception)

    async def close(self) -> None:
        """Stop the threads (a check still running ends within its deadline)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _resolver(self) -> _Resolver:
        return _Resolver(
            nameservers=self._nameservers, timeout=self._timeout, deadline=time.monotonic() + self._deadline
        )

    def organizational_domain(self, domain: str) -> str:
        """RFC 7489 §3.2 through the Public Suffix List (mail/org_domain.py)."""
        return organizational_domain(domain)

    def check_blocking(self, raw: bytes, reception: Reception | None) -> AuthOutcome:
        resolver = self._resolver()
        parsed = _Parsed.of(raw)
        spf_result = None
        if reception is not None and _is_ip(reception.client_ip):
            cut = SpfOutcome(
                "temperror", "", reception.client_ip, reception.helo, reception.mail_from, explanation=_CUT
            )
            token = _current.set(resolver)
            try:
                spf_result = _step(resolver, "SPF", lambda: _spf(reception), cut)
            finally:
                _current.reset(token)
        org = self.organizational_domain
        signatures, skipped = _dkim(parsed, resolver, org)
        dmarc_cut: tuple[DmarcOutcome, str | None] = (DmarcOutcome(result="temperror", domain=parsed.from_domain), None)
        dmarc_result, several = _step(
            resolver, "DMARC", lambda: _dmarc(parsed.from_domain, spf_result, signatures, resolver, org), dmarc_cut
        )
        arc_result = _arc(parsed, resolver)
        header = _authentication_results(self._authserv_id, spf_result, signatures, dmarc_result, arc_result)
        findings = _findings(spf_result, signatures, dmarc_result, arc_result, recorded=reception is not None)
        if several is not None:  # said instead of "publishes no DMARC policy"
            findings = [f for f in findings if f[1] != "dmarc_missing"]
            findings.append(
                (
                    "warning",
                    "dmarc_multiple_records",
                    f"{several}: RFC 7489 §6.6.3 counts that as no policy; publish one.",
                    parsed.from_domain,
                )
            )
        return AuthOutcome(
            spf=spf_result,
            dkim=signatures,
            dmarc=dmarc_result,
            arc=arc_result,
            authentication_results=header,
            findings=findings + _bound_findings(skipped, resolver.cut, deadline=self._deadline),
        )

    def check_signatures_blocking(self, raw: bytes) -> SignaturesOutcome:
        """DKIM and ARC alone, for a message file (`inboxd check`): they need only DNS. SPF needs
        the client address the message came from, and DMARC SPF's result beside DKIM's, so both
        are reported as not run rather than judged on half the evidence."""
        resolver = self._resolver()
        parsed = _Parsed.of(raw)
        signatures, skipped = _dkim(parsed, resolver, self.organizational_domain)
        arc_result = _arc(parsed, resolver)
        not_run = "SPF and DMARC were not run: they need the address of the client that sent the message."
        findings: list[RawFinding] = [
            ("info", code, not_run, where) if code == "spf_not_checked" else (severity, code, message, where)
            for severity, code, message, where in _findings(None, signatures, None, arc_result, recorded=False)
        ]
        return SignaturesOutcome(
            dkim=signatures,
            arc=arc_result,
            authentication_results=_authentication_results(self._authserv_id, None, signatures, None, arc_result),
            findings=findings + _bound_findings(skipped, resolver.cut, deadline=self._deadline),
        )


def _step(resolver: _Resolver, name: str, run: Callable[[], T], cut: T) -> T:
    """`run()` as the step `name`, or `cut` when the deadline passed before it started."""
    if resolver.expired():
        resolver.note_cut(name)
        return cut
    resolver.step = name
    return run()


def _is_ip(text: str | None) -> bool:
    try:
        ipaddress.ip_address(text or "")
    except ValueError:
        return False
    return True


def _spf(reception: Reception) -> SpfOutcome:
    helo = reception.helo or ""
    sender = reception.mail_from or (f"postmaster@{helo}" if helo else "")
    domain = sender.rpartition("@")[2].lower()
    try:
        result, _code, explanation = spf.query(
            i=reception.client_ip, s=sender, h=helo, timeout=20, querytime=20
        ).check()
    except (spf.PermError, ValueError) as exc:  # a malformed address or HELO
        result, explanation = "permerror", str(exc)
    return SpfOutcome(
        result=str(result) if str(result) in SPF_RESULTS else "permerror",
        domain=domain,
        client_ip=reception.client_ip,
        helo=reception.helo,
        mail_from=reception.mail_from,
        explanation=str(explanation),
    )


def _dkim(parsed: _Parsed, resolver: _Resolver, org: Callable[[str], str]) -> tuple[list[DkimOutcome], list[str]]:
    """The outcomes of at most MAX_DKIM_SIGNATURES signatures (aligned with From first), and the
    `d=` of each signature left unverified."""
    message = parsed.message
    if message is None:
        return [], []
    found: list[tuple[int, int, dict[bytes, bytes] | str]] = []  # (rank, idx, tags or parse error)
    headers = [value for name, value in message.headers if name.lower() == b"dkim-signature"]
    home = org(parsed.from_domain) if parsed.from_domain else ""
    for idx, value in enumerate(headers):
        try:
            tags = parse_tag_value(value)
        except dkim.InvalidTagValueList as exc:
            found.append((2, idx, str(exc)))
            continue
        aligned = bool(home) and org(_text(tags.get(b"d"))) == home
        found.append((0 if aligned else 1, idx, tags))
    found.sort(key=lambda f: (f[0], f[1]))
    outcomes: list[DkimOutcome] = []
    for _rank, idx, tags in found[:MAX_DKIM_SIGNATURES]:
        if isinstance(tags, str):
            outcomes.append(DkimOutcome(domain="", selector="", result="permerror", error=tags))
            continue
        domain, selector, algorithm = _text(tags.get(b"d")), _text(tags.get(b"s")), _text(tags.get(b"a"))
        cut = DkimOutcome(domain, selector, "temperror", algorithm=algorithm, error=_CUT)
        outcomes.append(
            _step(
                resolver,
                f"DKIM d={domain} s={selector}",
                partial(
                    _verify_one, message, idx, domain=domain, selector=selector, algorithm=algorithm, resolver=resolver
                ),
                cut,
            )
        )
    skipped = [tags if isinstance(tags, str) else _text(tags.get(b"d")) for _r, _i, tags in found[MAX_DKIM_SIGNATURES:]]
    return outcomes, skipped


def _verify_one(
    message: dkim.DKIM, idx: int, *, domain: str, selector: str, algorithm: str, resolver: _Resolver
) -> DkimOutcome:
    def outcome(result: str, body_hash: str = "", error: str | None = None) -> DkimOutcome:
        return DkimOutcome(domain, selector, result, algorithm=algorithm, body_hash=body_hash, error=error)

    key_name = f"{selector}._domainkey.{domain}"
    try:
        if resolver.dkim_key(key_name) is None:
            return outcome("permerror", error=f"no key published at {key_name}")
    except dkim.DnsTimeoutError as exc:
        return outcome("temperror", error=f"DNS: {exc}")
    try:
        # The one parse serves every signature: verify reads the headers and body, never changes them.
        valid = message.verify(idx=idx, dnsfunc=resolver.dkim_key)
    except dkim.ValidationError as exc:
        if "body hash mismatch" in str(exc):
            return outcome("fail", "fail", "the body changed after it was signed (body hash mismatch)")
        return outcome("permerror", error=str(exc))
    except dkim.DKIMException as exc:
        return outcome("permerror", error=str(exc))
    if valid:
        return outcome("pass", "pass")
    return outcome("fail", "pass", "the signature does not match the signed headers")


def _text(value: bytes | None) -> str:
    return "" if value is None else value.decode("ascii", "replace").strip().lower()


def _domain_of(values: list[str]) -> str:
    found = email.utils.getaddresses(values)
    addresses = [a for _n, a in found if "@" in a]
    return addresses[0].rpartition("@")[2].lower().rstrip(".") if addresses else ""


def _aligned(domain: str, from_domain: str, mode: str, org: Callable[[str], str]) -> bool:
    if mode == "s":
        return domain == from_domain
    return org(domain) == org(from_domain)


class _Several(Exception):
    """More than one DMARC record at one name: no policy (RFC 7489 §6.6.3)."""

    def __init__(self, name: str, count: int) -> None:
        super().__init__(f"{count} DMARC records are published at _dmarc.{name}")


def _dmarc_record(name: str, resolver: _Resolver) -> dict[str, str] | None:
    records = [r.decode("utf-8", "replace") for r in resolver.txt(f"_dmarc.{name}")]
    policies = [r for r in records if re.match(r"\s*v\s*=\s*DMARC1\s*(;|$)", r, re.IGNORECASE)]
    if len(policies) > 1:
        raise _Several(name, len(policies))
    if not policies:
        return None
    tags = {}
    for part in policies[0].split(";"):
        key, _, value = part.partition("=")
        if key.strip():
            tags[key.strip().lower()] = value.strip()
    return tags


def _dmarc(
    from_domain: str,
    spf_result: SpfOutcome | None,
    signatures: Sequence[DkimOutcome],
    resolver: _Resolver,
    org_of: Callable[[str], str],
) -> tuple[DmarcOutcome, str | None]:
    """The evaluation, and what made it `none` when several records were published."""
    if not from_domain:
        return DmarcOutcome(result="permerror", domain=""), None
    try:
        tags = _dmarc_record(from_domain, resolver)
        org = org_of(from_domain)
        if tags is None and org != from_domain:
            tags = _dmarc_record(org, resolver)
            if tags is not None and "sp" in tags:
                tags["p"] = tags["sp"]
    except dns.exception.DNSException:
        return DmarcOutcome(result="temperror", domain=from_domain), None
    except _Several as several:
        return DmarcOutcome(result="none", domain=from_domain), str(several)
    if tags is None:
        return DmarcOutcome(result="none", domain=from_domain), None
    spf_aligned = (
        spf_result is not None
        and spf_result.result == "pass"
        and _aligned(spf_result.domain, from_domain, tags.get("aspf", "r").lower(), org_of)
    )
    dkim_aligned = any(
        s.result == "pass" and _aligned(s.domain, from_domain, tags.get("adkim", "r").lower(), org_of)
        for s in signatures
    )
    outcome = DmarcOutcome(
        result="pass" if spf_aligned or dkim_aligned else "fail",
        domain=from_domain,
        policy=tags.get("p", "none").lower() or "none",
        spf_aligned=spf_aligned,
        dkim_aligned=dkim_aligned,
    )
    return outcome, None


def _arc(parsed: _Parsed, resolver: _Resolver) -> ArcOutcome:
    if parsed.message is None:
        return ArcOutcome(result="fail")
    if not parsed.has(b"arc-seal"):
        return ArcOutcome(result="none")  # no chain: nothing to look up
    if resolver.expired():
        resolver.note_cut("ARC")
        return ArcOutcome(result="temperror")
    resolver.step = "ARC"
    arc = dkim.ARC()  # given the one parse: ARC verification reads the same headers and body
    arc.headers, arc.body = parsed.message.headers, parsed.message.body
    try:
        cv, results, _reason = arc.verify(dnsfunc=resolver.dkim_key)
    except dkim.DKIMException:
        return ArcOutcome(result="fail")
    result = {dkim.CV_Pass: "pass", dkim.CV_Fail: "fail", dkim.CV_None: "none"}.get(cv, "fail")
    return ArcOutcome(result=result, instances=len(results))


def _bound_findings(skipped: list[str], cut: list[str], *, deadline: float) -> list[RawFinding]:
    """What the bounds left out: signatures past the cap, steps past the deadline."""
    out: list[RawFinding] = []
    if skipped:
        shown = ", ".join(sorted({d or "?" for d in skipped})[:5])
        out.append(
            (
                "info",
                "dkim_not_checked",
                f"{len(skipped)} more DKIM signature(s) not verified (d={shown}): at most "
                f"{MAX_DKIM_SIGNATURES} are, those of the From domain's organization first.",
                "",
            )
        )
    if cut:
        out.append(
            (
                "warning",
                "auth_cut",
                f"The authentication check stopped at its {deadline:g} s deadline ({DEADLINE_LOOKUPS} DNS "
                f"timeouts): {', '.join(cut)} not finished; their results are temperror.",
                "",
            )
        )
    return out


def _authentication_results(
    authserv_id: str,
    spf_result: SpfOutcome | None,
    signatures: Sequence[DkimOutcome],
    dmarc_result: DmarcOutcome | None,
    arc_result: ArcOutcome,
) -> str:
    results: list[Any] = []
    if spf_result is not None:
        results.append(
            authres.SPFAuthenticationResult(
                result=spf_result.result,
                smtp_mailfrom=spf_result.mail_from or None,
                smtp_helo=None if spf_result.mail_from else spf_result.helo,
            )
        )
    for s in signatures:
        results.append(
            authres.DKIMAuthenticationResult(
                result=s.result,
                reason=s.error,
                header_d=s.domain or None,
                header_s=s.selector or None,
                header_a=s.algorithm or None,
            )
        )
    if not signatures:
        results.append(authres.DKIMAuthenticationResult(result="none"))
    if dmarc_result is not None:
        results.append(
            authres.dmarc.DMARCAuthenticationResult(
                result=dmarc_result.result, header_from=dmarc_result.domain or None, policy=dmarc_result.policy
            )
        )
    results.append(authres.arc.ARCAuthenticationResult(result=arc_result.result))
    context = authres.FeatureContext(authres.dmarc, authres.arc)
    return str(context.header(authserv_id=authserv_id, results=results))


def _findings(
    spf_result: SpfOutcome | None,
    signatures: Sequence[DkimOutcome],
    dmarc_result: DmarcOutcome | None,
    arc_result: ArcOutcome,
    *,
    recorded: bool,
) -> list[RawFinding]:
    out: list[RawFinding] = []
    if spf_result is None:
        why = "received before inboxd recorded it" if recorded else "not received over SMTP"
        out.append(("info", "spf_not_checked", f"SPF was not checked: the client address is unknown ({why}).", ""))
    elif spf_result.result == "fail":
        out.append(
            (
                "error",
                "spf_fail",
                f"SPF fails: {spf_result.client_ip} may not send for {spf_result.domain}.",
                spf_result.domain,
            )
        )
    elif spf_result.result in ("softfail", "neutral", "none", "temperror", "permerror"):
        out.append(
            (
                "warning",
                f"spf_{spf_result.result}",
                f"SPF is {spf_result.result} for {spf_result.domain} from {spf_result.client_ip}.",
                spf_result.domain,
            )
        )
    if not signatures:
        out.append(("warning", "dkim_missing", "The message has no DKIM signature.", ""))
    for s in signatures:
        if s.result != "pass":
            where = f"{s.selector}._domainkey.{s.domain}"
            out.append(("error", "dkim_fail", f"DKIM {s.result} for d={s.domain} s={s.selector}: {s.error}.", where))
    if dmarc_result is None:
        pass
    elif dmarc_result.result == "none":
        out.append(
            (
                "warning",
                "dmarc_missing",
                f"{dmarc_result.domain or 'The From domain'} publishes no DMARC policy.",
                dmarc_result.domain,
            )
        )
    elif dmarc_result.result != "pass":
        out.append(
            (
                "error",
                "dmarc_fail",
                f"DMARC {dmarc_result.result} for {dmarc_result.domain} (policy {dmarc_result.policy}).",
                dmarc_result.domain,
            )
        )
    if arc_result.result == "fail":
        out.append(("warning", "arc_fail", "The ARC chain does not validate.", ""))
    return out
