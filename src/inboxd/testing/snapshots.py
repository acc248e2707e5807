"""Snapshot tests of e-mail (issue 28): the `email_snapshot` fixture.

`email_snapshot.assert_match(msg)` turns a message into a normalized text (selected headers, the
attachments, the text body and the sanitized HTML pretty-printed, volatile parts masked) and
compares it with `__email_snapshots__/<test module>/<test>.txt` next to the test;
`assert_match(msg, image=True, width=375)` also compares the server's rendering of the HTML
(`render.png`) with a stored PNG, within a pixel tolerance (a pixel differs when one of its
channels does). A missing snapshot is written and the test fails saying so, except under CI
(`CI=true`), where it fails without being written; `--inboxd-update-snapshots` writes snapshots
that differ or are missing. File names are unique per test id (`file_stem`). A mismatch fails
with a unified diff of the text, and writes `<name>.actual.png` and `<name>.diff.png` beside a
stored image that differs.

Masked by default: dates, message ids, the one-time codes the server found, the values of link
query strings (tokens), MIME boundaries, `data:` URLs (by digest) and the test mailbox's address.
A test adds its own with `masks=` or `email_snapshot.mask(...)`.

Not built on syrupy: its missing snapshots fail without being written, it is updated only by its
own `--snapshot-update`, and a plugin users install should not pull in a second snapshot plugin
with fixtures and options of its own. Files and diffs are small here: `difflib` and Pillow.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import io
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pytest

from inboxd.client import ApiError, SandboxMessage
from inboxd.extras import install_command
from inboxd.mail.html_view import render as sanitize

if TYPE_CHECKING:
    from PIL.Image import Image

    from inboxd.client import Client

SNAPSHOT_DIR = "__email_snapshots__"
DEFAULT_HEADERS = ("From", "To", "Cc", "Reply-To", "Subject")
# A pixel differs when a channel differs by more than this (anti-aliasing moves a few levels);
# an image matches when at most `tolerance` of its pixels differ. Masks apply to the text only: the
# default leaves room for a one-time code drawn in body type (about 0.1-0.2% of a 375x800 image),
# while a changed colour, image or layout moves far more; changed words are the text's to catch.
CHANNEL_THRESHOLD = 16
DEFAULT_TOLERANCE = 0.005

Mask = str | re.Pattern[str] | tuple[str | re.Pattern[str], str]

_DATE_PATTERNS = (
    # RFC 5322: "Tue, 3 Feb 2026 10:00:00 +0000", the weekday and seconds optional.
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun),\s*)?\d{1,2}\s+(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\s+\d{4}"
    r"\s+\d{1,2}:\d{2}(?::\d{2})?(?:\s*(?:[+-]\d{4}|[A-Z]{2,5}))?(?:\s*\([A-Z]{2,5}\))?",
    # ISO 8601 / RFC 3339, with or without the time.
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
)
_DATE = re.compile("|".join(f"(?:{p})" for p in _DATE_PATTERNS))
_ID_HEADERS = frozenset({"message-id", "in-reply-to", "references", "resent-message-id"})
_MSG_ID = re.compile(r"<[^<>\s@]+@[^<>\s]+>")
_BOUNDARY = re.compile(r"""boundary=(?:"([^"]+)"|([^\s;"]+))""", re.IGNORECASE)
_URL = re.compile(r"""(?:https?:)?//[^\s"'<>()]+""", re.IGNORECASE)
_QUERY_VALUE = re.compile(r"""(\?|&amp;|&)([^=&#\s]+)=([^&#\s]+)""")
# What stays in a snapshot's file name as it is; `[`, `]` and `=` keep parametrized ids readable.
_UNSAFE = re.compile(r"[^\w.,=+@\[\]-]")
_DATA_URL = re.compile(r"""data:([\w.+-]+/[\w.+-]+)?(;[^,"'\s]*)?,[^"'\s)]+""", re.IGNORECASE)


class _Detail(Protocol):
    """What the snapshot reads of a message: `inboxd.client.Message` or `SandboxMessage`."""

    id: str
    address: str
    subject: str
    text_body: str
    html_body: str
    headers: tuple[tuple[str, str], ...]
    codes: tuple[str, ...]

    @property
    def attachments(self) -> Sequence[object]: ...


@dataclass(slots=True)
class _Masks:
    rules: list[tuple[re.Pattern[str], str]] = field(default_factory=list)

    def add(self, mask: Mask) -> None:
        pattern, replacement = mask if isinstance(mask, tuple) else (mask, "<masked>")
        self.rules.append((re.compile(pattern) if isinstance(pattern, str) else pattern, replacement))

    def apply(self, text: str) -> str:
        for pattern, replacement in self.rules:
            text = pattern.sub(replacement, text)
        return text


def _mask_url(match: re.Match[str]) -> str:
    return _QUERY_VALUE.sub(lambda q: f"{q.group(1)}{q.group(2)}=<token>", match.group(0))


def _mask_data_url(match: re.Match[str]) -> str:
    digest = hashlib.sha256(match.group(0).encode()).hexdigest()[:12]
    return f"data:{match.group(1) or ''}<{digest}>"


def _volatile(text: str, *, detail: _Detail, boundaries: Iterable[str]) -> str:
    """The default masks, in an order where one does not break another's pattern."""
    text = _DATA_URL.sub(_mask_data_url, text)
    for boundary in boundaries:
        text = text.replace(boundary, "<boundary>")
    text = _URL.sub(_mask_url, text)
    for code in sorted(detail.codes, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(code)}(?![\w-])", "<code>", text)
    if detail.address:
        text = re.sub(re.escape(detail.address), "<mailbox>", text, flags=re.IGNORECASE)
    return _DATE.sub("<date>", text)


class _Pretty(HTMLParser):
    """Indents sanitized HTML one element a line, text on lines of its own, whitespace collapsed."""

    _VOID = frozenset({"area", "br", "col", "hr", "img", "input", "meta", "source", "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.lines: list[str] = []
        self.depth = 0

    def _tag(self, tag: str, attrs: list[tuple[str, str | None]]) -> str:
        rendered = "".join(f' {k}="{v}"' if v is not None else f" {k}" for k, v in sorted(attrs))
        return f"<{tag}{rendered}>"

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.lines.append("  " * self.depth + self._tag(tag, attrs))
        if tag not in self._VOID:
            self.depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.lines.append("  " * self.depth + self._tag(tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        if tag in self._VOID:
            return
        self.depth = max(0, self.depth - 1)
        self.lines.append("  " * self.depth + f"</{tag}>")

    def handle_data(self, data: str) -> None:
        text = " ".join(data.split())
        if text:
            self.lines.append("  " * self.depth + text)

    def handle_entityref(self, name: str) -> None:
        self.handle_data(f"&{name};")

    def handle_charref(self, name: str) -> None:
        self.handle_data(f"&#{name};")


def pretty_html(html_body: str) -> str:
    """The HTML as the dashboard shows it (sanitized; remote URLs kept as text), one node a line."""
    if not html_body.strip():
        return ""
    document = sanitize(html_body, {}, allow_remote=True).document
    body = document.split("<body>", 1)[1].rsplit("</body>", 1)[0]
    parser = _Pretty()
    parser.feed(body)
    parser.close()
    return "\n".join(parser.lines)


def normalize(detail: _Detail, *, headers: Sequence[str] = DEFAULT_HEADERS, masks: Sequence[Mask] = ()) -> str:
    """The text an e-mail snapshot stores: selected headers, attachments, text body, pretty HTML."""
    lines: list[str] = []
    boundaries: list[str] = []
    wanted = {h.lower(): h for h in headers}
    for name, value in detail.headers:
        for found in _BOUNDARY.finditer(value):
            boundaries.append(found.group(1) or found.group(2))
        if name.lower() not in wanted:
            continue
        if name.lower() in _ID_HEADERS:
            value = _MSG_ID.sub("<message-id>", value)
        elif name.lower() == "date":
            value = "<date>"
        lines.append(f"{wanted[name.lower()]}: {' '.join(value.split())}")
    if not any(h.lower() == "subject" for h, _ in detail.headers) and "subject" in wanted:
        lines.append(f"Subject: {detail.subject}")
    for attachment in detail.attachments:
        name = getattr(attachment, "filename", "") or "(no name)"
        lines.append(
            f"Attachment: {name} ({getattr(attachment, 'content_type', '')}, {getattr(attachment, 'size', 0)} bytes)"
        )
    lines += ["", "--- text ---", detail.text_body.replace("\r\n", "\n").rstrip(), "", "--- html ---"]
    lines.append(pretty_html(detail.html_body))
    text = "\n".join(lines).rstrip() + "\n"
    text = _volatile(text, detail=detail, boundaries=sorted(set(boundaries), key=len, reverse=True))
    custom = _Masks()
    for mask in masks:
        custom.add(mask)
    return custom.apply(text)


def image_difference(expected: Image, actual: Image) -> tuple[float, Image]:
    """The share of pixels where some channel differs beyond `CHANNEL_THRESHOLD`, and an image
    showing them in red over a faded copy of the expected one. Images of different sizes differ
    everywhere."""
    from PIL import Image as PILImage
    from PIL import ImageChops

    # Compared channel by channel (alpha too when either image has it): a greyscale difference
    # weighs blue at 0.114, so a blue channel moved by 140 counted as no change at all.
    mode = "RGBA" if "A" in expected.getbands() or "A" in actual.getbands() else "RGB"
    expected_full, actual_full = expected.convert(mode), actual.convert(mode)
    expected_rgb, actual_rgb = expected_full.convert("RGB"), actual_full.convert("RGB")
    if expected_rgb.size != actual_rgb.size:
        width = max(expected_rgb.size[0], actual_rgb.size[0])
        height = max(expected_rgb.size[1], actual_rgb.size[1])
        canvas = PILImage.new("RGB", (width, height), (255, 0, 0))
        canvas.paste(actual_rgb, (0, 0))
        return 1.0, canvas
    bands = ImageChops.difference(expected_full, actual_full).split()
    widest = bands[0]
    for band in bands[1:]:
        widest = ImageChops.lighter(widest, band)
    changed = widest.point(lambda v: 255 if v > CHANNEL_THRESHOLD else 0)
    share = changed.histogram()[255] / (expected_rgb.size[0] * expected_rgb.size[1])
    faded = PILImage.blend(expected_rgb, PILImage.new("RGB", expected_rgb.size, (255, 255, 255)), 0.7)
    faded.paste(PILImage.new("RGB", expected_rgb.size, (255, 0, 0)), mask=changed)
    return share, faded


def file_stem(test_name: str) -> str:
    """A file name for a test id, one per id: characters a file name cannot carry everywhere become
    `_`, and then a short digest of the id is added, so `test_x[a/b]` and `test_x[a_b]` differ."""
    stem = _UNSAFE.sub("_", test_name)
    if stem == test_name:
        return stem
    return f"{stem}-{hashlib.sha256(test_name.encode()).hexdigest()[:8]}"


class SnapshotMismatch(AssertionError):
    """An e-mail snapshot differs from the stored one, or was missing and has been written."""


class EmailSnapshot:
    """The `email_snapshot` fixture of one test."""

    def __init__(
        self,
        *,
        directory: Path,
        test_name: str,
        update: bool,
        ci: bool = False,
        client: Callable[[], Client] | None = None,
    ) -> None:
        self.directory = directory
        self._test_name = file_stem(test_name)
        self._update = update
        self._ci = ci
        self._client = client
        self._masks: list[Mask] = []
        self._count = 0

    def mask(self, pattern: str | re.Pattern[str], replacement: str = "<masked>") -> None:
        """Mask this pattern in every later `assert_match` of the test."""
        self._masks.append((pattern, replacement))

    def assert_match(
        self,
        message: _Detail,
        *,
        name: str | None = None,
        image: bool = False,
        width: int = 600,
        full: bool = False,
        tolerance: float = DEFAULT_TOLERANCE,
        headers: Sequence[str] = DEFAULT_HEADERS,
        masks: Sequence[Mask] = (),
    ) -> None:
        """Compare `message` with its stored snapshot (and its rendering when `image`)."""
        self._count += 1
        stem = name or (self._test_name if self._count == 1 else f"{self._test_name}.{self._count}")
        text = normalize(message, headers=headers, masks=[*self._masks, *masks])
        problems = [p for p in (self._check_text(stem, text),) if p]
        if image:
            png = self._render(message, width=width, full=full)
            problem = self._check_image(f"{stem}.{width}", png, tolerance)
            if problem:
                problems.append(problem)
        if problems:
            raise SnapshotMismatch("\n\n".join(problems))

    def _path(self, stem: str, suffix: str) -> Path:
        return self.directory / f"{stem}{suffix}"

    def _check_text(self, stem: str, text: str) -> str | None:
        path = self._path(stem, ".txt")
        if not path.exists():
            return self._missing(path, text.encode(), "e-mail snapshot")
        stored = path.read_text(encoding="utf-8")
        if stored == text:
            return None
        if self._update:
            self._write(path, text.encode())
            return None
        diff = "".join(
            difflib.unified_diff(
                stored.splitlines(keepends=True), text.splitlines(keepends=True), str(path), "this run"
            )
        )
        return f"e-mail snapshot {path} differs (--inboxd-update-snapshots accepts the change):\n{diff}"

    def _check_image(self, stem: str, png: bytes, tolerance: float) -> str | None:
        from PIL import Image as PILImage

        path = self._path(stem, ".png")
        actual_path, diff_path = self._path(stem, ".actual.png"), self._path(stem, ".diff.png")
        if not path.exists():
            return self._missing(path, png, "e-mail snapshot image")
        share, picture = image_difference(PILImage.open(path), PILImage.open(io.BytesIO(png)))
        if share <= tolerance or self._update:
            if share > tolerance:
                self._write(path, png)
            actual_path.unlink(missing_ok=True)
            diff_path.unlink(missing_ok=True)
            return None
        self._write(actual_path, png)
        buffer = io.BytesIO()
        picture.save(buffer, "PNG")
        self._write(diff_path, buffer.getvalue())
        return (
            f"e-mail snapshot image {path} differs in {share:.2%} of its pixels (tolerance {tolerance:.2%}): "
            f"see {actual_path.name} and {diff_path.name} beside it (--inboxd-update-snapshots accepts the change)."
        )

    def _missing(self, path: Path, data: bytes, what: str) -> str | None:
        """Written when updating, or outside CI (failing once, to be looked at); under CI a
        missing snapshot fails and is not written, so a re-run cannot pass with it unreviewed."""
        if self._update:
            self._write(path, data)
            return None
        if self._ci:
            return (
                f"{what} {path} does not exist and CI is set: not written. Run the test where it can be "
                "reviewed (or with --inboxd-update-snapshots) and commit the snapshot."
            )
        self._write(path, data)
        return f"{what} {path} did not exist: written now; check it and run again."

    def _render(self, message: _Detail, *, width: int, full: bool) -> bytes:
        if self._client is None:
            raise RuntimeError("email_snapshot: image=True needs the inboxd server (the `inboxd` fixture)")
        # Both ends of an image snapshot need the `render` extra: said in one line each, not a traceback.
        if importlib.util.find_spec("PIL") is None:
            needs = f"the `render` extra: {install_command('render')}"
            pytest.fail(f"email_snapshot: image=True compares images with Pillow, {needs}", pytrace=False)
        client = self._client()
        try:
            if isinstance(message, SandboxMessage):
                return client.render_sandbox(message.id, width=width, full=full)
            return client.render(message.address, message.id, width=width, full=full)
        except ApiError as exc:
            if exc.code != "render_unavailable":
                raise
            pytest.fail(
                f"email_snapshot: image=True, but the inboxd server cannot render: {exc.message}", pytrace=False
            )

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def add_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--inboxd-update-snapshots",
        action="store_true",
        default=False,
        help="Write e-mail snapshots (`email_snapshot`) that differ or are missing instead of failing.",
    )


def _ci() -> bool:
    """Whether this run is CI's: `CI` set to a true value, as GitHub Actions, GitLab CI and most
    others set it."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes", "on")


@pytest.fixture
def email_snapshot(request: pytest.FixtureRequest) -> EmailSnapshot:
    """Compare a message with its stored snapshot: `email_snapshot.assert_match(msg, image=False)`.
    Snapshots live in `__email_snapshots__/<test module>/` next to the test."""
    test_file = Path(request.node.path)

    def client() -> Client:
        server = request.getfixturevalue("inboxd")
        found: Client = server.client
        return found

    return EmailSnapshot(
        directory=test_file.parent / SNAPSHOT_DIR / test_file.stem,
        test_name=request.node.name,
        update=bool(request.config.getoption("--inboxd-update-snapshots")),
        ci=_ci(),
        client=client,
    )
