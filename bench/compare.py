"""`python -m bench compare REF`: the regression guard. The working tree against a commit, both
measured in one run on the same machine, so a change's cost shows as a ratio rather than as a
figure to set beside one taken on another day under another load.

REF is exported (`git archive`) and installed, with its own dependencies, into a virtual
environment of its own; the working tree runs on the bench's interpreter with its `src` first on
the path. Each round starts fresh servers of both builds in turn, as `goals` does: SMTP ingest
in the default configuration (msg/s, and msg per server CPU-second counted until the server is
idle again), then the list page and one message under wrk, then the idle resident memory. The
order of the two builds flips every round, so a drift in the machine's load favours neither.
"""

from __future__ import annotations

import io
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench import goals
from bench.api import measure_inboxd as measure_reads
from bench.rig import INBOXD_POSTGRES, INBOXD_SQLITE, Rig
from bench.servers import BenchError, Build, cpu_model

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "inboxd-bench"
# Written into a REF environment after pip succeeded: a directory without it is rebuilt.
COMPLETE = ".inboxd-bench-complete"
PIP_TIMEOUT = 900.0


@dataclass(frozen=True, slots=True)
class Side:
    """One of the two builds under comparison."""

    label: str
    build: Build
    origin: str  # the inboxd package the build's interpreter imports


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    unit: str


@dataclass
class Column:
    """One build's figures for one row, one value per round (NaN: that round failed)."""

    values: list[float] = field(default_factory=list)

    @property
    def measured(self) -> list[float]:
        return [v for v in self.values if v == v]


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"git {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


def resolve(ref: str) -> str:
    """The full commit id REF names in this repository."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except BenchError:
        raise BenchError(f"{ref!r} names no commit in {ROOT}") from None


def _subject(commit: str) -> str:
    line = _git("log", "-1", "--format=%h %s", commit)
    return line if len(line) <= 90 else line[:89] + "…"


def tree_state() -> str:
    head = _subject("HEAD")
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return f"HEAD {head}" + (" + uncommitted changes" if dirty else "")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def ref_environment(commit: str, *, workdir: Path, cache: Path, keep: bool) -> tuple[Path, str]:
    """A virtual environment holding REF's inboxd (not editable, so the exported tree can go),
    and how it was had. With `keep` it is built into `cache/<commit>`, where later runs find it."""
    cached = cache.resolve() / commit  # absolute: its interpreter's imports are checked against it
    if (cached / COMPLETE).exists():
        return cached, f"reused {cached}"
    venv = cached if keep else workdir / "ref-venv"
    shutil.rmtree(venv, ignore_errors=True)  # an earlier build that did not finish
    source = workdir / "ref-source"
    started = time.monotonic()
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=False)
    if archive.returncode != 0:
        raise BenchError(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    venv.parent.mkdir(parents=True, exist_ok=True)
    for argv in (
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(source)],
    ):
        try:
            done = subprocess.run(argv, env=_clean_env(), capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise BenchError(f"{shlex.join(argv)} did not finish in {PIP_TIMEOUT:.0f} s") from None
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise BenchError(f"{shlex.join(argv)} exited {done.returncode}:\n{tail}")
    shutil.rmtree(source, ignore_errors=True)
    (venv / COMPLETE).write_text(commit + "\n")
    how = "kept" if keep else "removed at the end; --keep-venv keeps it"
    return venv, f"built in {time.monotonic() - started:.0f} s at {venv} ({how})"


def origin(build: Build) -> str:
    """Where the build's interpreter imports inboxd from."""
    argv = [build.python, "-P", "-c", "import inboxd; print(inboxd.__file__)"]
    done = subprocess.run(argv, env=build.environment(dict(os.environ)), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchError(f"{build.python} cannot import inboxd: {done.stderr.strip()[-300:]}")
    return str(Path(done.stdout.strip()).parent)


def sides(commit: str, venv: Path) -> tuple[Side, Side]:
    ref = Build(python=str(venv / "bin/python"), pythonpath="")
    own_path = os.environ.get("PYTHONPATH", "")
    tree = Build(python=sys.executable, pythonpath=os.pathsep.join(p for p in (str(ROOT / "src"), own_path) if p))
    ref_side = Side(f"REF {commit[:7]}", ref, origin(ref))
    tree_side = Side("working tree", tree, origin(tree))
    # Both checks matter: an `inboxd` installed elsewhere would make the comparison a sham.
    if not Path(ref_side.origin).is_relative_to(venv):
        raise BenchError(f"REF's interpreter imports inboxd from {ref_side.origin}, not from {venv}")
    if not Path(tree_side.origin).is_relative_to(ROOT / "src"):
        raise BenchError(f"the working tree's interpreter imports inboxd from {tree_side.origin}, not {ROOT / 'src'}")
    return ref_side, tree_side


def rows(fill: int) -> tuple[Row, ...]:
    return (
        Row("ingest, msg per server CPU-second", "msg"),
        Row("ingest, msg/s", "msg/s"),
        Row(f"list page (30 of {fill:,}), req/s", "req/s"),
        Row("list page, req per server CPU-second", "req"),
        Row("one message, req/s", "req/s"),
        Row("one message, req per server CPU-second", "req"),
        Row("resident memory, idle, MB", "MB"),
    )


MEASURES = ("ingest", "reads", "idle memory")


def measure_one(
    rig: Rig, side: Side, what: str, *, messages: int, fill: int, duration: float, backend: str = "sqlite"
) -> dict[int, float]:
    """One measure of one build: {row index: value}. `backend` is where ingest and the reads store
    (idle memory is always measured as `make run` starts inboxd, on SQLite)."""
    if what == "ingest":
        rate, per_cpu = goals.ingest(rig, backend=backend, messages=messages, build=side.build)
        return {0: per_cpu, 1: rate}
    if what == "reads":
        connections = goals.HTTP_CONNECTIONS
        figures = measure_reads(
            rig,
            target=INBOXD_POSTGRES if backend == "postgres" else INBOXD_SQLITE,
            fill=fill,
            connections=connections,
            duration=duration,
            build=side.build,
        )
        found = {}
        for row, figure in zip((2, 4), figures, strict=False):
            if not figure.ok or figure.result is None:
                raise BenchError(f"{figure.request}: {figure.failure or figure.result}")
            found[row] = figure.result.rps
            found[row + 1] = figure.per_cpu_second
        return found
    return {6: goals.start_seconds(rig, build=side.build)[2]}


def measure(
    rig: Rig,
    pair: tuple[Side, Side],
    *,
    repeats: int,
    messages: int,
    fill: int,
    duration: float,
    backend: str = "sqlite",
) -> tuple[list[tuple[Column, Column]], list[str]]:
    """Per row, the (REF, tree) columns, every round's value in place (NaN where it failed), and
    what failed."""
    table = [(Column(), Column()) for _ in rows(fill)]
    notes: list[str] = []
    for round_ in range(1, repeats + 1):
        order = (0, 1) if round_ % 2 else (1, 0)
        print(f"  round {round_} of {repeats}: {pair[order[0]].label} first ...", flush=True)
        for columns in table:
            for column in columns:
                column.values.append(float("nan"))
        for what in MEASURES:
            for index in order:
                side = pair[index]
                try:
                    found = measure_one(
                        rig, side, what, messages=messages, fill=fill, duration=duration, backend=backend
                    )
                except BenchError as exc:
                    notes.append(f"round {round_}, {side.label}, {what}: {exc}")
                    continue
                for row, value in found.items():
                    table[row][index].values[-1] = value
    return table, notes


def _cell(values: Sequence[float], suffix: str = "") -> str:
    if not values:
        return "not measured"
    spread = f" ({goals.num(min(values))}–{goals.num(max(values))})" if len(values) > 1 else ""
    return f"{goals.num(statistics.median(values))}{suffix}{spread}"


def markdown(pair: tuple[Side, Side], table: Sequence[tuple[Column, Column]], *, fill: int, repeats: int) -> str:
    lines = [
        f"| measure (median of {repeats}, min–max) | {pair[0].label} | {pair[1].label} | tree / REF |",
        "|---|---:|---:|---:|",
    ]
    for row, (ref, tree) in zip(rows(fill), table, strict=True):
        # A ratio is taken within a round (the builds measured back to back), then the median.
        ratios = [t / r for r, t in zip(ref.values, tree.values, strict=True) if r == r and t == t and r]
        lines.append(f"| {row.name} | {_cell(ref.measured)} | {_cell(tree.measured)} | {_cell(ratios, '×')} |")
    return "\n".join(lines)


def _load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def run(
    rig: Rig,
    *,
    ref: str,
    repeats: int,
    messages: int,
    fill: int,
    duration: float,
    cache: Path,
    keep_venv: bool,
    backend: str = "sqlite",
) -> bool:
    """Print the comparison; False when a measurement failed. A REF that cannot be built raises."""
    started = time.monotonic()
    print(f"inboxd regression guard: the working tree against {ref}")
    print(
        f"  machine: {os.cpu_count()} CPUs ({cpu_model() or platform.machine()}), Python "
        f"{platform.python_version()}, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    )
    print(f"  load average (1, 5, 15 min) before: {_load()}", flush=True)
    commit = resolve(ref)
    print(f"  REF {ref} = {_subject(commit)}", flush=True)
    venv, how = ref_environment(commit, workdir=rig.workdir, cache=cache, keep=keep_venv)
    pair = sides(commit, venv)
    print(f"    its virtual environment: {how}")
    print(f"    inboxd from {pair[0].origin}")
    print(f"  working tree: {tree_state()}")
    print(f"    inboxd from {pair[1].origin}, Python {sys.executable}")
    print(f"  SMTP load client: {rig.client}; HTTP load: wrk, 1 thread, {goals.HTTP_CONNECTIONS} connections")
    print(f"  ingest and reads stored on: {'PostgreSQL (' + rig.pg_url + ')' if backend == 'postgres' else 'SQLite'}")
    print(flush=True)
    table, notes = measure(rig, pair, repeats=repeats, messages=messages, fill=fill, duration=duration, backend=backend)
    print()
    print(markdown(pair, table, fill=fill, repeats=repeats))
    print()
    print(
        f"SMTP ingest: {goals.CONNECTIONS} connections, {messages:,} mails of 4 KB to one mailbox, each build as "
        "`make run` starts it.\nRatios: the median of the per-round ratios; above 1 is better, except for memory. "
        "Only ratios from one run compare: the load on the machine moves."
    )
    print(f"load average (1, 5, 15 min) after: {_load()}; {os.cpu_count()} CPUs")
    if notes:
        print("\nProblems:")
        print("\n".join(f"  {note}" for note in notes))
    print(f"\ncompare took {time.monotonic() - started:.0f} s")
    # The commit id, not REF as given: a name such as HEAD~3 or main moves on.
    print(
        f"reproduce: python -m bench compare {commit[:12]} --repeats {repeats} --messages {messages} "
        f"--fill {fill} --duration {duration:g}"
        + ("" if backend == "sqlite" else f" --backend {backend}")
        + rig.client_flag()
        + f"   (REF {ref})"
    )
    return not notes
