#!/usr/bin/env python3
"""``ktr recall`` over a large lineage vs ``grep -c -F`` on the same files.

``python3 bench/recall.py [--size-mb 1024] [--runs 5] [--no-build]``

Writes (once; reused while size and seed are unchanged) a lineage of four
sessions A → B → C → D under ``bench/data/recall-<size>mb/``: transcripts in
the Claude Code shape (typed prompts in Chinese and English, assistant text,
thinking, Bash/Read calls, multi-line tool output), ``size`` MB in all, and
three activated operation files linking them. Then, warm cache, interleaved:

- ``ktr recall --count QUERY`` with an ASCII query that is nowhere (the
  default literal is ASCII case-insensitive) against ``grep -c -F -i``;
- the same with a CJK query that is nowhere (matched exactly) against
  ``grep -c -F``;
- the first 20 hits of a frequent term (``ktr recall QUERY``, default
  limit) against ``grep -m20 -F -i``;
- ``--count`` of a frequent ASCII term, of a frequent CJK term and of a
  regex against ``grep -c -F -i``, ``grep -c -F`` and ``grep -c -E``;

ripgrep (``rg``, from ``--rg`` or ``PATH``) beside grep in every row, and
ktr's peak RSS (``/usr/bin/time -f %M``). Reported: medians (each round under the row), the ratios, the
load average before and after.
Python 3.11 standard library only; nothing outside the data dir and a temp dir
is written.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402
from run import BENCH, REPO, machine, peak_rss, spawn  # noqa: E402

SESSIONS = [
    "aaaaaaaa-0000-4000-8000-000000000001",
    "bbbbbbbb-0000-4000-8000-000000000002",
    "cccccccc-0000-4000-8000-000000000003",
    "dddddddd-0000-4000-8000-000000000004",
]
ASCII_QUERY = "zqxj-nowhere-marker"
CJK_QUERY = "从未出现过的词语"
FREQUENT = "worker"
FREQUENT_CJK = "日志"
REGEX = "timeout (retry|queue)"

WORDS = ("the log worker timeout config parser retry queue build test error value "
         "function module request response cache index file path line").split()
HAN = "日志分析脚本修改配置测试通过提醒提交代码今天明天我们先把好吗谢谢小满"


def text(rng: random.Random, n: int) -> str:
    out = []
    for i in range(n):
        if rng.random() < 0.3:
            out.append("".join(rng.choice(HAN) for _ in range(rng.randint(2, 8))))
        else:
            out.append(rng.choice(WORDS))
        if i % 12 == 11:
            out.append("\n")
    return " ".join(out)


def record(kind: str, at: str, **rest) -> str:
    return json.dumps({"type": kind, "timestamp": at, **rest}, ensure_ascii=False, separators=(",", ":")) + "\n"


def session_lines(rng: random.Random, size: int, day: int):
    written, turn = 0, 0
    while written < size:
        turn += 1
        at = f"2026-01-{day:02d}T{turn % 24:02d}:00:00.000Z"
        lines = [record("user", at, message={"role": "user", "content": text(rng, 30)})]
        lines.append(record("assistant", at, message={"role": "assistant", "content": [
            {"type": "thinking", "thinking": text(rng, 60), "signature": "x" * 40}]}))
        for k in range(rng.randint(1, 4)):
            tid = f"toolu_{turn}_{k}"
            name, inp = rng.choice([("Bash", {"command": "grep -rn worker src/"}),
                                    ("Read", {"file_path": f"/src/mod{k}.rs"})])
            lines.append(record("assistant", at, message={"role": "assistant", "content": [
                {"type": "tool_use", "id": tid, "name": name, "input": inp}]}))
            lines.append(record("user", at, message={"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": tid, "content": text(rng, rng.randint(100, 900))}]}))
        lines.append(record("assistant", at, message={"role": "assistant", "content": [
            {"type": "text", "text": text(rng, 80)}]}))
        chunk = "".join(lines)
        written += len(chunk.encode())
        yield chunk


def generate(root: Path, size_mb: int, seed: int) -> Path:
    stamp = root / ".stamp.json"
    want = {"size_mb": size_mb, "seed": seed, "generator": 1}
    project = root / "-home-dev-ktr-bench-recall"
    if stamp.exists() and json.loads(stamp.read_text()) == want:
        write_operations(root, project)
        return project
    project.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per = size_mb * 1_000_000 // len(SESSIONS)
    for day, s in enumerate(SESSIONS, 1):
        with open(project / f"{s}.jsonl", "w", encoding="utf-8") as f:
            for chunk in session_lines(rng, per, day):
                f.write(chunk)
    write_operations(root, project)
    stamp.write_text(json.dumps(want))
    return project


def write_operations(root: Path, project: Path) -> None:
    """The three activated operations that link the sessions (rewritten
    each run, so they follow the operation file's format)."""
    ops = root / "state" / "operations"
    ops.mkdir(parents=True, exist_ok=True)
    for old in ops.glob("*.json"):
        old.unlink()
    for i, (src, dst) in enumerate(zip(SESSIONS, SESSIONS[1:])):
        op = str(uuid.UUID(int=0x6b7472_0000_4000_8000_000000000000 + i + 1, version=4))
        at = f"2026-01-0{i + 2}T00:00:00.000Z"
        (ops / f"{op}.json").write_text(json.dumps({
            "schema": 2, "id": op, "status": "activated", "created_at": at, "updated_at": at,
            "session_id": src,
            "candidate": {"session_id": dst, "path": str(project / f"{dst}.jsonl"), "sha256": "0" * 64},
        }))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--no-build", action="store_true")
    ap.add_argument("--rg", help="the ripgrep binary (default: rg on PATH)")
    ap.add_argument("--only", nargs="*", help="only the cases whose name holds one of these words")
    ap.add_argument("--no-get", action="store_true", help="skip the get row")
    a = ap.parse_args()
    if not a.no_build:
        if run.dist_build("--bin", "ktr").returncode != 0:
            raise SystemExit("bench: the dist build of ktr failed")
    ktr = str(run.RELEASE / "ktr")
    root = BENCH / "data" / f"recall-{a.size_mb}mb"
    project = generate(root, a.size_mb, a.seed)
    files = [str(project / f"{s}.jsonl") for s in SESSIONS]
    total = sum(os.path.getsize(f) for f in files)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cfg = tmp / "config.toml"
        cfg.write_text(f"project_dir = {json.dumps(str(project))}\nstate_dir = {json.dumps(str(root / 'state'))}\n")
        grep = "/usr/bin/grep" if os.path.exists("/usr/bin/grep") else "/bin/grep"
        rg = a.rg or shutil.which("rg")
        base = [ktr, "recall", "--config", str(cfg), "--current", SESSIONS[-1], "--json"]
        # (name, ktr's words, grep's words, rg's words, whether nothing is found)
        cases = [
            ("ASCII absent, --count", ["--count", ASCII_QUERY], ["-c", "-F", "-i", ASCII_QUERY],
             ["-c", "-F", "-i", ASCII_QUERY], True),
            ("CJK absent, --count", ["--count", CJK_QUERY], ["-c", "-F", CJK_QUERY], ["-c", "-F", CJK_QUERY], True),
            (f"first 20 hits of {FREQUENT!r}", [FREQUENT], ["-m20", "-F", "-i", FREQUENT],
             ["-m20", "-F", "-i", FREQUENT], False),
            (f"{FREQUENT!r} --count", ["--count", FREQUENT], ["-c", "-F", "-i", FREQUENT],
             ["-c", "-F", "-i", FREQUENT], False),
            (f"{FREQUENT_CJK!r} --count", ["--count", FREQUENT_CJK], ["-c", "-F", FREQUENT_CJK],
             ["-c", "-F", FREQUENT_CJK], False),
            (f"regex {REGEX!r} --count", ["--count", "--regex", REGEX], ["-c", "-E", REGEX], ["-c", "-e", REGEX],
             False),
        ]
        if a.only:
            cases = [c for c in cases if any(o in c[0] for o in a.only)]
        print(f"# recall over a lineage of {len(files)} sessions, {total / 1e6:.0f} MB; {machine()}; "
              f"load {os.getloadavg()[0]:.2f}; rg: {rg_version(rg)}")
        print("| case | grep | grep time | rg time | ktr recall | ktr / grep | ktr / rg | ktr peak RSS |")
        print("|---|---|---|---|---|---|---|---|")
        for name, words, grep_words, rg_words, absent in cases:
            ktr_argv = [*base, *words]
            grep_argv = [grep, *grep_words, *files]
            rg_argv = [rg, "--no-config", *rg_words, *files] if rg else None
            out = tmp / "out.json"
            _, _, rc = spawn(ktr_argv, stdout=str(out))
            found = json.loads(out.read_text())
            if rc != 0 or (absent and (found["total"] != 0 or found["files_searched"] != len(files))):
                print(f"ktr recall failed or searched other files: rc {rc}, {out.read_text()[:300]}")
                return 1
            # Every command writes to a file: GNU grep stops at the first
            # match when its output is /dev/null.
            sink = str(tmp / "sink")
            spawn(grep_argv, stdout=sink)
            k, g, r = [], [], []
            for _ in range(a.runs):
                g.append(spawn(grep_argv, stdout=sink)[0])
                if rg_argv:
                    r.append(spawn(rg_argv, stdout=sink)[0])
                k.append(spawn(ktr_argv, stdout=sink)[0])
            rss, _, exact = peak_rss(ktr_argv, tmp)
            km, gm = statistics.median(k), statistics.median(g)
            rm = statistics.median(r) if r else float("nan")
            print(f"| {name} | grep {' '.join(grep_words[:-1])} | {gm:.3f} s | {rm:.3f} s | {km:.3f} s | "
                  f"{km / gm:.2f}× | {km / rm:.2f}× | {rss / 1024:.1f} MiB{'' if exact else ' (upper bound)'} |",
                  flush=True)
            rounds = "; ".join(f"{n} {' '.join(f'{t:.3f}' for t in ts)}"
                               for n, ts in (("grep", g), ("rg", r), ("ktr", k)))
            print(f"#   rounds (s): {rounds}", flush=True)
        print(f"# load after: {os.getloadavg()[0]:.2f}")
        if not a.no_get:
            get_row(ktr, cfg, tmp, a.runs)
    return 0


def rg_version(rg: str | None) -> str:
    if not rg:
        return "not found"
    out = subprocess.run([rg, "--version"], stdout=subprocess.PIPE, text=True).stdout
    return out.splitlines()[0] if out else "?"


def get_row(ktr: str, cfg: Path, tmp: Path, runs: int) -> None:
    """`ktr recall --get` of a hit in the oldest session against `dd` of
    that record's bytes (the `cat` of its region)."""
    out = tmp / "hit.json"
    spawn([ktr, "recall", "--config", str(cfg), "--current", SESSIONS[-1], "--session", SESSIONS[0][:8],
           "--kind", "tool_result", "--limit", "1", "--json", "the"], stdout=str(out))
    hit = json.loads(out.read_text())["hits"][0]
    session, offset = hit["id"].split(":")[1].split("@")[0], int(hit["id"].rsplit("@", 1)[1])
    path = Path(json.loads(out.read_text())["lineage"][-1]["live"])
    with open(path, "rb") as f:
        f.seek(offset)
        length = len(f.readline())
    get_argv = [ktr, "recall", "--config", str(cfg), "--get", hit["id"]]
    dd_argv = ["/usr/bin/dd", f"if={path}", "iflag=skip_bytes,count_bytes", f"skip={offset}",
               f"count={length}", "status=none"]
    spawn(get_argv)
    k, d = [], []
    for _ in range(runs):
        d.append(spawn(dd_argv)[0])
        k.append(spawn(get_argv)[0])
    km, dm = statistics.median(k), statistics.median(d)
    print(f"| get of a {length:,}-byte record in {session[:8]} at byte {offset:,} | dd of its bytes {dm * 1000:.1f} ms | "
          f"ktr recall --get {km * 1000:.1f} ms | {km / dm:.2f}× |")


if __name__ == "__main__":
    sys.exit(main())
