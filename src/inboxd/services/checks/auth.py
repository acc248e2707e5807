"""The authentication check: SPF, every DKIM signature, DMARC and the ARC chain of one message,
over the configured resolver (`INBOXD_DNS_NAMESERVERS`, the system's when empty).

- SPF (pyspf) for the client address, HELO and MAIL FROM recorded at reception (RFC 7208: a null
  MAIL FROM is checked as `postmaster@<HELO>`). Mail received before they were recorded, or a
  local file, has no SPF result, and the part says so.
- DKIM (dkimpy): each `DKIM-Signature` apart, with its domain, selector, algorithm, result and
  whether the body still matches the signed hash. No key published at the selector is
  `permerror`, a DNS failure `temperror`.
- DMARC: the policy at `_dmarc.<From domain>`, else at its organizational domain (the content
  check's rule: the last two labels, three under `co.uk`-like suffixes; no public-suffix list is
  shipped), and the RFC 7489 evaluation: pass when SPF
  or a DKIM signature passes for a domain aligned with the From domain (relaxed or strict as
  `aspf`/`adkim` say).
- ARC (dkimpy's `arc_verify`): the chain's validation (`pass`, `fail`, `none`).
- An `Authentication-Results` header (authres) sums them up, as a receiver would write it.

dkimpy and pyspf are blocking and do their own lookups: the check runs in a thread, and both are
given a lookup over our resolver (dkimpy's `dnsfunc`; pyspf's module-level `DNSLookup`, the hook
it offers, which reads the resolver of the running check from a context variable, so checks with
different resolvers never mix).
"""

from __future__ import annotations

import asyncio
import contextvars
import email.utils
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any, Literal

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
from inboxd.mail.checks.content import organisational_domain

Severity = Literal["error", "warning", "info"]
# A finding as (severity, code, message, where): the report's `Finding` is made of it by the service.
RawFinding = tuple[Severity, str, str, str]

SPF_RESULTS = ("pass", "fail", "softfail", "neutral", "none", "temperror", "permerror")


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


class _Resolver:
    """Blocking TXT/A/AAAA/MX/PTR lookups through the configured nameservers (thread side)."""

    def __init__(self, *, nameservers: Sequence[str], timeout: float) -> None:
        resolver = dns.resolver.Resolver(configure=not nameservers)
        if nameservers:
            resolver.nameservers = [parse_nameserver(s) for s in nameservers]
        resolver.timeout = timeout
        resolver.lifetime = timeout
        resolver.cache = None
        self._resolver = resolver

    def answer(self, name: str, rdtype: str) -> dns.resolver.Answer | None:
        """The answer, None when the name has none; raises dns.exception.Timeout/NoNameservers."""
        try:
            return self._resolver.resolve(name, rdtype, search=False)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None

    def txt(self, name: str) -> list[bytes]:
        found = self.answer(name, "TXT")
        return [] if found is None else [b"".join(r.strings) for r in found]

    def dkim_key(self, name: bytes | str, timeout: float = 5) -> bytes | None:
        """dkimpy's `dnsfunc`: the first TXT record at `name`, None when there is none."""
        text = name.decode("ascii", "replace") if isinstance(name, bytes) else name
        try:
            records = self.txt(text)
        except dns.exception.DNSException as exc:
            raise dkim.DnsTimeoutError(str(exc)) from exc
        return records[0] if records else None


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


class AuthChecker:
    def __init__(self, *, nameservers: Sequence[str], timeout: float, authserv_id: str) -> None:
        self._nameservers = list(nameservers)
        self._timeout = timeout
        self._authserv_id = authserv_id

    async def check(self, raw: bytes, reception: Reception | None) -> AuthOutcome:
        return await asyncio.to_thread(self.check_blocking, raw, reception)

    def check_blocking(self, raw: bytes, reception: Reception | None) -> AuthOutcome:
        resolver = _Resolver(nameservers=self._nameservers, timeout=self._timeout)
        token = _current.set(resolver)
        try:
            spf_result = None if reception is None or not _is_ip(reception.client_ip) else _spf(reception)
        finally:
            _current.reset(token)
        signatures = _dkim(raw, resolver)
        from_domain = _from_domain(raw)
        dmarc_result = _dmarc(from_domain, spf_result, signatures, resolver)
        arc_result = _arc(raw, resolver)
        header = _authentication_results(self._authserv_id, spf_result, signatures, dmarc_result, arc_result)
        return AuthOutcome(
            spf=spf_result,
            dkim=signatures,
            dmarc=dmarc_result,
            arc=arc_result,
            authentication_results=header,
            findings=_findings(spf_result, signatures, dmarc_result, arc_result, recorded=reception is not None),
        )

    def check_signatures_blocking(self, raw: bytes) -> SignaturesOutcome:
        """DKIM and ARC alone, for a message file (`inboxd check`): they need only DNS. SPF needs
        the client address the message came from, and DMARC SPF's result beside DKIM's, so both
        are reported as not run rather than judged on half the evidence."""
        resolver = _Resolver(nameservers=self._nameservers, timeout=self._timeout)
        signatures = _dkim(raw, resolver)
        arc_result = _arc(raw, resolver)
        not_run = "SPF and DMARC were not run: they need the address of the client that sent the message."
        findings: list[RawFinding] = [
            ("info", code, not_run, where) if code == "spf_not_checked" else (severity, code, message, where)
            for severity, code, message, where in _findings(None, signatures, None, arc_result, recorded=False)
        ]
        return SignaturesOutcome(
            dkim=signatures,
            arc=arc_result,
            authentication_results=_authentication_results(self._authserv_id, None, signatures, None, arc_result),
            findings=findings,
        )


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


def _dkim(raw: bytes, resolver: _Resolver) -> list[DkimOutcome]:
    try:
        message = dkim.DKIM(raw)
    except dkim.MessageFormatError:
        return []
    outcomes = []
    headers = [value for name, value in message.headers if name.lower() == b"dkim-signature"]
    for idx, value in enumerate(headers):
        try:
            tags = parse_tag_value(value)
        except dkim.InvalidTagValueList as exc:
            outcomes.append(DkimOutcome(domain="", selector="", result="permerror", error=str(exc)))
            continue
        domain, selector = _text(tags.get(b"d")), _text(tags.get(b"s"))
        algorithm = _text(tags.get(b"a"))
        outcomes.append(_verify_one(raw, idx, domain=domain, selector=selector, algorithm=algorithm, resolver=resolver))
    return outcomes


def _verify_one(
    raw: bytes, idx: int, *, domain: str, selector: str, algorithm: str, resolver: _Resolver
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
        valid = dkim.DKIM(raw).verify(idx=idx, dnsfunc=resolver.dkim_key)
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


def _from_domain(raw: bytes) -> str:
    headers = BytesHeaderParser(policy=compat32).parsebytes(raw)
    found = email.utils.getaddresses([str(v) for v in headers.get_all("From") or []])
    addresses = [a for _n, a in found if "@" in a]
    return addresses[0].rpartition("@")[2].lower().rstrip(".") if addresses else ""


def _aligned(domain: str, from_domain: str, mode: str) -> bool:
    if mode == "s":
        return domain == from_domain
    return organisational_domain(domain) == organisational_domain(from_domain)


def _dmarc_record(name: str, resolver: _Resolver) -> dict[str, str] | None:
    records = [r.decode("utf-8", "replace") for r in resolver.txt(f"_dmarc.{name}")]
    for record in records:
        if re.match(r"\s*v\s*=\s*DMARC1\s*(;|$)", record, re.IGNORECASE):
            tags = {}
            for part in record.split(";"):
                key, _, value = part.partition("=")
                if key.strip():
                    tags[key.strip().lower()] = value.strip()
            return tags
    return None


def _dmarc(
    from_domain: str, spf_result: SpfOutcome | None, signatures: Sequence[DkimOutcome], resolver: _Resolver
) -> DmarcOutcome:
    if not from_domain:
        return DmarcOutcome(result="permerror", domain="")
    try:
        tags = _dmarc_record(from_domain, resolver)
        org = organisational_domain(from_domain)
        if tags is None and org != from_domain:
            tags = _dmarc_record(org, resolver)
            if tags is not None and "sp" in tags:
                tags["p"] = tags["sp"]
    except dns.exception.DNSException:
        return DmarcOutcome(result="temperror", domain=from_domain)
    if tags is None:
        return DmarcOutcome(result="none", domain=from_domain)
    spf_aligned = (
        spf_result is not None
        and spf_result.result == "pass"
        and _aligned(spf_result.domain, from_domain, tags.get("aspf", "r").lower())
    )
    dkim_aligned = any(
        s.result == "pass" and _aligned(s.domain, from_domain, tags.get("adkim", "r").lower()) for s in signatures
    )
    return DmarcOutcome(
        result="pass" if spf_aligned or dkim_aligned else "fail",
        domain=from_domain,
        policy=tags.get("p", "none").lower() or "none",
        spf_aligned=spf_aligned,
        dkim_aligned=dkim_aligned,
    )


def _arc(raw: bytes, resolver: _Resolver) -> ArcOutcome:
    try:
        cv, results, _reason = dkim.arc_verify(raw, dnsfunc=resolver.dkim_key)
    except dkim.DKIMException:
        return ArcOutcome(result="fail")
    result = {dkim.CV_Pass: "pass", dkim.CV_Fail: "fail", dkim.CV_None: "none"}.get(cv, "fail")
    return ArcOutcome(result=result, instances=len(results))


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
