"""What the word set in C saves the search index: instructions per 4 KB message, by callgrind.

`python -m bench.compiled.words` counts with `valgrind --tool=callgrind` (a run of N calls less a
run of N / 6, divided) the instructions of: the index text made from the bench message
(`services/filters.py` `index_words`, without its word set); its words each once by a Python set
and by the C word set (`inboxd.services._words`, which setup.py builds); and
FTS5 (`store/migrations`' table, batches of 50) inserting the text as it is and with each word
once. Counts do not depend on the machine's load. docs/performance.md has the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
FTS5 = "CREATE VIRTUAL TABLE f USING fts5(terms, tokenize = 'ascii', detail = none, columnsize = 0)"

# Run in a child: the set-up, then `calls` times the statement of the step.
_CHILD = """
import sqlite3, sys
sys.path[:0] = [{src!r}, {root!r}]
from bench.message import build_message
from inboxd.services.filters import index_words
from inboxd.services._words import distinct_words
raw = build_message(4096, sender="sender@example.test", recipient="box@inboxd.localhost").decode()
head, body = raw.split("\\r\\n\\r\\n", 1)
parts = ["Benchmark message of four kilobytes", "Bench Sender sender@example.test", "box@inboxd.localhost", body]
text = index_words(parts, distinct=False)
data = text.encode("ascii")
once = distinct_words(data).decode("ascii")
db = sqlite3.connect(":memory:", isolation_level=None)
db.execute({fts5!r})
row = [0]

def fts(doc):
    if row[0] % 50 == 0:
        db.execute("BEGIN")
    row[0] += 1
    db.execute("INSERT INTO f(rowid, terms) VALUES (?, ?)", (row[0], doc))
    if row[0] % 50 == 0:
        db.execute("COMMIT")

STEPS = {{
    "index text": lambda: index_words(parts, distinct=False),
    "words once, Python set": lambda: " ".join(set(text.split())),
    "words once, C word set": lambda: distinct_words(text.encode("ascii")).decode("ascii"),
    "FTS5 insert, every word": lambda: fts(text),
    "FTS5 insert, each word once": lambda: fts(once),
}}
step = STEPS[{step!r}]
for _ in range({calls}):
    step()
print(len(text.split()), len(once.split()))
"""

STEPS = (
    "index text",
    "words once, Python set",
    "words once, C word set",
    "FTS5 insert, every word",
    "FTS5 insert, each word once",
)


def _instructions(step: str, calls: int) -> tuple[int, str]:
    code = _CHILD.format(src=str(ROOT / "src"), root=str(ROOT), fts5=FTS5, step=step, calls=calls)
    argv = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count: {done.stderr[-400:]}")
    return int(found[1]), done.stdout.strip()


def measure(calls: int) -> dict[str, object]:
    """Instructions per call of each step, and the words of the text (all, distinct)."""
    per_call: dict[str, int] = {}
    words = ""
    for step in STEPS:
        few, _ = _instructions(step, calls // 6)
        many, words = _instructions(step, calls)
        per_call[step] = round((many - few) / (calls - calls // 6))
    every, once = (int(n) for n in words.split())
    return {"words": every, "distinct words": once, "instructions per call": per_call}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=600, help="calls of each step in the longer run")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.calls), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
