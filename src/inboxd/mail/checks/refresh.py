"""Refresh the shipped caniemail data: ``python -m inboxd.mail.checks.refresh [SOURCE [LABEL]]``.

SOURCE is caniemail's published ``data.json`` (a path or an http(s) URL; the default is the URL the
caniemail.com site publishes, which needs the network), or the ``data/caniemail.json`` of the npm
package ``caniemail`` (``npm pack caniemail`` and unpack it). The data is compacted to what the HTML
check reads (each feature's slug, title, URL, category, notes, and for each client and platform the
result of its latest tested version) and written with a NOTICE stating source, date and licence.
This is a maintainer's tool: nothing at run time imports it.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DEFAULT_SOURCE = "https://www.caniemail.com/api/data.json"
DATA_DIR = Path(__file__).parent / "data"

NOTICE = """\
caniemail.json in this directory is a compacted copy of caniemail's data (https://www.caniemail.com/),
the HTML and CSS support of email clients, by Rémi Parmentier (HTeuMeuLeu) and contributors
(repository hteumeuleu/caniemail), published under the MIT licence; the copy was taken from {source}
(the npm package `caniemail`, by Avi Goldman and Andrew Powell, MIT too, ships the same data.json).

Data version (its last_update_date): {updated}
API version: {api_version}
Copied on: {copied}
Refresh with: python -m inboxd.mail.checks.refresh [SOURCE]   (README, "Checks")

What is kept: for every feature its slug, title, URL, category and numbered notes, and for every
client and platform the result of the latest version caniemail tested ("y", "a", "n" or "u", with
note numbers). Nothing else is changed.

MIT License

Copyright (c) 2019 HTeuMeuLeu
Copyright © Avi Goldman
Copyright © Andrew Powell <andrew@shellscape.org>

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute, sublicense,
and/or sell copies of the Software, and to permit persons to whom the Software is furnished to do so,
subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial
portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT
LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN
NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY,
WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE
SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """What the HTML check reads of caniemail's data."""
    features = []
    for feature in data["data"]:
        latest: dict[str, dict[str, list[str]]] = {}
        for family, platforms in feature.get("stats", {}).items():
            for platform, versions in platforms.items():
                if versions:
                    # Versions are listed in the order they were tested: the last is the current state.
                    version, result = list(versions.items())[-1]
                    latest.setdefault(family, {})[platform] = [version, result]
        features.append(
            {
                "slug": feature["slug"],
                "title": feature["title"],
                "url": feature.get("url") or "",
                "category": feature.get("category") or "",
                "notes": feature.get("notes_by_num") or {},
                "stats": latest,
            }
        )
    return {
        "api_version": data.get("api_version", ""),
        "last_update_date": data.get("last_update_date", ""),
        "nicenames": {"family": data["nicenames"]["family"], "platform": data["nicenames"]["platform"]},
        "features": features,
    }


def load(source: str) -> dict[str, Any]:
    if source.startswith(("http://", "https://")):
        with urllib.request.urlopen(source, timeout=60) as response:
            loaded: dict[str, Any] = json.load(response)
            return loaded
    with open(source, encoding="utf-8") as handle:
        loaded = json.load(handle)
        return loaded


def main(argv: list[str], out_dir: Path = DATA_DIR) -> int:
    source = argv[0] if argv else DEFAULT_SOURCE
    data = compact(load(source))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "caniemail.json").write_text(
        json.dumps(data, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8"
    )
    # A second argument names where a local file came from ("the npm package caniemail 2.0.2").
    label = argv[1] if len(argv) > 1 else source
    (out_dir / "NOTICE").write_text(
        NOTICE.format(
            source=label,
            updated=data["last_update_date"],
            api_version=data["api_version"],
            copied=datetime.now(UTC).strftime("%Y-%m-%d"),
        ),
        encoding="utf-8",
    )
    print(f"caniemail data {data['last_update_date']}: {len(data['features'])} features -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
