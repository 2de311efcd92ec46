#!/usr/bin/env python3
"""Operation-file size and ``ktr status --json`` time right after prepare.

``python3 bench/opfile.py [--bins target/debug] [--compare DIR] [--turns 116000] [--data DIR] [--runs 20]``
    Generates (or reuses) ``gen_transcript.py --mix chat --turns N`` in ``--data``
    (default ``/tmp/ktr-bench-opfile``; about 8.6 lines and 5.9 KB per turn, so
    116000 turns is a 1M-line, ~690 MB file), then for each binary dir
    (``--bins``, and ``--compare`` in the same round): a throwaway pointer-mode
    sandbox (``chain.sandbox``), ``ktr-prepare --transcript T --confirm REBUILD``
    with ``KTR_TEST_PAUSE_AT=verify:start`` (a debug build stops right after
    prepare recorded the operation; a release build ignores it and runs the
    whole chain), the operation file's size, the manifest artifact's size, and
    the median wall time and peak RSS of ``ktr status OP --json`` over
    ``--runs`` runs (after one warm run). The paused stage is then ended by
    its pid. Baseline in the same round: ``cat OPFILE > /dev/null``.

Exit codes: 0 measured, 1 a command failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))
import chain  # noqa: E402  (sandbox, timed)
import run as common  # noqa: E402

TARGET_STATUS_MS = chain.TARGET_STATUS_MS
TARGET_OP_FILE = chain.TARGET_OP_FILE


def transcript(data: Path, turns: int, seed: int) -> tuple[Path, str]:
    """The chat transcript of `turns` turns in `data` (generated once)."""
    gen = common.generator_import()
    session = gen.session_id_for_seed(seed)
    path = data / f"t{turns}-s{seed}" / f"{session}.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".part")
        argv = [sys.executable, str(common.GEN), "--mix", "chat", "--seed", str(seed), "--turns", str(turns),
                "--out", str(tmp)]
        print(f"generating {turns} turns ...", flush=True)
        subprocess.run(argv, check=True, stderr=subprocess.DEVNULL)
        tmp.rename(path)
    return path, session


def measure(bins: Path, source: Path, session: str, runs: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="ktr-opfile-") as td:
        tmp = Path(td)
        cfg, link, state = chain.sandbox(tmp, source, session)
        pause = tmp / "paused.pid"
        env = dict(os.environ, KTR_TEST_PAUSE_AT="verify:start", KTR_TEST_PAUSE_FILE=str(pause))
        argv = [str(bins / "ktr-prepare"), "--config", str(cfg), "--transcript", str(link), "--confirm", "REBUILD"]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while not pause.is_file() and proc.poll() is None:
                if time.perf_counter() - t0 > timeout:
                    raise common.BenchError(f"ktr-prepare did not get past prepare within {timeout:.0f} s")
                time.sleep(0.2)
            prepared = time.perf_counter() - t0
            ops = [p for p in (state / "operations").glob("*.json") if not p.name.startswith(".")]
            if not ops:
                raise common.BenchError(f"no operation file: {proc.stderr.read().decode(errors='replace')[-800:]}")
            op_file = ops[0]
            op = json.loads(op_file.read_text())
            artifact = state / "artifacts" / op["id"] / "manifest.jsonl"
            status = [str(bins / "ktr"), "status", op["id"], "--config", str(cfg), "--json"]
            chain.timed(status, tmp, timeout)  # warm
            st = [chain.timed(status, tmp, timeout) for _ in range(runs)]
            cat = [chain.timed(["cat", str(op_file)], tmp, timeout) for _ in range(runs)]
            return {
                "prepare_s": prepared,
                "status": op.get("status") + (f" ({op.get('error')})" if op.get("error") else ""),
                "lines": sum(1 for _ in open(source, "rb")),
                "op_bytes": op_file.stat().st_size,
                "artifact_bytes": artifact.stat().st_size if artifact.is_file() else 0,
                "items": (op.get("manifest_artifact") or {}).get("items") or len(op.get("manifest", [])),
                "status_ms": statistics.median(s[0] for s in st) * 1000,
                "status_rss": max(s[1] for s in st),
                "cat_ms": statistics.median(c[0] for c in cat) * 1000,
            }
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bins", type=Path, default=common.REPO / "target" / "debug")
    p.add_argument("--compare", type=Path, help="also measure the binaries in this directory (same round)")
    p.add_argument("--turns", type=int, default=116_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", type=Path, default=Path("/tmp/ktr-bench-opfile"))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--timeout", type=float, default=3600.0)
    a = p.parse_args(argv)
    try:
        source, session = transcript(a.data, a.turns, a.seed)
        print(common.machine())
        print(f"transcript: {a.turns} turns, {source.stat().st_size / 1e6:.1f} MB")
        for label, bins in (("new", a.bins), ("compare", a.compare)):
            if bins is None:
                continue
            r = measure(bins, source, session, a.runs, a.timeout)
            ok = r["op_bytes"] <= TARGET_OP_FILE and r["status_ms"] <= TARGET_STATUS_MS
            print(f"  {label:8} {bins}: {r['lines']} lines, prepare {r['prepare_s']:.1f} s ({r['status']}), "
                  f"{r['items']} items | op file {r['op_bytes'] / 1024:.1f} KiB, manifest artifact "
                  f"{r['artifact_bytes'] / 1e6:.1f} MB | status {r['status_ms']:.1f} ms (RSS {r['status_rss']:.1f} MiB) "
                  f"| cat op file {r['cat_ms']:.1f} ms | {common.verdict(ok)}", flush=True)
    except common.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
