"""One-time codes and links in a message: pure functions over its subject and decoded bodies.

``find_codes`` returns the verification codes a test would type in, the most likely first;
``find_links`` returns the http(s) links a test would follow, in document order.

How codes are found: every line of the subject and the bodies (HTML rendered to lines, block
elements breaking them) is cut into tight tokens (alphanumerics joined by ``-.,:/``). A token is a
*candidate* when it has a code's shape: 4 to 8 digits, two groups of 3 or 4 digits joined by one
space or dash (``123 456`` gives ``123456``), a short uppercase prefix and digits (``G-123456``), or
6 to 10 letters and digits with at least one of each. Three shapes are words more than numbers and
are taken only when labelled as the code and set apart (alone on their line or emphasised): letters
in groups (``KQM-TRZ``, given joined), lowercase letters and digits with a dash (``ab123-4567c``) and
login phrases of dash-joined words (``maple-river-stone``), the last two as written. Shapes that are
something else never become candidates: more groups or other separators (dates, times, decimals,
versions, phone numbers), digits next to a currency sign or ``+``/``#``, digits followed by a unit
or a CJK date character, years (unless a code word labels them), hex colours, anything inside a URL
or an e-mail address.

A candidate is then scored by its context, and kept only above a threshold:

* a code noun (code, OTP, PIN, passcode, Bestätigungscode, código, 验证码, 認証コード...) just before
  it on its line, or just after it ("123456 is your code"), is the strongest sign;
* a verb or adjective (verify, confirm, security, bestätigen, vérifier, 验证, 認証...) before it,
  the same words on the two lines above it, in the subject or anywhere in the body add less;
* being set apart adds: alone on its line, or the whole text of a bold, heading, ``code``, large
  or letter-spaced element in the HTML;
* a label that names something else (order, invoice, tracking, phone, ZIP, price, coupon... in the
  same languages) closer to it than any code word rejects it.

Mixed letter-digit candidates need more evidence than digit ones, and lowercase or mixed-case ones
more still, because ordinary text is full of such tokens (product names, units, identifiers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from inboxd.mail.html_lines import render_html, text_urls

__all__ = ["Link", "find_codes", "find_links"]


@dataclass(frozen=True, slots=True)
class Link:
    url: str
    text: str


# --- links ---------------------------------------------------------------------------------------------

_MAX_LINKS = 500
_MAX_LINK_TEXT = 500


def find_links(text_body: str, html_body: str) -> list[Link]:
    """The http(s) links of the HTML body (anchors and bare URLs in its text), then those of the text
    body, in document order, each URL once. A plain-text link's text is its URL."""
    seen: set[str] = set()
    out: list[Link] = []

    def add(url: str, text: str) -> None:
        url = url.strip()
        if url and url not in seen and len(out) < _MAX_LINKS:
            seen.add(url)
            out.append(Link(url=url, text=" ".join(text.split())[:_MAX_LINK_TEXT]))

    if html_body:
        for url, text in render_html(html_body).links:
            add(url, text)
    for url in text_urls(text_body):
        add(url, url)
    return out


# --- codes: context words ------------------------------------------------------------------------------

# Words that name a one-time code. Compound languages put "code" at the end of a word
# (Bestätigungscode), so "code" needs no boundary on its left; the negatives below catch
# zipcode, barcode and promo codes.
_NOUNS = re.compile(
    r"code\b|codes\b|\botp\b|\bpin\b|\bpins\b|passcode|pass code|one[- ]time|\btan\b|"
    r"password|passwort|kennwort|einmal|mot de passe|usage unique|código|codigo|clave|contraseña|"
    r"un solo uso|senha|uso único|"
    r"验证码|驗證碼|校验码|校驗碼|动态码|動態碼|确认码|確認碼|安全码|安全碼|代码|代碼|口令|密码|密碼|"
    r"コード|認証番号|確認番号|暗証番号|ワンタイム|パスコード|パスワード",
    re.IGNORECASE,
)
_VERBS = re.compile(
    r"\bverif|\bconfirm|\bsecurity\b|\bauthenticat|\b2fa\b|\bmfa\b|\blog ?in\b|\bsign[- ]?in\b|\bsignin\b|"
    r"\bbestätig|\bverifizier|\bsicherheit|\banmeld|\bauthentifizier|"
    r"\bvérif|\bconfirm|\bsécurité|\bconnexion|\bauthentifi|"
    r"\bverifica|\bconfirma|\bseguridad|\bsegurança|\bautentica|\biniciar sesión|\bacesso|\bacceso|"
    r"验证|驗證|认证|認證|确认|確認|登录|登錄|安全|認証|ログイン|本人確認",
    re.IGNORECASE,
)
# Labels of numbers that are not codes.
_NEGATIVES = re.compile(
    r"\border|\binvoice|\breceipt|\bref\b|\bref\.|\breference|\btracking|\bshipment|\bparcel|\bpackage|"
    r"\baccount (?:no|number|#)|\bacct|\bcustomer|\bmember|\bticket|\bcase\b|\bbooking|\breservation|"
    r"\bflight|\bpnr\b|\bseat\b|\broom\b|\bsuite\b|\bapt\b|\bunit\b|\bfloor\b|\bgate\b|\bserial|\bmodel\b|"
    r"\bending in\b|\bendet auf\b|\bsku\b|\bitem\b|\bproduct|\bversion\b|\bbuild\b|\brelease\b|\bissue\b|\bpr\b|"
    r"\bpull request|\bcommit|"
    r"\bdial[- ]?in\b|\bmeeting id\b|\bconference id\b|"
    r"\bphone|\btel\b|\btel\.|\btelephone|\bcall\b|\bfax\b|\bmobile\b|\bwhatsapp|\bhotline|"
    r"\bzip|\bpostal|\bpostcode|\bplz\b|\bcep\b|code postal|código postal|"
    r"\bprice|\btotal|\bamount|\bsubtotal|\bbalance|\bpaid\b|\bcost|\bfee\b|\busd\b|\beur\b|\bgbp\b|"
    r"\bpromo|\bcoupon|\bdiscount|\bvoucher|\bgift|\bsave\b|\bcheckout|\breferral|"
    r"\bno\.|\bnr\.|\bnr\b|\bn°|\bnº|\bnúmero de (?:pedido|cliente|seguimiento)|\bid\b|"
    r"bestell|\bauftrag|rechnung|kundennummer|\bsendung|gutschein|rabatt|\btelefon|"
    r"\bcommande|\bfacture|\bnuméro de client|\bréduction|\bremise|\btéléphone|"
    r"\bpedido|\bfactura|\bfatura|\bnota fiscal|\bcupón|\bcupom|\bdescuento|\bdesconto|\bteléfono|\btelefone|"
    r"订单|訂單|发票|發票|运单|運單|快递|快遞|优惠|優惠|折扣|电话|電話|邮编|郵編|"
    r"注文|請求|領収|伝票|お問い合わせ番号|クーポン|割引|郵便番号|〒",
    re.IGNORECASE,
)

# --- codes: shapes -------------------------------------------------------------------------------------

# Words of a sale: a line that has them offers a promotion code, never a one-time code.
_PROMOTION = re.compile(
    r"\bpromo|\bcoupon|\bdiscount|\bvoucher|\bcheckout|% off\b|gutschein|rabatt|\bcupón|\bcupom|"
    r"\bdescuento|\bdesconto|\bréduction|\bremise|优惠|優惠|折扣|クーポン|割引",
    re.IGNORECASE,
)
_URLISH = re.compile(
    # Bounded runs: a run of letters without the expected "@" or "." would otherwise be rescanned
    # from each of its positions.
    r"""(?:https?://|www\.)[^\s<>"']+|[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+|"""
    r"""\b[\w-]{1,63}(?:\.[\w-]{1,63}){0,8}\.(?:com|org|net|io|de|fr|es|jp|cn)/\S*""",
    re.IGNORECASE,
)
# A tight token: ASCII letters and digits, groups joined by single separators.
_TOKEN = re.compile(r"[A-Za-z0-9]+(?:[-.,:/'][A-Za-z0-9]+)*")
_SEPARATORS = re.compile(r"[-.,:/']")
# Two digit groups joined by one space; the caller checks the groups around it.
_SPACED = re.compile(r"(?<![A-Za-z0-9])(\d{3,4})[ \u00a0](\d{3,4})(?![A-Za-z0-9])")
_DIGITS = re.compile(r"\d{4,8}")
_PREFIXED = re.compile(r"([A-Z]{1,3})-(\d{4,8})")
_MIXED = re.compile(r"(?=[A-Za-z0-9]*[A-Za-z])(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{6,10}")
_UNIT_SUFFIX = re.compile(r"\d+(?:[a-z]{1,4}|[A-Z]{1,3}[a-z]?)")  # 1500px, 100GB, 4096MiB
_HEX = re.compile(r"[0-9A-Fa-f]{6}|[0-9A-Fa-f]{8}")
_YEAR = re.compile(r"(?:19|20)\d\d")
# Characters that make the adjacent number a price, a quantity, a date part or part of an identifier.
_BAD_BEFORE = frozenset("#$€£¥￥₹₩+@&=?%_\\~^")
_BAD_AFTER_DIGITS = re.compile(
    r"^\s?(?:%|#|€|\$|£|¥|円|元|块|年|月|日|時|时|分|秒|号|號|件|個|个|人|回|歳|点|kr\b|eur\b|usd\b|"
    r"[kKmMgG]?[bB]\b|px\b|pt\b|km\b|kg\b|mg\b|ml\b|mi\b|points?\b|pts\b|miles?\b|words?\b|views?\b|"
    r"followers?\b|users?\b|members?\b|people\b|items?\b|times?\b|days?\b|hours?\b|minutes?\b|seconds?\b)",
    re.IGNORECASE,
)
_MAX_CODE_TEXT = 256 * 1024
# Of the Subject, this much is scanned: a code in a Subject comes first ("123456 is your code") and
# real Subjects stay under 200 characters; ingest keeps at most decoding.MAX_SUBJECT of it.
_MAX_CODE_SUBJECT = 1000
_SET_APART_TRIM = " \t\u00a0:：.。!！*\"'“”«»「」【】[]()"


@dataclass(slots=True)
class _Candidate:
    code: str
    digits: bool
    upper: bool
    local: int  # evidence around the candidate
    order: int


def _shape(token: str) -> tuple[str, bool] | None:
    """The code a token stands for and whether it is all digits; None when it has no code's shape."""
    if _DIGITS.fullmatch(token):
        return token, True
    if _MIXED.fullmatch(token):
        if _UNIT_SUFFIX.fullmatch(token) or token.isalpha():
            return None
        return token, False
    if "-" in token and len(_SEPARATORS.findall(token)) == 1:
        left, right = token.split("-")
        if left.isdigit() and right.isdigit() and 3 <= len(left) <= 4 and 3 <= len(right) <= 4:
            return left + right, True
        prefixed = _PREFIXED.fullmatch(token)
        if prefixed:
            return prefixed.group(2), True
        joined = left + right
        word_number = (left.isalpha() and right.isdigit()) or (left.isdigit() and right.isalpha())
        if joined.isupper() and _MIXED.fullmatch(joined) and not word_number:  # ZXK-7QF, not ISO-8601
            return joined, False
    return None


# Three kinds of code are words rather than numbers, so they are taken only where the mail's wording
# marks them: letters in groups (KQM-TRZ, given joined as ZXK-7QF is), lowercase letters and digits
# with a dash (ab123-4567c) and phrases of dash-joined words (maple-river-stone), kept as written.
_GROUPED_LETTERS = re.compile(r"[A-Z]{3,5}(?:-[A-Z]{3,5}){1,3}")
_GROUPED_LOWER = re.compile(r"(?=[a-z0-9-]*[a-z])(?=[a-z0-9-]*\d)[a-z0-9]{3,8}(?:-[a-z0-9]{3,8}){1,2}")
_PHRASE = re.compile(r"[a-z]{3,10}(?:-[a-z]{3,10}){2,5}")
_PHRASE_NOUNS = re.compile(r"\bphrase\b|\bpassphrase\b|\bmagic words?\b", re.IGNORECASE)
# Labels that use a code noun for something else.
_NOT_A_CODE = re.compile(
    r"\bcode ?names?\b|\bcode of conduct\b|\bsource code\b|\bcode review|\bcolou?r code|\bdress code|"
    r"\bqr code|\bbar ?code|\berror code|\bstatus code|\bcountry code|\barea code|\bpostal code|\bzip ?code",
    re.IGNORECASE,
)
# Evidence the kinds above get when labelled and set apart: as much as a labelled, set-apart number.
_GROUPED_SCORE = 6


def _grouped_shape(token: str) -> str | None:
    """The code a letters-in-groups, lowercase letter-digit or dash-joined phrase token stands for."""
    if _GROUPED_LETTERS.fullmatch(token):
        return token.replace("-", "")
    if len(token) <= 20 and _GROUPED_LOWER.fullmatch(token):
        return token
    if len(token) <= 48 and _PHRASE.fullmatch(token):
        return token
    return None


class _Line:
    """What the scorer asks of one line and the lines above it, each fact computed at most once per
    line: asking it per candidate made a long line quadratic (a 200 KB Subject of "123 123 ..." took
    33 s), and asking it of every line made a body of many short lines with no candidate slow (each
    fact is a search with a long alternation): the regex facts are computed when first asked."""

    __slots__ = ("_facts", "above", "first_alpha", "nearest_above", "stripped", "text")

    def __init__(self, text: str, recent: list[str]) -> None:
        self.text = text
        self.stripped = text.strip(_SET_APART_TRIM)  # without what may surround a set-apart code
        self.first_alpha = _first_alpha(text)  # its first letter's index; len(text) when it has none
        # The last two non-blank lines of the three above it, joined (each cut to _MAX_ABOVE), and the
        # nearest ("" when none).
        self.above = " ".join(recent[-2:])
        self.nearest_above = recent[-1] if recent else ""
        self._facts: tuple[bool, bool, bool, bool, bool] | None = None

    def _computed(self) -> tuple[bool, bool, bool, bool, bool]:
        if self._facts is None:
            above = self.above
            noun = bool(above and _NOUNS.search(above))
            self._facts = (
                bool(_PROMOTION.search(self.text)),
                noun or bool(above and _VERBS.search(above)),
                noun,
                bool(above and _NEGATIVES.search(above)),
                bool(above and _NEGATIVES.search(above[-60:])),
            )
        return self._facts

    @property
    def promotion(self) -> bool:
        """The line offers a promotion."""
        return self._computed()[0]

    @property
    def above_code_word(self) -> bool:
        """A code noun or verb in ``above``."""
        return self._computed()[1]

    @property
    def above_noun(self) -> bool:
        return self._computed()[2]

    @property
    def above_negative(self) -> bool:
        return self._computed()[3]

    @property
    def above_tail_negative(self) -> bool:
        """A label of something else in the last 60 characters of ``above``."""
        return self._computed()[4]


# The lines above a candidate are read this far back from their ends (labels sit at a line's end).
_MAX_ABOVE = 200


def _first_alpha(text: str) -> int:
    for i, ch in enumerate(text):
        if ch.isalpha():
            return i
    return len(text)


def _facts(lines: list[str]) -> Iterator[_Line]:
    for index, text in enumerate(lines):
        window = lines[max(0, index - 3) : index]
        yield _Line(text, [line[-_MAX_ABOVE:] for line in window if line.strip()])


def _labelled_apart(line: _Line, start: int, raw: str, ctx: _Context) -> bool:
    """Whether ``raw`` is set apart (alone on its line or the whole of an emphasised element) and
    labelled as the code: a code noun on its line before it, else on the nearest line above (a heading
    or "Your login code:"), with no word that makes it a promotion, an order, a tracking number..."""
    if line.stripped != raw and raw not in ctx.emphasised:
        return False
    if line.first_alpha < start:
        label = line.text[max(0, start - 120) : start]
    elif line.nearest_above:
        label = line.nearest_above[-120:]
    else:
        return False
    nouns = [m.start() for m in (*_NOUNS.finditer(label), *_PHRASE_NOUNS.finditer(label))]
    if not nouns or _PROMOTION.search(label) or _NOT_A_CODE.search(label):
        return False
    noun = max(nouns)
    for negative in _NEGATIVES.finditer(label):
        # A label naming something else after the code word ("code for your order"), or just before
        # it ("tracking code", "SKU code"); "Apple ID code" names an account, not the code.
        if negative.start() > noun or (noun - negative.end() <= 3 and negative.group(0).lower() != "id"):
            return False
    return True


@dataclass(slots=True)
class _Context:
    """What a message says outside the candidate's line."""

    subject_has_word: bool
    body_has_word: bool
    emphasised: set[str]


def _last(pattern: re.Pattern[str], text: str) -> int:
    """End of the last match of ``pattern`` in ``text``; -1 when none."""
    end = -1
    for match in pattern.finditer(text):
        end = match.end()
    return end


def _score(facts: _Line, start: int, end: int, raw: str, ctx: _Context, *, digits: bool) -> int | None:
    """The evidence around the candidate ``raw`` at ``facts.text[start:end]`` that it is a code
    (its line, the two lines above, emphasis); None rejects it."""
    line = facts.text
    before = line[max(0, start - 80) : start]
    after = line[end : end + 50]
    if before and before[-1] in _BAD_BEFORE:
        return None
    if before.endswith(("-", "/", ".", ",")) and before[-2:-1].isalnum():
        return None
    if digits and _BAD_AFTER_DIGITS.match(after):
        return None
    noun_before = _last(_NOUNS, before)
    verb_before = _last(_VERBS, before)
    negative = _last(_NEGATIVES, before)
    if negative >= 0 and negative > max(noun_before, verb_before):
        return None
    if facts.promotion:
        return None
    head = after[:45]
    if negative < 0 and _NEGATIVES.search(head[:20]) and not _NOUNS.search(head):
        return None
    if digits and "-" in raw and all(_YEAR.fullmatch(part) for part in raw.split("-")):
        return None  # 1999-2024
    if digits and _YEAR.fullmatch(raw) and not (0 <= len(before) - noun_before <= 20 and noun_before >= 0):
        return None
    score = 0
    if noun_before >= 0:
        score += 3
    elif verb_before >= 0:
        score += 2
    noun_after, verb_after, negative_after = _NOUNS.search(head), _VERBS.search(head), _NEGATIVES.search(head)
    # "482913 is your code", but not "75008 (code postal)".
    if noun_after and (negative_after is None or negative_after.start() > noun_after.start()):
        score = max(score, 3)
    elif verb_after:
        score += 1
    if facts.above_code_word:
        if facts.above_negative and not facts.above_noun:
            score -= 2
        else:
            score += 2
    elif facts.above and noun_before < 0 and facts.above_tail_negative:
        score -= 2
    alone = facts.stripped == raw
    if alone or raw in ctx.emphasised or raw.replace(" ", "") in ctx.emphasised:
        score += 2
    return score


@dataclass(slots=True)
class _Found:
    """The candidates found so far, and how many were scored (scoring is bounded per message)."""

    codes: dict[str, _Candidate]
    next_order: int = 0
    scored: int = 0

    @property
    def full(self) -> bool:
        return self.scored >= _MAX_SCORED


# Candidates scored per message, in document order. Scoring one runs a few large regular expressions
# over its context (about a millisecond under load); real mail has under ten, and a code comes near
# the top, so a body of numbers stops being read here.
_MAX_SCORED = 200


def _candidates_in(lines: list[str], ctx: _Context, found: _Found) -> None:
    for facts in _facts(lines):
        if found.full:
            return
        line = _URLISH.sub(lambda m: " " * len(m.group(0)), facts.text)
        taken: list[tuple[int, int]] = []  # spans of the spaced pairs, in order
        for match in _SPACED.finditer(line):
            if found.full:
                return
            start, end = match.span()
            before, after = line[max(0, start - 2) : start], line[end : end + 2]
            # A third group on either side makes it a phone number or a list of numbers.
            if re.search(r"[\d)][ \u00a0-]?$", before) or re.match(r"[ \u00a0-]?[\d(]", after):
                taken.append((start, end))
                continue
            if re.search(r"[-.,:/+]$", before) or re.match(r"[-.,:/][\d]", after):
                taken.append((start, end))
                continue
            code = match.group(1) + match.group(2)
            if len(code) > 8:
                continue
            taken.append((start, end))
            score = _score(facts, start, end, match.group(0), ctx, digits=True)
            _keep(found, code, score, digits=True)
        spelled = _spelled_out(facts, ctx)
        if spelled is not None:
            _keep(found, spelled, _GROUPED_SCORE, digits=True)
            continue
        next_taken = 0  # tokens come in order too, so the spans they may fall in are passed once
        for match in _TOKEN.finditer(line):
            if found.full:
                return
            start, end = match.span()
            while next_taken < len(taken) and taken[next_taken][1] <= start:
                next_taken += 1
            if next_taken < len(taken) and taken[next_taken][0] <= start:
                continue
            shape = _shape(match.group(0))
            if shape is None:
                grouped = _grouped_shape(match.group(0)) if "-" in match.group(0) else None
                if grouped is not None and _labelled_apart(facts, start, match.group(0), ctx):
                    _keep(found, grouped, _GROUPED_SCORE, digits=False)
                continue
            code, digits = shape
            if not digits and (_HEX.fullmatch(code) and line[max(0, start - 1) : start] == "#"):
                continue
            score = _score(facts, start, end, match.group(0), ctx, digits=digits)
            _keep(found, code, score, digits=digits)


# A code spelled out in groups of one or two digits ("2 0 5 8 3 1", "20 58 31"), as a whole line.
_SPELLED = re.compile(r"\d{1,2}(?: \d{1,2}){2,7}")


def _spelled_out(facts: _Line, ctx: _Context) -> str | None:
    """The code a line spells out in single-spaced groups of equal length, when that is all the line
    (or an emphasised element) holds and a code word labels it; None otherwise."""
    raw = facts.stripped
    if len(raw) > 24 or not _SPELLED.fullmatch(raw):
        return None
    groups = raw.split(" ")
    code = "".join(groups)
    if len({len(group) for group in groups}) != 1 or not 4 <= len(code) <= 8:
        return None
    return code if _labelled_apart(facts, facts.text.find(raw), raw, ctx) else None


def _keep(found: _Found, code: str, score: int | None, *, digits: bool) -> None:
    found.scored += 1
    if score is None:
        return
    known = found.codes.get(code)
    if known is None:
        found.codes[code] = _Candidate(code, digits, code.upper() == code, score, found.next_order)
        found.next_order += 1
    elif score > known.local:
        known.local = score


def _accepted(c: _Candidate, message_score: int) -> bool:
    """Evidence around a candidate is required; words elsewhere in the message only add to it."""
    if c.digits:
        return c.local >= 3
    if c.upper:
        return c.local >= 4 or (c.local >= 3 and c.local + message_score >= 5)
    return c.local >= 4 and c.local + message_score >= 6


def _without_blank_runs(lines: list[str]) -> list[str]:
    """The lines of rendered HTML with each run of blank lines made one: block elements each break a
    line, so a table cell's code would otherwise sit many blank lines below its label's cell."""
    out: list[str] = []
    for line in lines:
        if line.strip() or (out and out[-1].strip()):
            out.append(line)
    return out


def find_codes(subject: str, text_body: str, html_body: str) -> list[str]:
    """The one-time codes in a message, the most likely first; [] when it has none."""
    # Codes sit near the top of a message; the caps bound the work a huge body asks for.
    subject = subject[:_MAX_CODE_SUBJECT]
    text_body = text_body[:_MAX_CODE_TEXT]
    rendered = render_html(html_body) if html_body else None
    html_text = rendered.text[:_MAX_CODE_TEXT] if rendered is not None else ""
    body_text = text_body + "\n" + html_text
    ctx = _Context(
        subject_has_word=bool(_NOUNS.search(subject) or _VERBS.search(subject)),
        body_has_word=bool(_NOUNS.search(body_text) or _VERBS.search(body_text)),
        emphasised=rendered.emphasised if rendered is not None else set(),
    )
    found = _Found(codes={})
    _candidates_in([subject], ctx, found)
    _candidates_in(text_body.splitlines(), ctx, found)
    if html_text:
        _candidates_in(_without_blank_runs(html_text.splitlines()), ctx, found)
    message_score = int(ctx.subject_has_word) + int(ctx.body_has_word)
    ranked = sorted((c for c in found.codes.values() if _accepted(c, message_score)), key=lambda c: (-c.local, c.order))
    return [c.code for c in ranked]
