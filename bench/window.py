#!/usr/bin/env python3
"""Window-aware hooks benchmark, Python 3.11 stdlib only.

``python3 bench/window.py [--size-mb 100] [--runs 200] [--no-build | --bin-dir DIR] [--check]``

Builds ``ktr-stop`` and ``ktr-statusline`` in release mode, takes the
deterministic transcript of ``bench/run.py`` (generated into ``bench/data/``
when missing), copies it into a throwaway project and appends one reply whose
usage puts the window at 78 % of 1M, so advice is due (its text is the Stop
payload's ``last_assistant_message``: the hook waits for that reply to be in
the file, as Claude Code writes it a moment after starting the hook). Then, interleaved with
``/bin/true`` fed the same stdin (medians over ``--runs``, after warm-up runs
that let the hooks' running account catch up with the file):

1. ``ktr-stop`` with nothing pending and advice enabled (the default
   ``advise_at_percent = 70``), advice for this band already shown (the
   steady state: every reply after the first one in a band);
2. the same, but the "already shown" marker removed before each run (untimed),
   so every timed run computes and prints the advice;
3. ``ktr-statusline --segment`` fed a statusline JSON as Claude Code 2.1.328
   sends it.

Target for each: median within 2x of ``/bin/true``. Exit 0 measured (misses
printed as MISS; ``--check`` exits 3 on a miss), 1 failure, 2 usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (the shared helpers of bench/run.py)

TARGET_RATIO = 2.0
WINDOW = 1_000_000
USED = 780_000


def usage_line(sid: str, text: str) -> str:
    """One main-chain reply saying ``text``, with the usage the API would have reported."""
    return run.reply_line(sid, text, {"input_tokens": 4000, "cache_creation_input_tokens": 6000,
                                      "cache_read_input_tokens": USED - 10_000, "output_tokens": 12})


def statusline_input(path: Path, sid: str) -> dict:
    """A statusline payload as Claude Code 2.1.328 sends it."""
    return {"session_id": sid, "transcript_path": str(path), "cwd": "/home/dev/ktr",
            "model": {"id": "claude-opus-5-5", "display_name": "Opus 5.5"},
            "workspace": {"current_dir": "/home/dev/ktr", "project_dir": "/home/dev/ktr", "added_dirs": []},
            "version": "2.1.328", "output_style": {"name": "default"},
            "cost": {"total_cost_usd": 1.5, "total_duration_ms": 1000, "total_api_duration_ms": 500,
                     "total_lines_added": 0, "total_lines_removed": 0},
            "context_window": {"total_input_tokens": USED, "total_output_tokens": 12,
                               "context_window_size": WINDOW,
                               "current_usage": {"input_tokens": 4000, "output_tokens": 12,
                                                 "cache_creation_input_tokens": 6000,
                                                 "cache_read_input_tokens": USED - 10_000},
                               "used_percentage": 78, "remaining_percentage": 22},
            "exceeds_200k_tokens": True}


def timed(argv: list[str], payload: Path, env: dict, runs: int, before=None) -> tuple[list[float], list[float]]:
    """Interleaved runs of /bin/true and argv, both reading ``payload``."""
    t_true, t_cmd = [], []
    for _ in range(runs):
        t, _, _ = run.spawn(["/bin/true"], stdin=str(payload), env=env)
        t_true.append(t)
        if before:
            before()
        t, _, rc = run.spawn(argv, stdin=str(payload), env=env)
        if rc != 0:
            raise run.BenchError(f"{argv[0]} exited {rc} during the timed runs")
        t_cmd.append(t)
    return t_true, t_cmd


def report(name: str, t_true: list[float], t_cmd: list[float], said: str) -> bool:
    ratio = run.median_ms(t_cmd) / run.median_ms(t_true)
    ok = ratio <= TARGET_RATIO
    print(f"  {name}")
    print(f"    /bin/true   median {run.median_ms(t_true):7.3f} ms  p90 {run.pct_ms(t_true, 0.9):7.3f} ms")
    print(f"    hook        median {run.median_ms(t_cmd):7.3f} ms  p90 {run.pct_ms(t_cmd, 0.9):7.3f} ms")
    print(f"    ratio       {ratio:.2f}x   target <= {TARGET_RATIO:g}x: {run.verdict(ok)}")
    print(f"    stdout      {said[:140]}")
    return ok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size-mb", type=float, default=100.0)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-build", action="store_true")
    p.add_argument("--bin-dir", type=Path, help="take the hooks from DIR as they are (e.g. target/dist: "
                                                  "a dynamically linked build, to compare)")
    p.add_argument("--check", action="store_true")
    a = p.parse_args(argv)
    if a.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    try:
        if a.bin_dir or a.no_build:
            bins = a.bin_dir or run.RELEASE
            stop, status = bins / "ktr-stop", bins / "ktr-statusline"
        else:
            stop, status = run.cargo_build("ktr-stop"), run.cargo_build("ktr-statusline")
        source, _ = run.ensure_transcript(a.size_mb, a.seed, False)
        with tempfile.TemporaryDirectory(prefix="ktr-bench-window-") as td:
            tmp = Path(td)
            project = tmp / "-home-dev-ktr"
            project.mkdir()
            sid = source.stem
            transcript = project / source.name
            shutil.copyfile(source, transcript)
            stop_payload = run.stop_hook_input(transcript, sid)
            with transcript.open("a") as f:
                f.write(run.prompt_line(sid, stop_payload["prompt_id"]))
                f.write(usage_line(sid, stop_payload["last_assistant_message"]))
            cfg = run.write_config(tmp, project)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "ANTHROPIC", "KTR", "NO_COLOR"))}
            env.update({"KTR_CONFIG": str(cfg), "XDG_CONFIG_HOME": str(tmp)})
            stop_in, status_in = tmp / "stop.json", tmp / "statusline.json"
            stop_in.write_text(json.dumps(stop_payload, ensure_ascii=False))
            status_in.write_text(json.dumps(statusline_input(transcript, sid)))
            out = tmp / "out.txt"
            stop_argv = [str(stop), "--config", str(cfg)]
            status_argv = [str(status), "--config", str(cfg), "--segment"]

            def said(argv: list[str], payload: Path) -> str:
                _, _, rc = run.spawn(argv, stdin=str(payload), stdout=str(out), env=env)
                if rc != 0:
                    raise run.BenchError(f"{argv[0]} exited {rc}")
                return out.read_text(errors="replace").strip()

            # Warm-up: the page cache, and the running account catching up
            # with the file (bounded work per call).
            for _ in range(60):
                said(status_argv, status_in)
                said(stop_argv, stop_in)
            advised = [p for p in (tmp / "state" / "window").glob("*.advised")]
            first_advice = said(stop_argv, stop_in)

            def forget() -> None:
                for p in advised:
                    p.unlink(missing_ok=True)

            forget()
            advice = said(stop_argv, stop_in)
            print(f"\nWindow hooks benchmark: {transcript.stat().st_size / run.MB:.1f} MB transcript, "
                  f"window {USED}/{WINDOW}, {a.runs} runs each, interleaved; {run.machine()}")
            ok = report("ktr-stop, advice already shown (steady state)",
                        *timed(stop_argv, stop_in, env, a.runs), first_advice)
            ok &= report("ktr-stop, advice shown on every run",
                         *timed(stop_argv, stop_in, env, a.runs, before=forget), advice)
            ok &= report("ktr-statusline --segment",
                         *timed(status_argv, status_in, env, a.runs), said(status_argv, status_in))
    except run.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 3 if a.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
