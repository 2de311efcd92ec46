#!/usr/bin/env python3
"""The full pointer-mode chain on conversation-heavy transcripts (Python 3.11 stdlib only).

``python3 bench/chain.py [--turns 5000,10000,20000] [--runs 1] [--timeout 600]``
    For each turn count: a deterministic conversation-heavy transcript
    (``gen_transcript.py --mix chat --turns N``, cached in ``bench/data/``),
    a throwaway sandbox (project dir holding a hard link of the transcript,
    state dir, pointer file, ``activation = "pointer"``,
    ``activation_delay_seconds = 0``, ``stable_file_seconds = 0.05``), then

    * ``ktr-prepare --transcript T --confirm REBUILD``: the whole chain
      prepare → verify → activate in one process (what a pointer runner
      does), wall time and peak RSS (GNU time), per-stage times from the
      operation's transitions, the size of the operation file, the time and
      peak RSS of ``ktr status --json`` on it;
    * ``ktr plan --json`` on the same file: wall time and peak RSS;
    * the baseline in the same round: ``wc -l`` and ``sha256sum`` on the file.

``--compare DIR`` also runs the chain with the binaries in DIR (for example a
release build of an older commit) in the same rounds, so before/after figures
come from one run. ``--huge-message-mb M`` adds one typed prompt of M MB.
``--size-mb S`` uses a chat transcript of S MB instead of a turn count.

Exit codes: 0 measured (missed targets print MISS; ``--check`` exits 3),
1 a command failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as common  # noqa: E402  (bench/run.py: build, spawn, peak_rss, machine)

BENCH = common.BENCH
REPO = common.REPO
DATA = common.DATA
GEN = common.GEN
MB = common.MB

TARGETS_S = {20_000: 5.0, 50_000: 12.0}  # the whole chain
# Memory bounded by design (no allocator tricks): with one huge
# message (--huge-message-mb) the chain's and plan's peak RSS <= 32 MiB
# (bench/cgroup.py measures what a memory cgroup is charged); per-record
# tables may grow with the record count, so no RSS target by turns. Linear:
# 50k/20k <= 2.7.
TARGET_RSS_MIB = 32.0                   # plan, prepare, verify, one huge message
TARGET_LINEAR = 2.7                     # chain wall 50k turns / 20k turns
TARGET_STATUS_MS = 10.0                 # ktr status on the operation
TARGET_OP_FILE = 64 * 1024              # bytes


def ensure_chat(turns: int, size_mb: float, huge_mb: float, seed: int) -> tuple[Path, dict]:
    """Generate (or reuse) a conversation-heavy transcript in bench/data/."""
    gen = common.generator_import()
    label = f"t{turns}" if turns else f"{common.size_label(size_mb)}mb"
    if huge_mb:
        label += f"-huge{common.size_label(huge_mb)}mb"
    project = DATA / f"-home-dev-ktr-chat-s{seed}-{label}"
    path = project / f"{gen.session_id_for_seed(seed)}.jsonl"
    stamp_path = DATA / f"{project.name}.stamp.json"
    stamp = {"generator_sha256": hashlib.sha256(GEN.read_bytes()).hexdigest(), "turns": turns,
             "size_mb": size_mb, "huge_mb": huge_mb, "seed": seed}
    if path.is_file() and stamp_path.is_file():
        try:
            old = json.loads(stamp_path.read_text())
        except ValueError:
            old = {}
        if old.get("stamp") == stamp and old.get("bytes") == path.stat().st_size:
            return path, old.get("summary", {})
    project.mkdir(parents=True, exist_ok=True)
    for stale in project.glob("*.jsonl"):
        stale.unlink()
    argv = [sys.executable, str(GEN), "--mix", "chat", "--seed", str(seed), "--out", str(path)]
    argv += ["--turns", str(turns)] if turns else ["--size-mb", f"{size_mb:g}"]
    if huge_mb:
        argv += ["--huge-message-mb", f"{huge_mb:g}"]
    print(f"generating {label} chat transcript ...", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise common.BenchError(f"generator failed:\n{proc.stderr.strip()}")
    line = proc.stderr.strip()
    print(f"  {line} [{time.perf_counter() - t0:.1f} s]", flush=True)
    summary = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
    stamp_path.write_text(json.dumps({"stamp": stamp, "bytes": path.stat().st_size, "summary": summary}) + "\n")
    return path, summary


def sandbox(tmp: Path, source: Path, session: str) -> tuple[Path, Path, Path]:
    """Project dir with a hard link of the transcript, state dir, pointer, config."""
    project = tmp / "-bench-project"
    project.mkdir()
    link = project / source.name
    try:
        os.link(source, link)
    except OSError:
        shutil.copyfile(source, link)
    state = tmp / "state"
    state.mkdir(mode=0o700)
    pointer = tmp / "pointer"
    pointer.write_text(session + "\n")
    cfg = tmp / "config.toml"
    q = json.dumps
    cfg.write_text("\n".join([
        f"project_dir = {q(str(project))}", f"state_dir = {q(str(state))}", 'activation = "pointer"',
        f"resume_pointer_path = {q(str(pointer))}", f"claude_workdir = {q(str(tmp))}",
        "verify_workdir_matches_project = false", "activation_delay_seconds = 0",
        "stable_file_seconds = 0.05", "stable_file_timeout_seconds = 60",
        # No Claude Code here to probe; and the whole conversation is carried
        # (a window large enough for it), the heaviest case for the chain.
        "pointer_health_probe = false", "context_window_tokens = 1000000000", ""]))
    return cfg, link, state


def timed(argv: list[str], tmp: Path, timeout: float, stdout: str = os.devnull) -> tuple[float, float, int]:
    """Wall seconds, peak RSS MiB (GNU time) and exit code of one run; rc 124 on timeout.

    The CPU seconds (user + system) of the last run are left in ``LAST_CPU[0]``.
    """
    out = tmp / "rss.txt"
    err = tmp / "stderr.txt"
    full = [common.GNU_TIME, "-f", "%U %S %M", "-o", str(out), *argv] if os.access(common.GNU_TIME, os.X_OK) else argv
    t0 = time.perf_counter()
    with open(stdout, "wb") as so, open(err, "wb") as se:
        try:
            rc = subprocess.run(full, stdout=so, stderr=se, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return timeout, 0.0, 124
    wall = time.perf_counter() - t0
    try:
        user, system, kib_text = out.read_text().strip().splitlines()[-1].split()
        kib = int(kib_text)
        LAST_CPU[0] = float(user) + float(system)
    except (OSError, ValueError, IndexError):
        kib = 0
        LAST_CPU[0] = 0.0
    return wall, kib / 1024, rc


LAST_CPU = [0.0]


def parse_ts(s: str) -> float:
    return dt.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.timezone.utc).timestamp()


def stage_times(op: dict) -> dict:
    """Seconds spent in prepare (running), verify (verifying) and activate (activating)."""
    at = {}
    for t in op.get("history", op.get("transitions", [])):
        at.setdefault(t["to"], parse_ts(t["at"]))
    out = {}
    for name, start, end in (("prepare", "running", "verifying"), ("verify", "verifying", "activating"),
                             ("activate", "activating", "activated")):
        if start in at and end in at:
            out[name] = at[end] - at[start]
    return out


def chain_once(bins: Path, source: Path, session: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ktr-chain-") as td:
        tmp = Path(td)
        cfg, link, state = sandbox(tmp, source, session)
        argv = [str(bins / "ktr-prepare"), "--config", str(cfg), "--transcript", str(link), "--confirm", "REBUILD"]
        wall, rss, rc = timed(argv, tmp, timeout)
        res = {"wall": wall, "rss": rss, "rc": rc, "cpu": LAST_CPU[0]}
        if rc == 124:
            return res
        if rc != 0:
            raise common.BenchError(f"ktr-prepare failed (exit {rc}): {(tmp / 'stderr.txt').read_text(errors='replace')[-800:]}")
        ops = sorted((state / "operations").glob("*.json")) if (state / "operations").is_dir() else []
        ops = [p for p in ops if not p.name.startswith(".")]
        if not ops:
            raise common.BenchError(f"no operation file under {state}")
        op_file = max(ops, key=lambda p: p.stat().st_mtime)
        op = json.loads(op_file.read_text())
        if op.get("status") != "activated":
            raise common.BenchError(f"operation ended {op.get('status')}: {op.get('error')}")
        res["op_bytes"] = op_file.stat().st_size
        res["stages"] = stage_times(op)
        res["items"] = len(op.get("manifest", [])) or (op.get("stats") or {}).get("carried_items")
        status = [str(bins / "ktr"), "status", op["id"], "--config", str(cfg), "--json"]
        timed(status, tmp, timeout)  # warm
        st = [timed(status, tmp, timeout) for _ in range(5)]
        res["status_ms"] = statistics.median(s[0] for s in st) * 1000
        res["status_rss"] = max(s[1] for s in st)
        plan = [str(bins / "ktr"), "plan", "--config", str(cfg), "--transcript", str(link), "--json"]
        res["plan_s"], res["plan_rss"], prc = timed(plan, tmp, timeout)
        if prc != 0:
            raise common.BenchError(f"ktr plan failed (exit {prc})")
        return res


def baseline(path: Path) -> dict:
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass
    out = {}
    with tempfile.TemporaryDirectory(prefix="ktr-chain-base-") as td:
        for name, argv in (("wc", ["wc", "-l", str(path)]), ("sha256sum", ["sha256sum", str(path)])):
            runs = [timed([shutil.which(argv[0]) or argv[0], *argv[1:]], Path(td), 600) for _ in range(3)]
            out[name] = statistics.median(r[0] for r in runs)
            out[name + "_cpu"] = LAST_CPU[0]
    return out


def fmt_chain(label: str, r: dict) -> str:
    if r["rc"] == 124:
        return f"  {label:8} chain TIMEOUT after {r['wall']:.0f} s"
    st = r.get("stages", {})
    stages = " ".join(f"{k} {v:.2f}" for k, v in st.items())
    return (f"  {label:8} chain {r['wall']:7.2f} s, CPU {r['cpu']:6.2f} s (RSS {r['rss']:6.1f} MiB; {stages}) | "
            f"plan {r['plan_s']:6.2f} s RSS {r['plan_rss']:6.1f} MiB | op file {r['op_bytes'] / 1024:9.1f} KiB, "
            f"status {r['status_ms']:7.1f} ms RSS {r['status_rss']:.1f} MiB")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", default="5000,10000,20000", help="comma-separated turn counts")
    p.add_argument("--size-mb", type=float, default=0.0, help="one chat transcript of this size instead of --turns")
    p.add_argument("--huge-message-mb", type=float, default=0.0, help="add one typed prompt of this many MB")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per chain run (default 600)")
    p.add_argument("--no-build", action="store_true", help="use the dist binaries (run.RELEASE) as they are")
    p.add_argument("--compare", type=Path, help="also run the binaries in this directory (same rounds)")
    p.add_argument("--check", action="store_true", help="exit 3 when a target is missed")
    a = p.parse_args(argv)
    try:
        counts = [] if a.size_mb else [int(x) for x in a.turns.split(",") if x]
    except ValueError:
        p.error("--turns takes comma-separated integers")
    if not a.no_build:
        proc = common.dist_build()
        if proc.returncode != 0:
            die_tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
            raise common.BenchError(f"cargo build {' '.join(common.DIST_ARGS)} failed:\n{die_tail}")
    bins = common.RELEASE
    variants = [("this", bins)] + ([("compare", a.compare.resolve())] if a.compare else [])
    gen = common.generator_import()
    session = gen.session_id_for_seed(a.seed)
    print(f"\nktr pointer chain benchmark; {common.machine()}")
    missed = False
    walls: dict[int, list[float]] = {}
    for n in counts or [0]:
        path, summary = ensure_chat(n, a.size_mb, a.huge_message_mb, a.seed)
        print(f"\n{summary.get('turns', n)} turns, {path.stat().st_size / MB:.1f} MB, {summary.get('records')} lines")
        for _ in range(a.runs):
            base = baseline(path)
            print(f"  baseline wc -l {base['wc'] * 1000:.0f} ms, sha256sum {base['sha256sum'] * 1000:.0f} ms "
                  f"(CPU {base['sha256sum_cpu']:.2f} s)")
            for label, d in variants:
                r = chain_once(d, path, session, a.timeout)
                print(fmt_chain(label, r), flush=True)
                if r["rc"] != 124:
                    cpu_ratio = r["cpu"] / base["sha256sum_cpu"] if base["sha256sum_cpu"] else float("nan")
                    print(f"  {'':8} chain/wc {r['wall'] / base['wc']:.0f}x, chain/sha256sum "
                          f"{r['wall'] / base['sha256sum']:.1f}x wall, {cpu_ratio:.1f}x CPU")
                if label != "this":
                    continue
                if r["rc"] != 124:
                    walls.setdefault(n, []).append((r["wall"], r["cpu"]))
                target = TARGETS_S.get(n)
                checks = [(target is not None, r["wall"] <= (target or 0), f"chain <= {target} s"),
                          (r["rc"] != 124 and a.huge_message_mb > 0, r.get("rss", 99) <= TARGET_RSS_MIB,
                           f"chain RSS <= {TARGET_RSS_MIB} MiB"),
                          (r["rc"] != 124 and a.huge_message_mb > 0, r.get("plan_rss", 99) <= TARGET_RSS_MIB,
                           f"plan RSS <= {TARGET_RSS_MIB} MiB"),
                          (r["rc"] != 124, r.get("op_bytes", 1 << 30) <= TARGET_OP_FILE, "op file <= 64 KiB"),
                          (r["rc"] != 124, r.get("status_ms", 1e9) <= TARGET_STATUS_MS, f"status <= {TARGET_STATUS_MS} ms")]
                for applies, ok, what in checks:
                    if applies or what.startswith("chain <="):
                        if target is None and what.startswith("chain <="):
                            continue
                        missed |= not ok
                        print(f"  {'':8} {common.verdict(ok)} {what}")
    if 20_000 in walls and 50_000 in walls:
        wall = min(w for w, _ in walls[50_000]) / min(w for w, _ in walls[20_000])
        cpu = min(c for _, c in walls[50_000]) / min(c for _, c in walls[20_000])
        ok = wall <= TARGET_LINEAR
        missed |= not ok
        print(f"  linear: chain 50k/20k {wall:.2f} wall ({cpu:.2f} CPU) {common.verdict(ok)} <= {TARGET_LINEAR}")
    return 3 if a.check and missed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except common.BenchError as e:
        print(f"bench: {e}", file=sys.stderr)
        sys.exit(1)
