#!/usr/bin/env python3
"""Switch latency with the real Claude Code CLI (Python 3.11 stdlib only).

``python3 bench/latency.py [--runs 10] [--release]``
    Runs the ignored test ``claude_loop::more::switch_latency_with_the_defaults``
    (tests/integration/claude_loop/more.rs) with ``KTR_BENCH_RUNS=N``: each run starts
    the real interactive CLI in a private tmux server against the fake API twice
    — once switching in place (``/resume <id>``), once by respawning the pane
    (``tmux_switch_in_place = false``), their order alternating — talks three
    turns, the model asks for a rebuild, then for a rollback, and the test
    measures the end of each reply (the fake API sent its ``message_stop``) →
    ``activated`` / ``rolled_back`` with every timing key at its default (what a
    new user gets). Prints each ``latency:`` line (with the
    breakdown from the operation's transitions and Claude Code's receipt), the
    medians per way and the ratio in place / respawn. Needs ``KTR_CLAUDE_BIN``
    (the CLI) like the test. By default the test's own debug binaries are
    installed; ``--release`` builds the shipped binaries (``cargo build
    --profile dist --bins``) and installs those instead (what ``install`` puts in
    place in production; the test itself stays debug).

Exit codes: 0 measured, 1 the test failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (bench/run.py: the dist build ./install ships)

REPO = Path(__file__).resolve().parent.parent
TEST = "claude_loop::more::switch_latency_with_the_defaults"
TARGET_S = 1.5  # end of reply -> activated in place, median
TARGET_MAX_S = 3.0  # ... and the slowest of the runs, with the defaults
TARGET_RATIO = 0.6  # in place <= 0.6 x the respawn path, same run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--release", action="store_true", help="install the release binaries")
    a = p.parse_args(argv)
    if a.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    env = dict(os.environ, KTR_BENCH_RUNS=str(a.runs), CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    if a.release:
        built = run.dist_build("--bins", env=env)
        if built.returncode != 0:
            print(built.stderr[-4000:], file=sys.stderr)
            return 1
        env["KTR_BENCH_BIN_DIR"] = str(run.RELEASE)
    argv = ["cargo", "test", "--test", "integration", "--", "--ignored", "--exact", TEST, "--nocapture"]
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("latency: ")]
    for line in lines:
        print(line)
    if proc.returncode != 0 or len(lines) != 4 * a.runs:
        print(proc.stdout[-4000:], file=sys.stderr)
        return 1

    def taken(mode: str, what: str) -> list[float]:
        pattern = re.compile(rf"run \d+/\d+ {mode}: reply end -> {what} ([0-9.-]+) s")
        return [float(m.group(1)) for line in lines if (m := pattern.search(line))]

    build = "release" if a.release else "debug"
    for what, to in (("rebuild", "activated"), ("rollback", "rolled_back")):
        suffix = "" if what == "rebuild" else " rollback"
        here, there = taken("in place" + suffix, to), taken("respawn" + suffix, to)
        median, baseline = statistics.median(here), statistics.median(there)
        ratio = median / baseline
        slowest = max(here)
        verdict = "PASS" if median <= TARGET_S and slowest <= TARGET_MAX_S and ratio <= TARGET_RATIO else "MISS"
        print(
            f"{what}: end of reply -> {to}, median of {len(here)} ({build} binaries): in place {median:.2f} s "
            f"(runs {', '.join(f'{t:.2f}' for t in here)}), respawn {baseline:.2f} s "
            f"(runs {', '.join(f'{t:.2f}' for t in there)}); ratio {ratio:.2f} "
            f"; slowest in place {slowest:.2f} s "
            f"(target: median <= {TARGET_S} s, slowest <= {TARGET_MAX_S} s, <= {TARGET_RATIO}x) {verdict}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
