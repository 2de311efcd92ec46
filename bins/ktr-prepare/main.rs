//! `ktr-prepare` — stage 1 of a rebuild (SPEC §10).
//!
//! Waits `activation_delay_seconds`, checks the transcript is a `*.jsonl`
//! inside `project_dir` and that `claude_workdir` encodes to that folder
//! (refusing before anything is written), waits until the transcript is
//! stable, freezes a 0600 copy into `artifacts/<id>/` and from then on reads
//! only the copy. Builds the plan (poison, overflow, malformed lines or no
//! turns fail the operation with the reason), writes the startup snapshot
//! and the candidate `<project_dir>/<new id>.jsonl`, records digests,
//! manifest, statistics and the target identity, and starts `ktr-verify`.
//!
//! Usage: `ktr-prepare --config PATH --operation ID [--transcript PATH]`
//! (from the Stop hook), or in pointer mode without a Stop hook
//! `ktr-prepare --config PATH --transcript PATH [--confirm REBUILD]
//! [--reason TEXT]`: it takes the pending operation, or requests one when
//! given `--confirm REBUILD`, and runs the whole pipeline before it returns.

fn main() {
    ktr_pipeline::stages::cli::main_prepare()
}
