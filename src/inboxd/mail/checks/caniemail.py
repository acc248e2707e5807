"""caniemail's data, shipped in ``data/caniemail.json`` (see ``data/NOTICE``), loaded once and indexed.

Each feature keeps, for each client and platform, the result of the latest version caniemail tested:
``y`` supported, ``a`` partial, ``n`` unsupported, ``u`` unknown, with note numbers (``a #1``) that
name the feature's notes.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from inboxd.mail.checks.report import Support

__all__ = ["CaniemailData", "Feature", "FeatureResult", "load"]

_DATA = Path(__file__).parent / "data" / "caniemail.json"
_SUPPORT: dict[str, Support] = {"y": "supported", "a": "partial", "n": "unsupported"}
_SCORE: dict[Support, float] = {"supported": 1.0, "partial": 0.5, "unsupported": 0.0}


@dataclass(frozen=True, slots=True)
class FeatureResult:
    client: int  # index into CaniemailData.clients
    version: str
    support: Support
    notes: tuple[str, ...]

    @property
    def score(self) -> float:
        return _SCORE[self.support]


@dataclass(frozen=True, slots=True)
class Feature:
    slug: str
    title: str
    url: str
    category: str
    results: tuple[FeatureResult, ...]  # clients whose result is known
    support: float  # percent of those clients, partial counting half


@dataclass(frozen=True, slots=True)
class CaniemailData:
    version: str  # caniemail's last_update_date
    clients: tuple[tuple[str, str, str], ...]  # (family, platform, display name)
    features: dict[str, Feature]
    tested: tuple[int, ...]  # per client: on how many features caniemail has a result for it


@functools.cache
def load() -> CaniemailData:
    """The shipped data, read and indexed on first use (about 20 ms), then kept."""
    raw = json.loads(_DATA.read_text(encoding="utf-8"))
    families: dict[str, str] = raw["nicenames"]["family"]
    platforms: dict[str, str] = raw["nicenames"]["platform"]
    keys = sorted({(family, platform) for f in raw["features"] for family, p in f["stats"].items() for platform in p})
    index = {key: i for i, key in enumerate(keys)}
    clients = tuple(
        (family, platform, f"{families.get(family, family)} {platforms.get(platform, platform)}")
        for family, platform in keys
    )
    features: dict[str, Feature] = {}
    for f in raw["features"]:
        notes: dict[str, str] = f["notes"]
        results = []
        for family, by_platform in f["stats"].items():
            for platform, (version, value) in by_platform.items():
                code, *marks = str(value).split()
                support = _SUPPORT.get(code)
                if support is None:
                    continue  # "u": not tested, neither good nor bad
                note_texts = tuple(notes[m[1:]] for m in marks if m.startswith("#") and m[1:] in notes)
                results.append(FeatureResult(index[(family, platform)], str(version), support, note_texts))
        support_pct = 100.0 * sum(r.score for r in results) / len(results) if results else 100.0
        features[f["slug"]] = Feature(
            slug=f["slug"],
            title=f["title"].strip(),
            url=f["url"],
            category=f["category"],
            results=tuple(results),
            support=round(support_pct, 1),
        )
    tested = [0] * len(clients)
    for feature in features.values():
        for result in feature.results:
            tested[result.client] += 1
    return CaniemailData(version=raw["last_update_date"], clients=clients, features=features, tested=tuple(tested))
