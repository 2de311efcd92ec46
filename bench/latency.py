#!/usr/bin/env python3
"""Switch latency with the real Claude Code CLI (issue 12 item 4; Python 3.11 stdlib only).

``python3 bench/latency.py [--runs 5] [--release]``
    Runs the ignored test ``claude_loop::switch_latency_with_no_activation_delay``
    (tests/integration/claude_loop.rs) with ``KTR_BENCH_RUNS=N``: each run starts
    the real interactive CLI in a private tmux server against the fake API,
    talks three turns, the model asks for a rebuild, and the test measures end
    of reply (as seen on the screen) → ``activated`` with
    ``activation_delay_seconds = 0`` and every other key at its default. Prints
    each run's ``latency:`` line (with the breakdown from the operation's
    transitions and Claude Code's receipt) and the median. Needs
    ``KTR_CLAUDE_BIN`` (the CLI) like the test. By default the test's own
    debug binaries are installed; ``--release`` builds the release binaries
    (``cargo build --release --bins``) and installs those instead (what
    ``install`` puts in place in production; the test itself stays debug).

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

REPO = Path(__file__).resolve().parent.parent
TEST = "claude_loop::switch_latency_with_no_activation_delay"
TARGET_S = 2.5  # issue 12: end of reply -> activated, median of >= 5 runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--release", action="store_true", help="install the release binaries")
    a = p.parse_args(argv)
    if a.runs < 1:
        print("--runs must be at least 1", file=sys.stderr)
        return 2
    env = dict(os.environ, KTR_BENCH_RUNS=str(a.runs), CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    if a.release:
        built = subprocess.run(["cargo", "build", "--release", "--bins"], cwd=REPO, env=env)
        if built.returncode != 0:
            return 1
        env["KTR_BENCH_BIN_DIR"] = str(REPO / "target" / "release")
    argv = ["cargo", "test", "--test", "integration", "--", "--ignored", "--exact", TEST, "--nocapture"]
    proc = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("latency: ")]
    for line in lines:
        print(line)
    if proc.returncode != 0 or len(lines) != a.runs:
        print(proc.stdout[-4000:], file=sys.stderr)
        return 1
    took = [float(re.search(r"reply end -> activated ([0-9.]+) s", line).group(1)) for line in lines]
    median = statistics.median(took)
    verdict = "PASS" if median <= TARGET_S else "MISS"
    build = "release" if a.release else "debug"
    print(f"median of {len(took)} ({build} binaries): {median:.2f} s (runs {', '.join(f'{t:.2f}' for t in took)}; target <= {TARGET_S} s) {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
