#!/usr/bin/env python3
"""The plugin's hooks in a project ktr does not serve: each must be
a silent no-op costing at most 2x ``/bin/true``.

Runs every hook binary the plugin calls (``ktr-stop``, ``ktr-prompt``,
``ktr-ack``, ``ktr-precompact``, ``ktr-statusline``) with ``--plugin`` and a
hook payload as Claude Code 2.1.328 sends it, in a throw-away HOME, in two
cases: (1) no config at all, (2) a config whose ``project_dir`` is another
project. Interleaved with ``/bin/true`` fed the same stdin, ``--runs`` rounds
after 50 warm-up rounds; prints medians, the ratio, and fails (exit 3 with
``--check``) when a hook printed anything or a median is over 2x.

    bench/plugin_noop.py --check   (after a dist build: ./install's, or python3 bench/run.py plan)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as common  # noqa: E402  (bench/run.py: where the dist build puts the binaries)

HOOKS = ["ktr-stop", "ktr-prompt", "ktr-ack", "ktr-precompact", "ktr-statusline"]


def payload(home: Path) -> bytes:
    session = "5e55a0e0-0000-4000-8000-00000000e2e4"
    project = home / ".claude/projects/-elsewhere"
    return json.dumps({
        "session_id": session,
        "transcript_path": str(project / f"{session}.jsonl"),
        "cwd": "/elsewhere",
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": False,
        "last_assistant_message": "done " * 200,
        "prompt": "hello " * 200,
        "source": "resume",
        "workspace": {"current_dir": "/elsewhere"},
    }).encode()


def run(argv, stdin: bytes, env) -> tuple[float, bytes]:
    start = time.perf_counter()
    p = subprocess.run(argv, input=stdin, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return time.perf_counter() - start, p.stdout + p.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin-dir", default=str(common.RELEASE),
                    help=f"where the hook binaries are (default {common.RELEASE}: what ./install builds)")
    ap.add_argument("--runs", type=int, default=500, help="timed rounds (default 500)")
    ap.add_argument("--check", action="store_true", help="exit 3 when a hook is not silent or over 2x /bin/true")
    a = ap.parse_args()
    bins = Path(a.bin_dir)
    for h in HOOKS:
        if not (bins / h).is_file():
            print(f"{bins / h} not built yet: cargo build {' '.join(common.DIST_ARGS)} (RUSTFLAGS as ./install sets them)",
                  file=sys.stderr)
            return 1
    ok = True
    with tempfile.TemporaryDirectory(prefix="ktr-bench-") as tmp:
        home = Path(tmp)
        stdin = payload(home)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
        for case in ["no config", "config for another project"]:
            if case != "no config":
                cfg = home / ".config/ktr"
                cfg.mkdir(parents=True, exist_ok=True)
                (cfg / "config.toml").write_text('project_dir = "~/.claude/projects/-served"\n')
            cmds = {"/bin/true": ["/bin/true"]}
            cmds.update({h: [str(bins / h), "--plugin"] for h in HOOKS})
            times = {k: [] for k in cmds}
            for i in range(50 + a.runs):
                for name, argv in cmds.items():
                    t, out = run(argv, stdin, env)
                    if out:
                        print(f"{case}: {name} printed {out[:200]!r}")
                        ok = False
                    if i >= 50:
                        times[name].append(t)
            base = statistics.median(times["/bin/true"])
            print(f"{case} ({a.runs} runs, medians): /bin/true {base * 1000:.3f} ms")
            for h in HOOKS:
                m = statistics.median(times[h])
                ratio = m / base
                verdict = "PASS" if ratio <= 2.0 else "MISS"
                ok &= ratio <= 2.0
                print(f"  {h} --plugin  {m * 1000:.3f} ms  {ratio:.2f}x  {verdict} (target <= 2x)")
    return 3 if a.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
