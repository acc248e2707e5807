"""Build the compiled variants the benchmark measures, in a scratch directory (never in the tree).

`mypyc_tree` copies `src/` and compiles the chosen modules of the copy with mypyc (shipped with
mypy, already in the test extra); `c_receiver` compiles `smtp_receiver.c` with the system's cc.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent.parent / "src"

# The modules of the two steps: the SMTP protocol (session, transaction, DATA's buffer, the
# replies) and the summary parse (the walk, the MIME tree under it, and the decoding and
# HTML-to-text helpers it calls).
SMTP_MODULES = ("smtp/session.py", "smtp/transaction.py", "smtp/data.py", "smtp/replies.py")
PARSE_MODULES = ("mail/message_walk.py", "mail/mime_tree.py", "mail/decoding.py", "mail/html_text.py")

# mypyc compiles no statement but declarations in a class body; `Transaction` declares what the
# session holds under `if TYPE_CHECKING:` (for mypy alone). In the copy those declarations are
# made plain ones: the same names and types, which mypyc then lays out as the class's fields.
_DECLARED = "    if TYPE_CHECKING:\n        # What the session"


def _unguard_declarations(path: Path) -> None:
    text = path.read_text()
    start = text.index(_DECLARED)
    end = text.index("    def do_mail", start)
    lines = text[start:end].splitlines(keepends=True)[1:]
    body = "".join(line[4:] if line.startswith("        ") else line for line in lines)
    path.write_text(text[:start] + body + text[end:])


# mypyc takes no surrogate code point in a string literal: the same pattern, spelled with chr().
_SURROGATES = ('re.compile("[\\ud800-\\udfff]")', 're.compile("[" + chr(0xD800) + "-" + chr(0xDFFF) + "]")')


def _spell_surrogates(path: Path) -> None:
    text = path.read_text()
    if _SURROGATES[0] not in text:
        raise RuntimeError(f"{path}: the surrogate pattern the build rewrites is not there any more")
    path.write_text(text.replace(*_SURROGATES))


def mypyc_tree(scratch: Path, modules: tuple[str, ...] = SMTP_MODULES + PARSE_MODULES) -> Path:
    """A copy of src/ with `modules` compiled in place; the directory to put first on PYTHONPATH."""
    tree = scratch / "src"
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    # mypyc type-checks what the modules import; the libraries without types (dkimpy, tinycss2...)
    # are skipped, as the project's mypy settings skip them.
    (tree / "mypy.ini").write_text("[mypy]\nignore_missing_imports = True\n")
    if "smtp/transaction.py" in modules:
        _unguard_declarations(tree / "inboxd" / "smtp" / "transaction.py")
    if "mail/decoding.py" in modules:
        _spell_surrogates(tree / "inboxd" / "mail" / "decoding.py")
    mypyc = Path(sys.executable).with_name("mypyc")
    argv = [str(mypyc), *(f"inboxd/{module}" for module in modules)]
    env = {**os.environ, "MYPYPATH": str(tree)}
    built = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if built.returncode != 0:
        raise RuntimeError(f"mypyc failed:\n{built.stdout[-2000:]}{built.stderr[-2000:]}")
    for module in modules:
        stem = (tree / "inboxd" / module).with_suffix("")
        if not list(stem.parent.glob(f"{stem.name}.cpython-*.so")):
            raise RuntimeError(f"mypyc left no extension for {module}")
    return tree


def c_receiver(scratch: Path) -> Path:
    """The minimal C SMTP receiver, built with -O2."""
    binary = scratch / "smtp_receiver"
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-Wall", "-Werror", "-o", str(binary), str(HERE / "smtp_receiver.c")], check=True)
    return binary
