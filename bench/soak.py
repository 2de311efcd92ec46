#!/usr/bin/env python3
"""A month in an hour: the soak (Python 3.11 stdlib only).

``python3 bench/soak.py [--turns 1000] [--seed N] [--kill-percent 1] [--rollback-percent 5]``
    Runs the ignored test
    ``claude_soak::a_household_talks_for_hundreds_of_turns_and_never_compacts_lossily_or_loses_a_word``
    (tests/integration/claude_soak/) with those settings: the real interactive
    CLI against the fake API in a private tmux server, ktr installed as the
    plugin with the standing approval, a person typing through an attached
    client, the window filling and being rebuilt again and again, rollbacks
    and killed stages. Prints the test's report (turns, rebuilds, rollbacks,
    killed stages, end of reply -> activated, the state dir's size, peak
    memory of any ktr process) and exits 0 only if every check held. Needs
    ``KTR_CLAUDE_BIN`` (the CLI) like the test. ``.ci/run`` runs the test with
    its defaults (100 turns, 1 % of stage runs killed, ~10 minutes).

Exit codes: 0 passed, 1 the soak failed, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST = "claude_soak::a_household_talks_for_hundreds_of_turns_and_never_compacts_lossily_or_loses_a_word"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=1000)
    p.add_argument("--seed", type=int, help="repeat a run (its seed is printed)")
    p.add_argument("--kill-percent", type=float, default=1.0)
    p.add_argument("--rollback-percent", type=float, default=5.0)
    a = p.parse_args(argv)
    if a.turns < 1 or not 0 <= a.kill_percent <= 100 or not 0 <= a.rollback_percent <= 100:
        print("--turns must be at least 1, the percentages within 0-100", file=sys.stderr)
        return 2
    env = dict(
        os.environ,
        KTR_SOAK_TURNS=str(a.turns),
        KTR_SOAK_KILL_PERCENT=str(a.kill_percent),
        KTR_SOAK_ROLLBACK_PERCENT=str(a.rollback_percent),
    )
    if a.seed is not None:
        env["KTR_SOAK_SEED"] = str(a.seed)
    argv = ["cargo", "test", "--test", "integration", "--", "--ignored", "--exact", TEST, "--nocapture"]
    proc = subprocess.run(argv, cwd=REPO, env=env)
    return 0 if proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
