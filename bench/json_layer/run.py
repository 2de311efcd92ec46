#!/usr/bin/env python3
"""The engine's reader against serde_json readers alone, in the same rounds (bench/README.md, "The JSON layer").

``python3 bench/json_layer/run.py [--runs 7] [--ktr PATH] [--chain N] FILE...``

For each FILE (warm cache: read once, every command run once untimed), ``--runs``
interleaved rounds of ``wc -l``, ``openssl dgst -sha256``, ``ktr plan --json`` and
``json-layer MODE`` for every mode (see ``src/main.rs``); then one run of each under
``/usr/bin/time -f %M`` for the peak RSS. Prints a Markdown table: medians, the
ratio to ``openssl`` and to ``ktr plan``, MB/s, peak RSS. Builds the bench program
first (``cargo build --release --offline`` here, target dir ``target/json_layer``
of the repository) and ``ktr`` with ``--profile release`` unless ``--ktr`` names one.
With ``--chain N``, also ``ktr-prepare --confirm REBUILD`` (prepare, verify, activate in pointer
mode, ``chain.py``'s sandbox) N times on each file: the median seconds of each stage.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import statistics
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
import chain  # noqa: E402  (bench/chain.py: chain_once)
import run  # noqa: E402  (bench/run.py: spawn, peak_rss, median_ms, write_config, machine)

MODES = ("lines", "ignored", "serde", "serde1", "record", "engine")


def build() -> tuple[Path, Path]:
    target = run.REPO / "target" / "json_layer"
    env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
    subprocess.run(["cargo", "build", "--release", "--offline", "--quiet"], cwd=HERE, env=env, check=True)
    subprocess.run(["cargo", "build", "--release", "--locked", "--quiet", "--bin", "ktr", "--bin", "ktr-prepare"],
                   cwd=run.REPO, check=True)
    return target / "release" / "ktr-json-layer-bench", run.REPO / "target" / "release" / "ktr"


def commands(path: Path, ktr: Path, bench: Path, cfg: Path) -> dict[str, list[str]]:
    cmds = {"wc -l": [shutil.which("wc") or "wc", "-l", str(path)]}
    openssl = shutil.which("openssl")
    if openssl:
        cmds["openssl sha256"] = [openssl, "dgst", "-sha256", str(path)]
    cmds["ktr plan --json"] = [str(ktr), "plan", "--config", str(cfg), "--transcript", str(path), "--json"]
    for mode in MODES:
        cmds[f"json-layer {mode}"] = [str(bench), mode, str(path)]
    return cmds


def measure(path: Path, ktr: Path, bench: Path, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="ktr-json-layer-") as tmp_name:
        tmp = Path(tmp_name)
        cfg = run.write_config(tmp, path.parent)
        cmds = commands(path, ktr, bench, cfg)
        path.read_bytes()
        for name, argv in cmds.items():
            _, _, rc = run.spawn(argv, stdout=str(tmp / "out.txt"))
            # A plan over the window's budget is still a whole plan: exit 1 and its report.
            blocked = name.startswith("ktr") and rc == 1 and '"blocked_reason": "' in (tmp / "out.txt").read_text()
            if rc != 0 and not blocked:
                run.die(f"{name} failed ({rc}): {' '.join(argv)}")
            if name.startswith("json-layer"):
                print(f"  {(tmp / 'out.txt').read_text().strip()}")
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for _ in range(runs):
            for name, argv in cmds.items():
                times[name].append(run.spawn(argv)[0])
        rss = {name: run.peak_rss(argv, tmp)[0] for name, argv in cmds.items()}
    size = path.stat().st_size
    med = {name: run.median_ms(xs) for name, xs in times.items()}
    base = med.get("openssl sha256", med["wc -l"])
    plan = med["ktr plan --json"]
    print(f"\n{path} ({size / 1e6:.1f} MB), {runs} rounds, load {os.getloadavg()[0]:.1f}")
    print("| command | median ms | min ms | MB/s | × openssl | × plan | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for name, xs in times.items():
        print(f"| `{name}` | {med[name]:.1f} | {min(xs) * 1000:.1f} | {size / 1e6 / (med[name] / 1000):.0f} "
              f"| {med[name] / base:.2f} | {med[name] / plan:.2f} | {rss[name] / 1024:.1f} |")


def measure_chain(path: Path, bins: Path, runs: int) -> None:
    """prepare → verify → activate on ``path``, named as a session file as the chain needs it."""
    with tempfile.TemporaryDirectory(prefix="ktr-json-layer-chain-") as tmp_name:
        session = str(uuid.uuid5(uuid.NAMESPACE_URL, path.name))
        source = Path(tmp_name) / f"{session}.jsonl"
        try:
            os.link(path, source)
        except OSError:
            shutil.copyfile(path, source)
        stages: dict[str, list[float]] = {"wall": [], "prepare": [], "verify": [], "activate": []}
        for _ in range(runs):
            r = chain.chain_once(bins, source, session, 600)
            stages["wall"].append(r["wall"])
            for name, secs in r["stages"].items():
                stages[name].append(secs)
    print(f"chain, {runs} runs: " + ", ".join(f"{k} {statistics.median(v):.3f} s" for k, v in stages.items() if v))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", type=Path)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--ktr", type=Path, help="a ktr binary (default: build target/release/ktr)")
    p.add_argument("--chain", type=int, default=0, help="also time the chain this many times per file")
    a = p.parse_args()
    bench, ktr = build()
    ktr = a.ktr or ktr
    print(f"{run.machine()}; load at start {os.getloadavg()[0]:.1f}")
    for path in a.files:
        measure(path.resolve(), ktr, bench, a.runs)
        if a.chain:
            measure_chain(path.resolve(), ktr.parent, a.chain)
    return 0


if __name__ == "__main__":
    sys.exit(main())
