"""The chaos harness: real worker processes, really killed, on a real database.

`run_chaos` spawns N ``perdure worker tests.chaos.workload:app`` processes, SIGKILLs
a random one every U(1, 3) s and restarts it (optionally some faults are a graceful
SIGTERM or a SIGSTOP/SIGCONT freeze instead), optionally crash-restarts a throwaway
PostgreSQL cluster (`ThrowawayPostgres`), starts runs of the ``chaos`` workflow,
signals each run once it waits for its ``go`` event (optionally some before), and
waits, with a deadline and a stall detector that dumps the live runs, for every run
to end. Then it checks the oracle:

* every run completed, none stuck, none lost;
* zero duplicate journal rows, and each run has exactly the workflow's journal keys;
* every step's side effect was recorded at least once, each journal value is the
  token of one real execution, and each run's output matches its journal;
* re-executions (side effects minus journal rows) stay within faults x concurrency
  (+ database restarts x workers x concurrency);
* no worker process exited unless the harness meant it to;
* SQLite: ``PRAGMA integrity_check`` is ok after every kill and at the end.

It prints the figures (runs, kills, re-executed steps, time to drain, warning-log
rate) and the seed. ``seed=`` (``--seed``, or ``CHAOS_SEED`` for the pytest entry)
replays the same choices: victims, fault intervals, database downtimes (the OS
scheduling around them is not replayable). From the shell::

    python -m tests.chaos.harness --backend sqlite --runs 200 --workers 4
    python -m tests.chaos.harness --backend postgres-throwaway --runs 500 --pg-restarts 1
    python -m tests.chaos.harness --help
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from perdure import App
from perdure.errors import BackendError

from . import workload

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
TERMINAL = ("completed", "failed", "cancelled")


def log(message: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- databases


class Probe:
    """Direct SQL access to the database under test (the oracle's eyes).

    Reconnects after errors (a PostgreSQL restart), so callers may retry."""

    def __init__(self, kind: str, url: str, schema: str) -> None:
        self.kind = kind
        self.url = url
        self.schema = schema
        self._conn: Any = None

    def _connect(self) -> Any:
        if self.kind == "sqlite":
            path = self.url.split("sqlite:///", 1)[1]
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            return conn
        import psycopg

        return psycopg.connect(
            self.url,
            autocommit=True,
            connect_timeout=5,
            options=f"-c search_path={self.schema}",
        )

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "postgres":
            sql = sql.replace("?", "%s")
        try:
            if self._conn is None:
                self._conn = self._connect()
            return list(self._conn.execute(sql, params).fetchall())
        except Exception:
            self.close()
            raise

    def retry(self, sql: str, params: tuple[Any, ...] = (), timeout: float = 60) -> list[Any]:
        """`query`, retried through connection errors for up to ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.query(sql, params)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def integrity_check(self) -> str:
        assert self.kind == "sqlite"
        rows = self.query("PRAGMA integrity_check")
        return "\n".join(str(r[0]) for r in rows)


def _json(value: str | bytes | None) -> Any:
    return None if value is None else json.loads(value)


class ThrowawayPostgres:
    """A PostgreSQL cluster of our own in a temp dir (never the shared server).

    Runs as an unprivileged OS user when this process is root (postgres refuses
    root). `restart` is an immediate (crash-like) stop followed by a start."""

    def __init__(self, base: Path | None = None, user: str = "postgres", options: str = "") -> None:
        self.options = options  # extra server options, e.g. "-c wal_writer_delay=10s"
        self.dir = Path(tempfile.mkdtemp(prefix="perdure-chaos-pg-", dir=base))
        self.data = self.dir / "data"
        self.port = free_port()
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", user, "--"]
            shutil.chown(self.dir, user=user)
        os.chmod(self.dir, 0o755)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.running = False

    def _cmd(self, *args: str, timeout: float = 120) -> None:
        result = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")

    def init(self) -> ThrowawayPostgres:
        self._cmd("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        return self

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            f"-c max_connections=300 -c fsync=off -c full_page_writes=off {self.options}"
        )
        self._cmd(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "server.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        self.running = True

    def stop(self, mode: str = "immediate") -> None:
        self._cmd("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def restart(self, down: float = 0.0) -> None:
        """Crash-stop (``-m immediate``), stay down ``down`` s, start again."""
        self.stop("immediate")
        time.sleep(down)
        self.start()

    def destroy(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


def throwaway_problem(user: str = "postgres") -> str | None:
    """Why a `ThrowawayPostgres` cannot run here (None: it can)."""
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        return "initdb / pg_ctl are not on PATH"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam(user)
        except KeyError:
            return f"running as root and there is no OS user {user!r} to run postgres as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is not available"
    return None


# --------------------------------------------------------------------------- workers


def worker_env(kind: str, url: str, schema: str, effects: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker process (and of the harness's own App)."""
    env = dict(os.environ)
    env["PERDURE_DATABASE_URL"] = url
    env["PERDURE_SCHEMA"] = schema
    env["CHAOS_EFFECTS_DIR"] = str(effects)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PERDURE_SWEEP_INTERVAL", "0")
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """One ``perdure worker`` process; its output goes to a log file (never a pipe)."""

    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float
    killed: bool = False  # we SIGKILLed it on purpose

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 12000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            if sig == signal.SIGKILL:
                self.killed = True
            os.kill(self.pid, sig)

    def ready(self) -> bool:
        """True once the worker logged that it serves (its SIGTERM handler is set)."""
        return " serving " in self.log_tail(100_000)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (graceful), then SIGKILL if it does not exit in ``timeout`` s. A
        worker still starting up is given up to 20 s to get ready first (before its
        handler is installed, SIGTERM would just end the interpreter)."""
        deadline = time.monotonic() + 20
        while self.alive() and not self.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(AssertionError, OSError):  # a frozen worker: kill it still
                self.dump()
            self.kill()
            return self.proc.wait(10)

    def dump(self) -> None:
        """Have the worker log what it waits on (SIGUSR1), for a failure's report."""
        if self.alive():
            size = self.log_path.stat().st_size
            os.kill(self.pid, signal.SIGUSR1)
            wait_until(
                lambda: "end of the dump" in self.log_path.read_text(errors="replace")[size:],
                10,
                "the worker's dump",
            )


def spawn_worker(
    env: dict[str, str],
    log_dir: Path,
    *,
    concurrency: int = 4,
    lease: float = 1.5,
    poll_interval: float | None = None,
    name: str = "w",
) -> WorkerProcess:
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"worker-{name}-{time.monotonic_ns()}.log"
    args = [
        sys.executable, "-m", "perdure.cli.main", "worker", "tests.chaos.workload:app",
        "--concurrency", str(concurrency), "--lease", f"{lease}s",
    ]  # fmt: skip
    if poll_interval is not None:
        args += ["--poll-interval", str(poll_interval)]
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(args, cwd=log_dir, env=env, stdout=out, stderr=subprocess.STDOUT)
    return WorkerProcess(proc, log_path, time.monotonic())


@dataclass
class Exit:
    pid: int
    code: int | None
    killed: bool
    log_tail: str


class WorkerPool:
    """N worker slots; a supervisor thread restarts dead workers and (optionally)
    SIGKILLs a random live one every U(kill_every) s."""

    def __init__(
        self,
        size: int,
        spawn: Callable[[str], WorkerProcess],
        *,
        rng: random.Random,
        kill_every: tuple[float, float] | None = None,
        restart_delay: float = 0.5,
        sigterm_share: float = 0.0,
        sigstop_share: float = 0.0,
        stop_for: tuple[float, float] = (2.0, 4.0),
    ) -> None:
        self._spawn = spawn
        self.sigterm_share = sigterm_share
        self.sigstop_share = sigstop_share
        self.stop_for = stop_for
        self.terms = 0
        self.freezes = 0
        self._frozen: dict[int, tuple[WorkerProcess, float]] = {}
        self._rng = rng
        self.kill_every = kill_every
        self.restart_delay = restart_delay
        self.slots: list[WorkerProcess | None] = [None] * size
        self._restart_at: dict[int, float] = {}
        self.kills = 0
        self.exits: list[Exit] = []
        self.spawned = 0
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._killing = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_kill: float | None = None

    def start(self) -> None:
        with self._lock:
            for i in range(len(self.slots)):
                self.slots[i] = self._spawn_slot(i)
        self._thread = threading.Thread(target=self._supervise, name="chaos-supervisor")
        self._thread.daemon = True
        self._thread.start()

    def _spawn_slot(self, i: int) -> WorkerProcess:
        self.spawned += 1
        return self._spawn(str(i))

    def start_killing(self) -> None:
        self._killing.set()

    def stop_killing(self) -> None:
        self._killing.clear()

    @property
    def live(self) -> list[WorkerProcess]:
        with self._lock:
            return [w for w in self.slots if w is not None and w.alive()]

    def kill_random(self) -> WorkerProcess | None:
        """SIGKILL a random live worker (or, by the configured shares, SIGTERM it or
        SIGSTOP it for U(stop_for) s); the fault lands on a running, unfrozen one."""
        with self._lock:
            live = [
                w for w in self.slots if w is not None and w.alive() and w.pid not in self._frozen
            ]
            if not live:
                return None
            victim = self._rng.choice(live)
            dice = self._rng.random()
            if dice < self.sigstop_share:
                os.kill(victim.pid, signal.SIGSTOP)
                until = time.monotonic() + self._rng.uniform(*self.stop_for)
                self._frozen[victim.pid] = (victim, until)
                self.freezes += 1
            elif dice < self.sigstop_share + self.sigterm_share:
                victim.killed = True  # its own graceful exit is expected
                victim.proc.send_signal(signal.SIGTERM)
                self.terms += 1
            else:
                victim.kill(signal.SIGKILL)
                self.kills += 1
            self.last_kill = time.monotonic()
            return victim

    def _thaw(self, everyone: bool = False) -> None:
        now = time.monotonic()
        for pid, (worker, until) in list(self._frozen.items()):
            if everyone or now >= until:
                del self._frozen[pid]
                if worker.alive():
                    os.kill(pid, signal.SIGCONT)

    def _supervise(self) -> None:
        next_kill: float | None = None
        while not self._stop.is_set():
            now = time.monotonic()
            with self._lock:
                self._thaw()
                for i, w in enumerate(self.slots):
                    if w is not None and not w.alive() and i not in self._restart_at:
                        w.proc.wait()
                        self.exits.append(
                            Exit(
                                w.pid, w.proc.returncode, w.killed, "" if w.killed else w.log_tail()
                            )
                        )
                        if not w.killed:
                            log(f"worker {w.pid} exited by itself with {w.proc.returncode}")
                        self._restart_at[i] = now + self.restart_delay
                for i, when in list(self._restart_at.items()):
                    if now >= when:
                        del self._restart_at[i]
                        self.slots[i] = self._spawn_slot(i)
                if self._killing.is_set() and self.kill_every is not None:
                    if next_kill is None:
                        next_kill = now + self._rng.uniform(*self.kill_every)
                    elif now >= next_kill:
                        self.kill_random()
                        next_kill = now + self._rng.uniform(*self.kill_every)
                else:
                    next_kill = None
            self._stop.wait(0.05)

    def unexpected_exits(self) -> list[Exit]:
        with self._lock:
            return [e for e in self.exits if not e.killed]

    def shutdown(self) -> list[int | None]:
        """Stop supervising; stop every worker gracefully; their exit codes."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._thaw(everyone=True)
            workers = [w for w in self.slots if w is not None and w.alive()]
        return [w.stop() for w in workers]

    def dumps(self) -> list[str]:
        """Each live worker's log after it logged what it waits on (for a failure)."""
        with self._lock:
            self._thaw(everyone=True)
            workers = [w for w in self.slots if w is not None and w.alive()]
        for w in workers:
            with contextlib.suppress(AssertionError, OSError):
                w.dump()
        return [f"--- worker {w.pid} ---\n{w.log_tail()}" for w in workers]

    def kill_all(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._thaw(everyone=True)
        for w in self.slots:
            if w is not None and w.alive():
                w.kill()
                w.proc.wait(10)


# --------------------------------------------------------------------------- effects


@dataclass(frozen=True)
class Effect:
    run_id: str
    key: str
    token: str

    @property
    def pid(self) -> int:
        return int(self.token.split("-", 1)[0])


def read_effects(directory: Path) -> list[Effect]:
    """Every side effect recorded so far (complete lines only)."""
    found: list[Effect] = []
    for path in sorted(directory.glob("effects-*.log")):
        for line in path.read_text().splitlines():
            parts = line.split("\t")
            if len(parts) == 3:
                found.append(Effect(*parts))
    return found


def warning_lines(log_dir: Path) -> tuple[int, int]:
    """(WARNING/ERROR lines in all worker logs, the most any one worker wrote in one
    second): the error-log rate while the database is down (RELIABILITY R2)."""
    total = 0
    peak = 0
    for path in log_dir.glob("worker-*.log"):
        per_second: Counter[str] = Counter()
        for line in path.read_text(errors="replace").splitlines():
            if " WARNING " in line or " ERROR " in line or " CRITICAL " in line:
                total += 1
                per_second[line[:19]] += 1
        peak = max([peak, *per_second.values()])
    return total, peak


# --------------------------------------------------------------------------- a lab


class Lab:
    """One database, worker processes on it, and the oracle's views (focused tests).

    ``spawn`` starts a worker process; ``close`` kills whatever is still running."""

    def __init__(self, kind: str, url: str, schema: str, workdir: Path, **extra_env: str) -> None:
        self.kind = kind
        self.url = url
        self.schema = schema
        self.workdir = workdir
        self.effects = workdir / "effects"
        self.effects.mkdir(parents=True, exist_ok=True)
        self.env = worker_env(kind, url, schema, self.effects, **extra_env)
        self.app = workload.register(App(url, schema=schema))
        self.app.migrate()
        self.probe = Probe(kind, url, schema)
        self.workers: list[WorkerProcess] = []

    def spawn(
        self, *, concurrency: int = 2, lease: float = 1.0, poll_interval: float | None = None
    ) -> WorkerProcess:
        worker = spawn_worker(
            self.env,
            self.workdir / "logs",
            concurrency=concurrency,
            lease=lease,
            poll_interval=poll_interval,
            name=str(len(self.workers)),
        )
        self.workers.append(worker)
        return worker

    def start(self, **spec: Any) -> str:
        handle = self.app.start(workload.WORKFLOW, spec)
        return handle.id

    def effects_of(self, run_id: str, key: str | None = None) -> list[Effect]:
        return [
            e
            for e in read_effects(self.effects)
            if e.run_id == run_id and (key is None or e.key == key)
        ]

    def journal(self, run_id: str) -> dict[str, Any]:
        rows = self.probe.retry(
            "SELECT key, CAST(output AS text) FROM steps WHERE run_id = ?", (run_id,)
        )
        return {key: _json(output) for key, output in rows}

    def status(self, run_id: str) -> tuple[str, dict[str, Any] | None]:
        rows = self.probe.retry(
            "SELECT status, CAST(error AS text) FROM runs WHERE id = ?", (run_id,)
        )
        status, error = rows[0]
        return status, _json(error)

    def events(self, run_id: str, kind: str) -> int:
        rows = self.probe.retry(
            "SELECT count(*) FROM events WHERE run_id = ? AND type = ?", (run_id, kind)
        )
        return int(rows[0][0])

    def wait_status(self, run_id: str, status: str, timeout: float = 60) -> None:
        try:
            wait_until(lambda: self.status(run_id)[0] == status, timeout, f"run {status}")
        except AssertionError:
            raise AssertionError(
                f"run {run_id} is {self.status(run_id)} after {timeout:g}s, not {status}\n"
                + dump_state(self.probe)
                + "".join(f"\n--- worker {w.pid} ---\n{w.log_tail()}" for w in self.workers)
            ) from None

    def close(self) -> None:
        for worker in self.workers:
            if worker.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGCONT)
                worker.kill()
                worker.proc.wait(10)
        self.app.close()
        self.probe.close()


# --------------------------------------------------------------------------- the run


@dataclass
class ChaosConfig:
    """One chaos experiment. ``kind`` is ``sqlite`` or ``postgres``; for a PostgreSQL
    restart give ``pg`` (a started `ThrowawayPostgres` whose ``url`` is ``url``)."""

    kind: str
    url: str
    workdir: Path
    schema: str = "perdure"
    runs: int = 40
    workers: int = 3
    concurrency: int = 4
    lease: float = 1.5
    poll_interval: float | None = None
    kill_every: tuple[float, float] | None = (1.0, 3.0)
    kill_for: float | None = None  # seconds of kills; None: until every run ended
    sigterm_share: float = 0.0  # share of the faults that are a graceful SIGTERM
    sigstop_share: float = 0.0  # share that freeze a worker (SIGSTOP, later SIGCONT)
    stop_for: tuple[float, float] = (2.0, 4.0)
    early_signals: float = 0.0  # share of runs signaled at once (buffered before the wait)
    restart_delay: float = 0.5
    start_rate: float | None = None  # runs started per second; None: all at once
    pg: ThrowawayPostgres | None = None
    pg_restarts: int = 0
    pg_down: tuple[float, float] = (0.0, 2.0)
    pg_every: tuple[float, float] = (5.0, 10.0)
    work: float = 0.02
    nap: str = "300ms"
    wait: bool = True
    seed: int | None = None
    deadline: float = 120.0
    stall: float | None = None  # seconds without progress that fail the run
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass
class ChaosReport:
    seed: int
    runs: int
    statuses: dict[str, int]
    kills: int
    pg_restarts: int
    journal_rows: int
    distinct_journal_keys: int
    run_step_journal_rows: int
    side_effects: int
    elapsed: float
    drain_after_faults: float | None
    unexpected_exits: list[Exit]
    problems: list[str]
    concurrency: int
    workers: int
    spawned: int = 0  # worker processes started in all (workers + restarts)
    warnings: tuple[int, int] = (0, 0)  # warning lines in all, peak per worker-second
    integrity_checks: int = 0  # SQLite: PRAGMA integrity_check runs (after kills, at the end)
    terms: int = 0
    freezes: int = 0

    @property
    def reexecuted(self) -> int:
        return self.side_effects - self.run_step_journal_rows

    def figures(self) -> str:
        statuses = ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items()))
        lines = [
            f"seed               {self.seed}",
            f"runs               {self.runs} ({statuses})",
            f"workers            {self.workers} x concurrency {self.concurrency}",
            f"kills (SIGKILL)    {self.kills}"
            + (f", plus {self.terms} SIGTERM" if self.terms else "")
            + (f", plus {self.freezes} SIGSTOP/SIGCONT" if self.freezes else ""),
            f"postgres restarts  {self.pg_restarts}"
            if self.integrity_checks == 0
            else f"integrity_check    {self.integrity_checks} run(s), after kills and at the end",
            f"journal rows       {self.journal_rows} (distinct keys {self.distinct_journal_keys})",
            f"side effects       {self.side_effects} for {self.run_step_journal_rows} step results",
            f"re-executed steps  {self.reexecuted}",
            f"worker processes   {self.spawned} started, "
            f"{len(self.unexpected_exits)} exited by themselves",
            f"worker warnings    {self.warnings[0]} lines, at most {self.warnings[1]} "
            "in one second from one worker",
            f"time to drain      {self.elapsed:.1f}s from the first start"
            + (
                ""
                if self.drain_after_faults is None
                else f", {self.drain_after_faults:.1f}s after the last fault"
            ),
            f"problems           {len(self.problems)}",
        ]
        lines += [f"  - {p}" for p in self.problems[:30]]
        return "\n".join(lines)

    def assert_ok(self) -> None:
        assert not self.problems, (
            f"chaos run failed (replay with seed={self.seed}):\n{self.figures()}"
        )


class _Stalled(Exception):
    pass


def run_chaos(config: ChaosConfig) -> ChaosReport:
    """Run one experiment and return its report (`ChaosReport.assert_ok` to check it)."""
    seed = config.seed if config.seed is not None else random.SystemRandom().randrange(2**32)
    log(f"seed {seed} (replay with seed={seed} / --seed {seed})")
    rng = random.Random(seed)
    workdir = config.workdir
    effects = workdir / "effects"
    effects.mkdir(parents=True, exist_ok=True)
    env = worker_env(config.kind, config.url, config.schema, effects, **config.extra_env)
    spec: dict[str, Any] = {"work": config.work, "sleep": config.nap, "wait": config.wait}
    keys = workload.journal_keys(spec)
    stall = config.stall or max(20.0, 6 * (config.lease + config.work) + 10)
    if config.pg_restarts:
        stall += config.pg_down[1] + 10

    app = workload.register(App(config.url, schema=config.schema))
    probe = Probe(config.kind, config.url, config.schema)
    app.migrate()

    def spawn(name: str) -> WorkerProcess:
        return spawn_worker(
            env,
            workdir / "logs",
            concurrency=config.concurrency,
            lease=config.lease,
            poll_interval=config.poll_interval,
            name=name,
        )

    pool = WorkerPool(
        config.workers,
        spawn,
        rng=random.Random(rng.random()),
        kill_every=config.kill_every,
        restart_delay=config.restart_delay,
        sigterm_share=config.sigterm_share,
        sigstop_share=config.sigstop_share,
        stop_for=config.stop_for,
    )
    pg_rng = random.Random(rng.random())
    problems: list[str] = []
    run_ids: list[str] = []
    signaled: set[str] = set()
    restarts = 0
    integrity_checks = 0
    last_fault: float | None = None
    started_at = time.monotonic()
    done_at: float | None = None
    try:
        pool.start()
        if config.kill_every is not None:
            pool.start_killing()
        next_restart = started_at + pg_rng.uniform(*config.pg_every) if config.pg_restarts else None
        last_progress = time.monotonic()
        checked_kills = 0
        last_mark: tuple[int, int] = (-1, -1)
        deadline = started_at + config.deadline
        while True:
            now = time.monotonic()
            # start the runs due by now
            due = (
                config.runs
                if config.start_rate is None
                else min(config.runs, int((now - started_at) * config.start_rate) + 1)
            )
            while len(run_ids) < due:
                i = len(run_ids)
                try:
                    handle = app.start(
                        workload.WORKFLOW, {**spec, "n": i}, idempotency_key=f"chaos-{i}"
                    )
                except BackendError as exc:
                    log(f"start failed ({exc}); retrying")
                    time.sleep(0.2)
                    break
                run_ids.append(handle.id)
                if config.wait and rng.random() < config.early_signals:
                    try:
                        if app.signal(handle.id, "go", {"from": "harness", "early": True}):
                            signaled.add(handle.id)
                    except BackendError:
                        pass
            # faults: kills stop after kill_for; database restarts
            if config.kill_for is not None and now - started_at > config.kill_for:
                pool.stop_killing()
            if next_restart is not None and now >= next_restart and config.pg is not None:
                down = pg_rng.uniform(*config.pg_down)
                log(f"restarting PostgreSQL (down {down:.1f}s)")
                config.pg.restart(down)
                restarts += 1
                last_fault = time.monotonic()
                log("PostgreSQL is back")
                next_restart = (
                    time.monotonic() + pg_rng.uniform(*config.pg_every)
                    if restarts < config.pg_restarts
                    else None
                )
            # signal the runs that wait for "go"
            try:
                waiting = probe.query(
                    "SELECT id FROM runs WHERE status = 'waiting' AND wake_reason = 'event'"
                )
                for (run_id,) in waiting:
                    if run_id not in signaled and app.signal(run_id, "go", {"from": "harness"}):
                        signaled.add(run_id)
                counts = dict(probe.query("SELECT status, count(*) FROM runs GROUP BY status"))
                journal = probe.query("SELECT count(*) FROM steps")[0][0]
            except Exception as exc:  # the database is restarting
                log(f"probe failed: {type(exc).__name__}: {str(exc)[:120]}")
                time.sleep(0.5)
                continue
            ended = sum(counts.get(s, 0) for s in TERMINAL)
            if config.kind == "sqlite" and pool.kills > checked_kills:
                checked_kills = pool.kills  # a SIGKILL may have landed inside a write
                verdict = probe.integrity_check()
                integrity_checks += 1
                if verdict != "ok":
                    problems.append(f"integrity_check after kill {checked_kills}: {verdict}")
            mark = (ended, int(journal))
            if mark != last_mark:
                last_mark = mark
                last_progress = time.monotonic()
            if len(run_ids) == config.runs and ended == config.runs:
                done_at = time.monotonic()
                break
            if time.monotonic() > deadline:
                problems.append(
                    f"deadline: {config.runs - ended} run(s) not ended after {config.deadline:g}s"
                )
                break
            if time.monotonic() - last_progress > stall and len(run_ids) == config.runs:
                problems.append(
                    f"stalled: no progress for {stall:g}s with {config.runs - ended} run(s) live"
                )
                break
            time.sleep(0.1)
        kills = pool.kills
        if pool.last_kill is not None:
            last_fault = max(last_fault or 0.0, pool.last_kill)
        pool.stop_killing()
        if problems:
            problems.append(dump_state(probe))
            problems += pool.dumps()
        pool.shutdown()
    finally:
        pool.kill_all()
        app.close()
    elapsed = (done_at or time.monotonic()) - started_at
    drain = None
    if done_at is not None and last_fault is not None:
        drain = max(0.0, done_at - last_fault)

    report = check(probe, effects, run_ids, keys, problems)
    if config.kind == "sqlite":
        verdict = probe.integrity_check()
        integrity_checks += 1
        if verdict != "ok":
            problems.append(f"final integrity_check: {verdict}")
    probe.close()
    unexpected = pool.unexpected_exits()
    problems.extend(
        f"worker {e.pid} exited by itself with code {e.code}:\n{e.log_tail}" for e in unexpected
    )
    faults = kills + pool.terms + pool.freezes
    bound = faults * config.concurrency + restarts * config.workers * config.concurrency
    if report["side_effects"] - report["run_step_rows"] > bound:
        problems.append(
            f"re-executions {report['side_effects'] - report['run_step_rows']} exceed "
            f"faults x concurrency (+ restarts x workers x concurrency) = {bound}"
        )
    result = ChaosReport(
        seed=seed,
        runs=len(run_ids),
        statuses=report["statuses"],
        kills=kills,
        pg_restarts=restarts,
        journal_rows=report["journal_rows"],
        distinct_journal_keys=report["distinct_keys"],
        run_step_journal_rows=report["run_step_rows"],
        side_effects=report["side_effects"],
        elapsed=elapsed,
        drain_after_faults=drain,
        unexpected_exits=unexpected,
        problems=problems,
        concurrency=config.concurrency,
        workers=config.workers,
        spawned=pool.spawned,
        warnings=warning_lines(workdir / "logs"),
        integrity_checks=integrity_checks,
        terms=pool.terms,
        freezes=pool.freezes,
    )
    print(result.figures(), flush=True)
    return result


def check(
    probe: Probe, effects_dir: Path, run_ids: list[str], keys: tuple[str, ...], problems: list[str]
) -> dict[str, Any]:
    """The oracle; appends what is wrong to ``problems`` and returns the counts."""
    runs = {
        r[0]: (r[1], r[2], r[3])
        for r in probe.retry(
            "SELECT id, status, CAST(output AS text), CAST(error AS text) FROM runs"
        )
    }
    steps = probe.retry("SELECT run_id, key, kind, status, CAST(output AS text) FROM steps")
    total, distinct = probe.retry(
        "SELECT count(*), count(DISTINCT run_id || '/' || key) FROM steps"
    )[0]
    if total != distinct:
        problems.append(f"duplicate journal rows: {total} rows, {distinct} distinct keys")
    statuses = Counter(status for status, _, _ in runs.values())
    missing = [r for r in run_ids if r not in runs]
    if missing:
        problems.append(f"{len(missing)} started run(s) are gone: {missing[:5]}")
    for run_id, (status, _output, error) in runs.items():
        if status != "completed":
            problems.append(f"run {run_id} is {status} (error {error})")
    journal: dict[str, dict[str, tuple[str, str, Any]]] = defaultdict(dict)
    for run_id, key, kind, status, output in steps:
        journal[run_id][key] = (kind, status, output)
    found = read_effects(effects_dir)
    tokens: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in found:
        tokens[(e.run_id, e.key)].add(e.token)
    run_step_rows = 0
    bad_rows = 0
    for run_id in run_ids:
        rows = journal.get(run_id, {})
        if tuple(sorted(rows)) != tuple(sorted(keys)):
            bad_rows += 1
            if bad_rows <= 10:
                problems.append(
                    f"run {run_id}: journal keys {sorted(rows)}, expected {sorted(keys)}"
                )
        for key in workload.RUN_STEPS:
            row = rows.get(key)
            if row is None:
                continue
            run_step_rows += 1
            value = _json(row[2])
            if not tokens.get((run_id, key)):
                problems.append(f"run {run_id} step {key}: journal row but no side effect")
            elif value not in tokens[(run_id, key)]:
                problems.append(
                    f"run {run_id} step {key}: journal value {value!r} is no execution's token"
                )
        status, output, _ = runs.get(run_id, (None, None, None))
        if status == "completed":
            out = _json(output)
            expected = {k: _json(rows[k][2]) for k in (*workload.RUN_STEPS, "go") if k in rows}
            if out != expected:
                problems.append(f"run {run_id}: output {out!r} != journal {expected!r}")
    if bad_rows > 10:
        problems.append(f"... {bad_rows} runs with wrong journal keys in all")
    return {
        "statuses": dict(statuses),
        "journal_rows": int(total),
        "distinct_keys": int(distinct),
        "run_step_rows": run_step_rows,
        "side_effects": sum(1 for e in found if e.key in workload.RUN_STEPS),
    }


def dump_state(probe: Probe, limit: int = 20) -> str:
    """A state dump of the live runs (for a stall or deadline failure)."""
    try:
        runs = probe.retry(
            "SELECT id, status, wake_reason, lease_owner, lease_token, claims_since_progress, "
            "available_at FROM runs WHERE status NOT IN ('completed', 'failed', 'cancelled') "
            f"ORDER BY id LIMIT {int(limit)}",
            timeout=10,
        )
        lines = ["state dump (live runs: id status wake_reason owner token claims available_at):"]
        for r in runs:
            keys = [k for (k,) in probe.retry("SELECT key FROM steps WHERE run_id = ?", (r[0],))]
            waits = probe.retry("SELECT key, event FROM waits WHERE run_id = ?", (r[0],))
            signals = probe.retry("SELECT event FROM signals WHERE run_id = ?", (r[0],))
            lines.append(f"  {r} journal={keys} waits={waits} signals={signals}")
        workers = probe.retry("SELECT id, pid, last_seen_at, stopped_at FROM workers", timeout=10)
        lines.append(f"  workers: {workers}")
        if probe.kind == "postgres":  # who holds what: a session left in a transaction?
            sessions = probe.retry(
                "SELECT pid, state, wait_event_type, wait_event, now() - xact_start, "
                "left(query, 100) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()",
                timeout=10,
            )
            lines += [f"  session {s}" for s in sessions]
        return "\n".join(lines)
    except Exception as exc:
        return f"state dump failed: {exc}"


# --------------------------------------------------------------------------- CLI


@contextlib.contextmanager
def _database(args: argparse.Namespace, workdir: Path) -> Iterator[tuple[str, str, str, Any]]:
    if args.backend == "sqlite":
        path = workdir / "chaos.db"
        yield "sqlite", f"sqlite:///{path}", "perdure", None
    elif args.backend == "postgres":
        import secrets

        import psycopg

        url = (
            args.url
            or os.environ.get("PERDURE_TEST_DATABASE_URL")
            or ("postgresql://postgres@127.0.0.1:5432/postgres")
        )
        schema = f"chaos_{secrets.token_hex(4)}"
        try:
            yield "postgres", url, schema, None
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    else:  # postgres-throwaway
        with ThrowawayPostgres() as pg:
            yield "postgres", pg.url, "perdure", pg


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--backend", choices=["sqlite", "postgres", "postgres-throwaway"], default="sqlite"
    )
    parser.add_argument("--url", help="PostgreSQL URL for --backend postgres")
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--kill-min", type=float, default=1.0)
    parser.add_argument("--kill-max", type=float, default=3.0)
    parser.add_argument("--no-kills", action="store_true")
    parser.add_argument("--kill-for", type=float, default=None, help="seconds of kills")
    parser.add_argument("--sigterm-share", type=float, default=0.0)
    parser.add_argument("--sigstop-share", type=float, default=0.0)
    parser.add_argument("--early-signals", type=float, default=0.0)
    parser.add_argument("--start-rate", type=float, default=None, help="runs started per second")
    parser.add_argument("--pg-restarts", type=int, default=0)
    parser.add_argument("--pg-down-max", type=float, default=2.0)
    parser.add_argument("--pg-every-min", type=float, default=5.0)
    parser.add_argument("--pg-every-max", type=float, default=20.0)
    parser.add_argument("--work", type=float, default=0.02)
    parser.add_argument("--nap", default="300ms")
    parser.add_argument("--deadline", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.pg_restarts and args.backend != "postgres-throwaway":
        parser.error("--pg-restarts needs --backend postgres-throwaway (never the shared server)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="perdure-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workdir {workdir}")
    with _database(args, workdir) as (kind, url, schema, pg):
        report = run_chaos(
            ChaosConfig(
                kind=kind,
                url=url,
                schema=schema,
                workdir=workdir,
                runs=args.runs,
                workers=args.workers,
                concurrency=args.concurrency,
                lease=args.lease,
                kill_every=None if args.no_kills else (args.kill_min, args.kill_max),
                kill_for=args.kill_for,
                sigterm_share=args.sigterm_share,
                sigstop_share=args.sigstop_share,
                early_signals=args.early_signals,
                start_rate=args.start_rate,
                pg=pg,
                pg_restarts=args.pg_restarts,
                pg_down=(0.0, args.pg_down_max),
                pg_every=(args.pg_every_min, args.pg_every_max),
                work=args.work,
                nap=args.nap,
                seed=args.seed,
                deadline=args.deadline,
            )
        )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
