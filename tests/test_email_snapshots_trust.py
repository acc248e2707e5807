"""Snapshots that do not lie (issue 34): the image difference is taken per channel, every test id
has a file of its own, and under CI a missing snapshot fails without being written. Run by
pytest's own `pytester`, in this process (no server is needed for text snapshots)."""

from __future__ import annotations

import pytest
from PIL import Image

from inboxd.testing.snapshots import file_stem, image_difference

SUITE = """
import os
from dataclasses import dataclass

import pytest


@dataclass
class Detail:
    id: str = "m1"
    address: str = "box@inboxd.localhost"
    subject: str = "Hi"
    text_body: str = ""
    html_body: str = ""
    headers: tuple = ()
    codes: tuple = ()
    attachments: tuple = ()


@pytest.mark.parametrize("kind", ["a/b", "a_b"])
def test_x(kind, email_snapshot):
    email_snapshot.assert_match(Detail(text_body=f"kind {kind} " + os.environ.get("EXTRA", "")))
"""


def run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *args: str, ci: bool) -> pytest.RunResult:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    if ci:
        monkeypatch.setenv("CI", "true")
    else:
        monkeypatch.delenv("CI", raising=False)
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def test_image_difference_is_per_channel() -> None:
    white = Image.new("RGB", (10, 10), (255, 255, 255))
    # Blue moved by 140: 16 levels of grey, which the greyscale difference took for no change.
    assert image_difference(white, Image.new("RGB", (10, 10), (255, 255, 115)))[0] == 1.0
    spot = white.copy()
    spot.putpixel((0, 0), (255, 255, 200))
    assert image_difference(white, spot)[0] == 0.01
    opaque = Image.new("RGBA", (10, 10), (0, 0, 0, 255))
    assert image_difference(opaque, Image.new("RGBA", (10, 10), (0, 0, 0, 0)))[0] == 1.0
    assert image_difference(white, Image.new("RGB", (10, 10), (250, 250, 250)))[0] == 0.0


def test_every_test_id_has_a_file_of_its_own(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    assert file_stem("test_x[a/b]") != file_stem("test_x[a_b]")
    assert file_stem("test_x[a_b]") == "test_x[a_b]"  # nothing lost: the name stays as it is
    pytester.makepyfile(test_mail=SUITE)
    run(pytester, monkeypatch, ci=False).assert_outcomes(failed=2)  # both written
    stored = sorted(p.name for p in (pytester.path / "__email_snapshots__" / "test_mail").iterdir())
    assert len(stored) == 2, stored
    # Before, both ids wrote one file: the second run found the other id's text and failed.
    run(pytester, monkeypatch, ci=False).assert_outcomes(passed=2)


def test_under_ci_a_missing_snapshot_fails_and_is_not_written(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_mail=SUITE)
    folder = pytester.path / "__email_snapshots__" / "test_mail"
    first = run(pytester, monkeypatch, ci=True)
    first.assert_outcomes(failed=2)
    first.stdout.fnmatch_lines(["*does not exist and CI is set: not written*"])
    assert not folder.exists() or not list(folder.iterdir())
    run(pytester, monkeypatch, ci=True).assert_outcomes(failed=2)  # a re-run does not pass either
    run(pytester, monkeypatch, "--inboxd-update-snapshots", ci=True).assert_outcomes(passed=2)
    assert len(list(folder.iterdir())) == 2
    run(pytester, monkeypatch, ci=True).assert_outcomes(passed=2)
    monkeypatch.setenv("EXTRA", "changed")
    run(pytester, monkeypatch, ci=True).assert_outcomes(failed=2)  # a stored one still compares
