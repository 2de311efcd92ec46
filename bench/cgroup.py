#!/usr/bin/env python3
"""The memory targets: what the machine pays for a run, not only RSS.

Each run goes into a fresh cgroup v1 memory group (root; the source is read
once beforehand by this process, outside the group, so its page cache is
not charged to the run) and reports:

* ``charged``: ``memory.max_usage_in_bytes`` of the group (anonymous memory
  plus page cache the run itself brought in or dirtied);
* ``anon``: the largest ``rss`` of ``memory.stat`` seen (sampled every 5 ms);
* ``hwm``: the program's ``VmHWM`` (peak resident set);
* ``written``: the program's ``write_bytes`` (``/proc/<pid>/io``, last sample);
* ``wall``: seconds.

Workloads (``--only``): ``plan-huge``/``chain-huge`` (one typed prompt of
``--huge-mb``), ``plan-tools`` (tool-heavy; its speed against ``wc -l`` is run.py's),
``plan-lines`` (~1M conversation lines), ``plan-startup``/``chain-startup``
(a SessionStart hook context of ``--startup-mb``).

Usage (both builds side by side, same round)::

    python3 bench/cgroup.py --bins base=/tmp/base/target/release --bins new=target/release \\
        --work /tmp/ktr25 [--huge-mb 100] [--tools-mb 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup/memory")
SESSION = "5e55a9e0-0000-4000-8000-00000000aaaa"
HERE = Path(__file__).resolve().parent


def read_int(path: Path) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def stat_rss(group: Path) -> int:
    try:
        for line in (group / "memory.stat").read_text().splitlines():
            if line.startswith("rss "):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_field(pid: int, name: str, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def measured(argv: list[str], env: dict, n: int) -> dict:
    """Run ``argv`` in a fresh memory cgroup; the figures above."""
    group = CGROUP / f"ktr25-{os.getpid()}-{n}"
    group.mkdir()
    try:
        start = time.perf_counter()
        child = subprocess.Popen(
            ["sh", "-c", f'echo $$ > {group}/cgroup.procs && exec "$@"', "sh", *argv],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        anon = hwm = written = 0
        while child.poll() is None:
            anon = max(anon, stat_rss(group))
            hwm = max(hwm, proc_field(child.pid, "status", "VmHWM:") * 1024)
            written = max(written, proc_field(child.pid, "io", "write_bytes:"))
            time.sleep(0.005)
        wall = time.perf_counter() - start
        stderr = child.stderr.read().decode(errors="replace") if child.stderr else ""
        if child.returncode != 0:
            sys.exit(f"{argv[0]} exited {child.returncode}: {stderr.strip()[-500:]}")
        return {"charged": read_int(group / "memory.max_usage_in_bytes"), "anon": anon,
                "hwm": hwm, "written": written, "wall": wall}
    finally:
        time.sleep(0.05)
        group.rmdir()


def warm(path: Path) -> None:
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def generate(out: Path, *args: str) -> Path:
    if not out.exists():
        subprocess.run([sys.executable, str(HERE / "gen_transcript.py"), "--out", str(out), *args],
                       check=True, stderr=subprocess.DEVNULL)
    return out


def config(dir: Path, pointer: bool) -> Path:
    project, state = dir / "project", dir / "state"
    shutil.rmtree(dir, ignore_errors=True)
    project.mkdir(parents=True)
    state.mkdir(mode=0o700)
    lines = [f"project_dir = {json.dumps(str(project))}", f"state_dir = {json.dumps(str(state))}",
             "context_window_tokens = 1000000000"]
    if pointer:
        (dir / "pointer").write_text(SESSION + "\n")
        lines += ['activation = "pointer"', f"resume_pointer_path = {json.dumps(str(dir / 'pointer'))}",
                  "pointer_health_probe = false", "verify_workdir_matches_project = false",
                  "activation_delay_seconds = 0", "stable_file_seconds = 0.05"]
    cfg = dir / "config.toml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def plan(bins: Path, source: Path, work: Path, n: int) -> dict:
    dir = work / "plan"
    cfg = config(dir, pointer=False)
    inside = dir / "project" / f"{SESSION}.jsonl"
    os.link(source, inside)  # plan reads only files inside project_dir
    warm(inside)
    return measured([str(bins / "ktr"), "plan", "--json", "--config", str(cfg), "--transcript", str(inside)],
                    {"HOME": str(work), "PATH": "/usr/bin:/bin"}, n)


def chain(bins: Path, source: Path, work: Path, n: int) -> dict:
    dir = work / "chain"
    cfg = config(dir, pointer=True)
    copy = dir / "project" / f"{SESSION}.jsonl"
    shutil.copyfile(source, copy)
    warm(copy)
    env = {"HOME": str(work), "PATH": f"{bins}:/usr/bin:/bin", "KTR_BIN_DIR": str(bins)}
    return measured([str(bins / "ktr-prepare"), "--config", str(cfg), "--transcript", str(copy),
                     "--confirm", "REBUILD"], env, n)


def mib(b: float) -> str:
    return f"{b / (1 << 20):.1f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bins", action="append", required=True, help="NAME=DIR of a release build")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--huge-mb", type=float, default=100)
    p.add_argument("--tools-mb", type=float, default=100)
    p.add_argument("--startup-mb", type=float, default=100, help="the SessionStart context of plan-/chain-startup")
    p.add_argument("--lines-mb", type=float, default=680, help="conversation-heavy file (~1M lines at 680)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--only", default="plan-huge,chain-huge,plan-tools,plan-lines",
                   help="of plan-huge,chain-huge,plan-tools,plan-lines,plan-startup,chain-startup")
    a = p.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    huge = generate(a.work / f"huge-{a.huge_mb:g}.jsonl", "--turns", "4", "--mix", "chat",
                    "--huge-message-mb", f"{a.huge_mb:g}")
    tools = generate(a.work / f"tools-{a.tools_mb:g}.jsonl", "--size-mb", f"{a.tools_mb:g}")
    lines = None
    if "plan-lines" in a.only:
        lines = generate(a.work / f"lines-{a.lines_mb:g}.jsonl", "--mix", "chat", "--size-mb", f"{a.lines_mb:g}")
    startup = None
    if "startup" in a.only:
        startup = generate(a.work / f"startup-{a.startup_mb:g}.jsonl", "--turns", "4", "--mix", "chat",
                           "--huge-startup-mb", f"{a.startup_mb:g}")
    warm(tools)
    # Wall times here include `sh`, joining the cgroup and this script's 5 ms sampling on the
    # other core: memory is what this measures. The speed ratio against `wc -l` is run.py's
    # (interleaved rounds, both page-cache states).
    print(f"huge: {huge.stat().st_size / 1e6:.0f} MB; tools: {tools.stat().st_size / 1e6:.0f} MB")
    workloads = {"plan-huge": (plan, huge), "chain-huge": (chain, huge), "plan-tools": (plan, tools),
                 "plan-lines": (plan, lines), "plan-startup": (plan, startup), "chain-startup": (chain, startup)}
    n = 0
    for name in a.only.split(","):
        run, source = workloads[name]
        for spec in a.bins:
            label, bins = spec.split("=", 1)
            rounds = []
            for _ in range(a.runs):
                n += 1
                rounds.append(run(Path(bins), source, a.work, n))
            med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
            print(f"{name:10} {label:5} charged {mib(med['charged'])} MiB, anon {mib(med['anon'])} MiB, "
                  f"hwm {mib(med['hwm'])} MiB, written {mib(med['written'])} MiB, "
                  f"wall {med['wall']:.2f} s (median of {a.runs})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
