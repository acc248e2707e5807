"""The README's and the docs' examples run as shown: the first session, the signature checks and
the three-command local webhook recipe of docs/webhooks.md (`make run` with
INBOXD_WEBHOOK_ALLOW_HTTP, `python -m inboxd.devhook`, one mail); and every relative link and
anchor between README.md and docs/*.md resolves."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
WEBHOOKS = (ROOT / "docs" / "webhooks.md").read_text()
SIGNATURE = "sha256=76c83fd0acdf22faed320674fe8e04d528cfe8a17905e720a9611e40677c03b7"


def section(text: str, title: str) -> str:
    """The section of `text` titled `title` (at any level), up to the next heading outside code."""
    lines = text.splitlines(keepends=True)
    start = lines.index(next(line for line in lines if re.fullmatch(rf"#+ {re.escape(title)}\n", line)))
    in_code = False
    for end in range(start + 1, len(lines)):
        in_code ^= lines[end].startswith("```")
        if not in_code and lines[end].startswith("#"):
            break
    else:
        end = len(lines)
    return "".join(lines[start:end])


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def test_signature_examples_run_as_shown(tmp_path: Path) -> None:
    verifying = section(WEBHOOKS, "Verifying the signature")
    python = blocks(verifying, "python")
    assert len(python) == 2
    outputs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
        for code in python
    ]
    assert outputs == ["verified evt_example\n", "True\n"]
    (shell,) = blocks(verifying, "sh")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.strip() == SIGNATURE


def test_local_webhook_recipe_runs_as_shown(tmp_path: Path) -> None:
    (recipe,) = blocks(section(WEBHOOKS, "A receiver on your laptop, in three commands"), "sh")
    commands = [line.split("  #")[0].strip() for line in recipe.strip().splitlines()]
    assert len(commands) == 3
    http, smtp, hook = free_port(), free_port(), free_port()

    def ports(command: str) -> str:
        return command.replace("8025", str(http)).replace("2525", str(smtp)).replace("8787", str(hook))

    # 1. make run, on free ports and a fresh data directory (ARGS passes through).
    data = tmp_path / "data"
    serve = subprocess.Popen(
        ["bash", "-c", commands[0] + f' ARGS="--port {http} --smtp-port {smtp} --data-dir {data}"'],
        cwd=ROOT,
        env={**os.environ, "INBOXD_SUBMISSION_PORT": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            if f":{http}" in line and "HTTP on" in line:
                break
        # The banner's sign-in command runs as printed, from where `make run` ran.
        for line in serve.stdout:
            hint = re.search(r"`([^`]*users sign-in-link[^`]*)`", line)
            if hint:
                break
        assert hint and hint.group(1).startswith(f"INBOXD_DATA_DIR={data} .venv/bin/inboxd "), line
        link = subprocess.run(["bash", "-c", hint.group(1)], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert link.returncode == 0 and link.stdout.splitlines()[-1].startswith("http"), link.stderr
        # 2. the receiver, run from a directory whose data/bootstrap-token is this inboxd's.
        devhook = subprocess.Popen(
            ["bash", "-c", ports(commands[1]).replace(".venv/bin/python", sys.executable) + " --once"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert devhook.stdout is not None
        first = devhook.stdout.readline()
        assert "devhook: listening" in first, first + devhook.stdout.read()
        # 3. one mail.
        subprocess.run(["bash", "-c", ports(commands[2]).replace("python3", sys.executable)], check=True, timeout=60)
        out, _ = devhook.communicate(timeout=60)
        assert devhook.returncode == 0, out
        assert re.search(r"devhook: verified evt_\w+: from 'me@example.org', subject 'hello'", out), out
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(timeout=30)


def test_commands_name_what_make_run_installs() -> None:
    """After `make run`, `inboxd` is not on PATH: shell examples say `.venv/bin/inboxd`, and the MCP
    configuration an absolute path (`tests/test_first_hour.py` runs what `mcp --config` prints), in the
    README and in every page of docs/."""
    every = "".join(page.read_text() for page in PAGES)
    for shell in blocks(every, "sh"):
        for line in shell.splitlines():
            assert not re.match(r"\s*(\w+=\S+\s+)*inboxd\s", line), line
    (mcp,) = [b for b in blocks(every, "json") if "mcpServers" in b]
    assert json.loads(mcp)["mcpServers"]["inboxd"]["command"].startswith("/")


def test_first_session_shows_what_a_204_did() -> None:
    """A 204 has no body: the first session's curl steps that answer one print the status."""
    (first,) = blocks(README[README.index("## A first session") :], "sh")[:1]
    quiet = [line for line in first.splitlines() if re.search(r"curl .*-X (PUT|DELETE)", line)]
    assert len(quiet) == 3
    assert all("-w '%{http_code}\\n'" in line for line in quiet), quiet


def test_first_session_sends_with_what_every_python_has() -> None:
    (first,) = blocks(README[README.index("## A first session") :], "sh")[:1]
    assert "import smtplib" in first and first.index("import smtplib") < first.index("swaks")


def test_first_session_runs_as_shown(tmp_path: Path) -> None:
    """The whole first session, on free ports, from a directory whose `data/` is the server's."""
    (first,) = blocks(README[README.index("## A first session") :], "sh")[:1]
    http, smtp = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("INBOXD_")},
        "INBOXD_HTTP_PORT": str(http),
        "INBOXD_SMTP_PORT": str(smtp),
        "INBOXD_SUBMISSION_PORT": "0",
        "INBOXD_DATA_DIR": str(tmp_path / "data"),
    }
    serve = subprocess.Popen(
        [sys.executable, "-m", "inboxd", "serve"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert serve.stdout is not None
        for line in serve.stdout:
            if "HTTP on" in line:
                break
        script = first.replace("8025", str(http)).replace("2525", str(smtp)).replace("python3", sys.executable)
        done = subprocess.run(
            ["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    assert done.returncode == 0, done.stderr
    assert "Welcome! Your code is 123456." in done.stdout
    assert done.stdout.splitlines()[-3:] == ["204", "204", "204"], done.stdout


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    dashes, a repeated one numbered (`-1`, `-2`, ...); headings inside code blocks are none."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.*?) *#*$", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(pages: list[Path]) -> list[str]:
    """Every relative link of these pages (outside code) whose file or anchor does not exist."""
    broken = []
    for page in pages:
        text = page.read_text()
        prose = re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))
        for target in re.findall(r"\]\(([^)\s]+)\)", prose):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (page.parent / path).resolve() if path else page
            if not where.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where.read_text()):
                broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def test_every_link_resolves() -> None:
    """README.md and docs/*.md link to each other's sections: each relative link names a file
    that exists and, for a page, a heading it has."""
    assert broken_links(PAGES) == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    """The check above can fail: a missing file and a missing heading are each reported."""
    (tmp_path / "other.md").write_text("# Other\n\n## A `code` heading: yes\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#a-code-heading-yes) [fine](#page) [gone](missing.md)"
        " [gone](other.md#nowhere) [gone](#nowhere)\n```\n[in code](missing.md)\n```\n"
    )
    assert broken_links([page]) == [
        "page.md: missing.md (no such file)",
        "page.md: other.md#nowhere (no such heading)",
        "page.md: #nowhere (no such heading)",
    ]
