"""Load harness: worker processes whose agent threads record concurrently into one run store.

Each worker process opens the store with `open_store(dsn)` as an application would and runs
`threads` agent threads. An agent records runs of `steps_per_run` model calls through
`rec.call(...)` (about 2 KB in, 1 KB out); the call itself sleeps `think_seconds`, as a model
would. A step's *added latency* is the time `rec.call` took minus the time the call inside it
took, measured on the agent's thread. The parent starts the workers, releases them together,
may inject faults meanwhile, and collects what each one recorded::

    with LoadRun(LoadConfig(dsn, "load", str(tmp_path / "spool")), tmp_path) as load:
        load.start()
        ...  # stop the server, kill connections
        result = load.join()
    problems = audit(result, store)  # every recorded step stored or counted lost

`python -m tests.support.load CONFIG INDEX` is one worker (the parent starts them).
"""

from __future__ import annotations

import json
import logging
import os
import random
import resource
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from agentreplay_core import RunStatus, SpoolFlushError, Store, VerifyReport, open_store
from agentreplay_core._plural import counted

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gpt-load-1"
_WORDS = ("agent", "tool", "replay", "postgres", "latency", "vector", "answer", "query", "step",
          "retriever", "context", "summary", "invoice", "weather", "flight", "customer", "the",
          "a", "of", "with", "and", "please", "find", "order", "status", "report", "token")
_SYSTEM = ("You are a careful assistant. Answer from the documents given, cite them, and say "
           "when you do not know. ") * 5


@dataclass(frozen=True)
class LoadConfig:
    """What the workers do. `durability`: "batched", "sync" or "mixed" (odd threads sync)."""

    dsn: str
    schema: str
    spool_dir: str
    processes: int = 16
    threads: int = 8
    seconds: float = 10.0
    steps_per_run: int = 20
    think_seconds: float = 0.002
    durability: str = "batched"
    hmac_key: str | None = None
    #: disk-full simulation: the spool is a tmpfs of this many bytes in the worker's own mount
    #: namespace or, where namespaces are not allowed, each spool file (one per run) may grow
    #: to 1/64 of it (RLIMIT_FSIZE)
    spool_bytes: int | None = None
    #: load the spool (`store.flush_spool()`) in the worker before it exits; needed when the
    #: spool is a tmpfs, which ends with the worker's mount namespace
    flush_spool_at_end: bool = False


@dataclass
class LoadResult:
    """What all workers recorded, merged."""

    seconds: float
    runs: list[dict[str, Any]] = field(default_factory=list)
    latencies_us: list[int] = field(default_factory=list)
    seals_us: list[int] = field(default_factory=list)
    per_second: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    logs: dict[str, int] = field(default_factory=dict)
    log_samples: list[str] = field(default_factory=list)
    spool_loaded: int = 0
    spool_left: list[str] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return sum(int(r["steps"]) for r in self.runs)

    def stat(self, name: str) -> int:
        return sum(int(r["stats"][name]) for r in self.runs)

    def percentile_ms(self, q: float, values: list[int] | None = None) -> float:
        data = sorted(self.latencies_us if values is None else values)
        if not data:
            return float("nan")
        return data[min(len(data) - 1, int(q / 100 * len(data)))] / 1000

    def summary(self, title: str) -> str:
        full = self.per_second[: int(self.seconds)] or [0]
        stats = ", ".join(f"{k} {self.stat(k)}" for k in
                          ("spooled", "lost", "pending", "internal_errors", "unencodable"))
        return "\n".join([
            f"### {title}",
            f"- {self.steps} steps in {len(self.runs)} runs over {self.seconds:g} s: "
            f"{self.steps / self.seconds:.0f} steps/s (1-s windows: min {min(full)}, "
            f"median {sorted(full)[len(full) // 2]}, max {max(full)}; each: {full})",
            f"- added latency per step: p50 {self.percentile_ms(50):.3f} ms, p99 "
            f"{self.percentile_ms(99):.3f} ms, p99.9 {self.percentile_ms(99.9):.3f} ms, max "
            f"{self.percentile_ms(100):.1f} ms; run seal p50 "
            f"{self.percentile_ms(50, self.seals_us):.1f} ms, p99 "
            f"{self.percentile_ms(99, self.seals_us):.1f} ms, max "
            f"{self.percentile_ms(100, self.seals_us):.1f} ms",
            f"- recorder stats: {stats}; log records: {self.logs or 'none'}; loaded from the "
            f"spool by the workers: {self.spool_loaded}",
        ])


# -- the worker process ---------------------------------------------------------------------


class _LogCounter(logging.Handler):
    """Counts agentreplay's log records by level; keeps the first few of each kind."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: dict[str, int] = {}
        self.kinds: dict[tuple[str, str], int] = {}
        self.samples: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.counts[record.levelname] = self.counts.get(record.levelname, 0) + 1
        kind = (record.levelname, str(record.msg))
        self.kinds[kind] = seen = self.kinds.get(kind, 0) + 1
        if seen <= 3:  # the first few of each level and message template
            self.samples.append(f"{record.levelname}: {record.getMessage()[:300]}")


class _Agent:
    """One agent thread: runs of model calls until the deadline."""

    def __init__(self, store: Store, config: LoadConfig, tag: str, sync: bool,
                 epoch: float) -> None:
        self.store, self.config, self.tag, self.epoch = store, config, tag, epoch
        self.durability = "sync" if sync else "batched"
        rng = random.Random(tag)
        self.text = " ".join(rng.choices(_WORDS, k=1200))
        self.inner = 0.0
        self.runs: list[dict[str, Any]] = []
        self.latencies: list[int] = []
        self.seals: list[int] = []
        self.per_second = [0] * (int(config.seconds) + 2)
        self.errors: list[str] = []

    def model(self, run_no: int, i: int) -> dict[str, Any]:
        t0 = time.perf_counter()
        time.sleep(self.config.think_seconds)
        at = (run_no * 131 + i * 71) % (len(self.text) - 1000)
        out = {"id": f"resp-{self.tag}-{run_no}-{i}", "content": self.text[at:at + 900],
               "finish_reason": "stop", "usage": {"prompt_tokens": 510, "completion_tokens": 230}}
        self.inner = time.perf_counter() - t0
        return out

    def request(self, run_no: int, i: int) -> dict[str, Any]:
        at = (run_no * 37 + i * 53) % (len(self.text) - 1500)
        return {"model": MODEL, "temperature": 0.2, "max_tokens": 512, "messages": [
            {"role": "system", "content": _SYSTEM},
            {"role": "user", "content": f"[{self.tag} run {run_no} step {i}] "
                                        + self.text[at:at + 1400]}]}

    def run(self) -> None:
        deadline = self.epoch + self.config.seconds
        run_no = 0
        try:
            while time.time() < deadline:
                self.one_run(run_no, deadline)
                run_no += 1
        except BaseException:  # the harness must report, not hide, anything the recorder raised
            self.errors.append(f"agent {self.tag}: {traceback.format_exc()}")

    def one_run(self, run_no: int, deadline: float) -> None:
        with self.store.record(name=f"load-{self.tag}", durability=self.durability) as rec:
            for i in range(self.config.steps_per_run):
                if time.time() >= deadline:
                    break
                request = self.request(run_no, i)
                t0 = time.perf_counter()
                rec.call("llm", MODEL, request, self.model, run_no, i)
                self.latencies.append(round((time.perf_counter() - t0 - self.inner) * 1e6))
                second = int(time.time() - self.epoch)
                if 0 <= second < len(self.per_second):
                    self.per_second[second] += 1
            t_seal = time.perf_counter()
        self.seals.append(round((time.perf_counter() - t_seal) * 1e6))
        self.runs.append({"run_id": str(rec.run_id), "steps": rec.step_count,
                          "durability": self.durability, "stats": asdict(rec.stats)})


def _worker(config: LoadConfig, index: int, out: Path) -> None:
    logs = _LogCounter()
    logging.getLogger("agentreplay").addHandler(logs)
    spool_dir = Path(config.spool_dir)
    limit = None
    if config.spool_bytes is not None and not _is_mount(spool_dir):
        limit = config.spool_bytes // 64
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    if limit is not None:  # no tmpfs (no mount namespaces here): cap each spool file instead
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG, not death, when it is reached
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    key = config.hmac_key.encode() if config.hmac_key else None
    store = open_store(config.dsn, schema=config.schema, spool_dir=spool_dir, hmac_key=key)
    print("ready", flush=True)
    epoch = float(sys.stdin.readline())
    time.sleep(max(0.0, epoch - time.time()))
    agents = [_Agent(store, config, f"p{index}t{t}", config.durability == "sync" or (
        config.durability == "mixed" and t % 2 == 1), epoch) for t in range(config.threads)]
    threads = [threading.Thread(target=a.run, name=f"agent-{a.tag}") for a in agents]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    errors = [e for a in agents for e in a.errors]
    store.close()
    loaded = 0
    if config.flush_spool_at_end:
        try:
            with open_store(config.dsn, schema=config.schema, spool_dir=spool_dir) as again:
                loaded = sum(again.flush_spool().values())
        except SpoolFlushError as exc:
            errors.append(f"worker {index}: {exc}")
    left = sorted(p.name for p in spool_dir.glob("*.jsonl*")) if spool_dir.is_dir() else []
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    per_second = [sum(col) for col in zip(*(a.per_second for a in agents), strict=True)]
    out.write_text(json.dumps({
        "runs": [r for a in agents for r in a.runs],
        "latencies_us": [x for a in agents for x in a.latencies],
        "seals_us": [x for a in agents for x in a.seals], "per_second": per_second,
        "errors": errors, "logs": logs.counts, "log_samples": logs.samples,
        "spool_loaded": loaded, "spool_left": left,
    }))


def _is_mount(path: Path) -> bool:
    return path.is_dir() and os.path.ismount(path)


# -- the parent -------------------------------------------------------------------------------


def mount_namespace_prefix() -> list[str] | None:
    """The `unshare` arguments that give a process a mount namespace of its own in which it
    may mount a tmpfs (as root, or in a user namespace), or None where neither is allowed."""
    probe = Path(f"/tmp/agentreplay-probe-{os.getpid()}")
    probe.mkdir(exist_ok=True)
    options = [["unshare", "--mount", "--propagation", "private"]] if os.geteuid() == 0 else []
    options.append(["unshare", "--user", "--map-root-user", "--mount"])
    try:
        for prefix in options:
            try:
                done = subprocess.run([*prefix, "--", "mount", "-t", "tmpfs", "-o", "size=64k",
                                       "probe", str(probe)], capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode == 0:
                return prefix
        return None
    finally:
        probe.rmdir()


class LoadRun:
    """Starts `config.processes` workers; `start()` releases them, `join()` collects them."""

    def __init__(self, config: LoadConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.procs: list[subprocess.Popen[str]] = []
        self.epoch = 0.0
        self.disk = "none"

    def __enter__(self) -> LoadRun:
        key = self.config.hmac_key.encode() if self.config.hmac_key else None
        # migrate once here instead of in every worker at once
        open_store(self.config.dsn, schema=self.config.schema, hmac_key=key).close()
        prefix: list[str] = []
        if self.config.spool_bytes is not None:
            found = mount_namespace_prefix()
            self.disk = ("a tmpfs in its own mount namespace" if found else
                         "no mount namespaces here, so each spool file capped at 1/64 of it")
            prefix = found or []
        for k in range(self.config.processes):
            config = self.config
            if config.spool_bytes is not None:  # each worker its own small disk
                config = LoadConfig(**{**asdict(config),
                                       "spool_dir": f"{config.spool_dir}/worker-{k}"})
                Path(config.spool_dir).mkdir(parents=True, exist_ok=True)
            path = self.workdir / f"load-worker-{k}.json"
            path.write_text(json.dumps(asdict(config)))
            argv = [sys.executable, "-m", "tests.support.load", str(path), str(k)]
            if prefix:
                argv = [*prefix, "--", "sh", "-c", 'mount -t tmpfs -o size="$1" spool "$2" '
                        '&& shift 2 && exec "$@"', "sh", str(config.spool_bytes),
                        config.spool_dir, *argv]
            with (self.workdir / f"load-worker-{k}.err").open("w") as err:
                self.procs.append(subprocess.Popen(argv, stdin=subprocess.PIPE,
                                                   stdout=subprocess.PIPE, stderr=err,
                                                   text=True, cwd=ROOT))
        return self

    def start(self) -> float:
        """Wait until every worker has its store open, then release them together; returns
        the wall-clock time (`time.time()`) at which they start."""
        for k, proc in enumerate(self.procs):
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"load worker {k} did not start:\n{self._stderr(k)}")
        self.epoch = time.time() + 0.2
        for proc in self.procs:
            assert proc.stdin is not None
            proc.stdin.write(f"{self.epoch}\n")
            proc.stdin.flush()
        return self.epoch

    def join(self, timeout: float = 240.0) -> LoadResult:
        result = LoadResult(seconds=self.config.seconds,
                            per_second=[0] * (int(self.config.seconds) + 2))
        for k, proc in enumerate(self.procs):
            proc.wait(timeout=timeout + self.config.seconds)
            if proc.returncode != 0:
                raise RuntimeError(f"load worker {k} exited with {proc.returncode}:\n"
                                   f"{self._stderr(k)}")
            data = json.loads((self.workdir / f"load-worker-{k}.json.out").read_text())
            for name in ("runs", "latencies_us", "seals_us", "errors", "log_samples",
                         "spool_left"):
                getattr(result, name).extend(data[name])
            result.per_second = [a + b for a, b in zip(result.per_second, data["per_second"],
                                                       strict=True)]
            for level, count in data["logs"].items():
                result.logs[level] = result.logs.get(level, 0) + count
            result.spool_loaded += data["spool_loaded"]
        return result

    def _stderr(self, k: int) -> str:
        return (self.workdir / f"load-worker-{k}.err").read_text()[-4000:]

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()


def report(text: str) -> None:
    """Print figures; also append them to the file `AGENTREPLAY_LOAD_REPORT` names, if set."""
    print(f"\n{text}")
    target = os.environ.get("AGENTREPLAY_LOAD_REPORT")
    if target:
        with open(target, "a", encoding="utf-8") as f:
            f.write(text + "\n\n")


# -- checking what was stored -----------------------------------------------------------------


def stored_steps(dsn: str, schema: str) -> dict[str, list[int]]:
    """Every run id in the schema's run_log with its step numbers, in order (one query)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(sql.SQL(
            "SELECT run_id::text, array_agg(step ORDER BY step) FROM {}.run_log GROUP BY run_id"
        ).format(sql.Identifier(schema))).fetchall()
    return {run_id: list(steps) for run_id, steps in rows}


def audit(result: LoadResult, store: Store, dsn: str, schema: str, *,
          losses_allowed: bool = False) -> list[str]:
    """What is wrong with the store after a load: [] when every step a worker recorded is
    stored or was counted lost, and every run verifies but for exactly those gaps."""
    problems: list[str] = []
    stored = stored_steps(dsn, schema)
    runs = {str(r.run_id): r for r in store.list_runs(limit=None)}  # reaps dead recorders
    recorded = {r["run_id"]: r for r in result.runs}
    problems += [f"run {rid} is stored but no worker recorded it" for rid in
                 sorted((set(stored) | set(runs)) - set(recorded))]
    for rid, rec in recorded.items():
        steps, stats = int(rec["steps"]), rec["stats"]
        have = stored.get(rid, [])
        missing = sorted(set(range(1, steps + 1)) - set(have))
        if stats["pending"] or stats["internal_errors"] or stats["unencodable"]:
            problems.append(f"run {rid}: recorder stats {stats}")
        if stats["lost"] and not losses_allowed:
            problems.append(f"run {rid}: {counted(stats['lost'], 'step')} lost")
        if len(missing) != stats["lost"] or len(have) + len(missing) != steps:
            problems.append(f"run {rid}: recorded {steps} steps, counted {stats['lost']} lost, "
                            f"but {len(missing)} are missing and {len(have)} stored")
        run = runs.get(rid)
        if run is None:  # its header could not be stored: the run is lost as a whole
            if have or stats["lost"] != steps:
                problems.append(f"run {rid}: no runs row, {len(have)} steps stored")
            continue
        want = RunStatus.COMPLETE
        if run.status != want and not (losses_allowed and run.status == RunStatus.INCOMPLETE):
            problems.append(f"run {rid}: status {run.status.value}")
        problems += _gap_problems(store.verify(rid), rid, steps, have, missing)
    return problems


def _gap_problems(report: VerifyReport, rid: str, steps: int, have: list[int],
                  missing: list[int]) -> list[str]:
    """[] if the verification report shows exactly the gaps of `missing` and nothing else."""
    found: dict[str, set[int | None]] = {}
    for p in report.problems:
        found.setdefault(p.code, set()).add(p.step)
    last = have[-1] if have else 0
    lost = set(missing)
    expected: dict[str, set[int | None]] = {
        # one problem a gap, at its first step
        "missing_step": {m for m in missing if m < last and m - 1 not in lost},
        "unverifiable_after_gap": {s for s in have if s - 1 in missing},
    }
    if report.sealed and missing:
        expected["step_count_mismatch"] = {None}
        if steps in missing:  # the seal chains from the last step, which is gone
            expected["seal_mismatch"] = {None}
    expected = {code: where for code, where in expected.items() if where}
    if found != expected:
        return [f"run {rid}: verification found {found}, expected {expected}:\n{report}"]
    return []


if __name__ == "__main__":
    _config_path = Path(sys.argv[1])
    _worker(LoadConfig(**json.loads(_config_path.read_text())), int(sys.argv[2]),
            _config_path.with_name(_config_path.name + ".out"))
