"""Write `_sync/client.py` (`Client`) from `_async/client.py` (`AsyncClient`): `python -m inboxd.client.generate`.

The async client is the one written by hand; unasync drops its `async`/`await` and renames what
differs, and ruff formats the result. tests/test_client_generated.py fails when the file in the
tree is not what this makes, so the two clients cannot drift apart.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
SOURCE = HERE / "_async" / "client.py"
TARGET = HERE / "_sync" / "client.py"

# Beyond unasync's own (`__aenter__`, ...): the names that differ between the two clients.
REPLACEMENTS = {"AsyncClient": "Client", "aclose": "close", "asyncio": "time"}

DOCSTRING = '''"""The synchronous client, `Client`.

Generated from `_async/client.py` by `python -m inboxd.client.generate`: do not edit; edit
`AsyncClient` there and run it again.
"""

'''


def generate() -> str:
    """The text `_sync/client.py` should hold."""
    import tokenize_rt
    import unasync

    rule = unasync.Rule("/_async/", "/_sync/", additional_replacements=REPLACEMENTS)
    source = SOURCE.read_text(encoding="utf-8")
    text = tokenize_rt.tokens_to_src(rule._unasync_tokens(tokenize_rt.src_to_tokens(source)))
    text = DOCSTRING + text[text.index("from __future__") :]
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", str(TARGET), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return str(formatted.stdout)


def main() -> None:
    TARGET.write_text(generate(), encoding="utf-8")


if __name__ == "__main__":
    main()
