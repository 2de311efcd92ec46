//! `ktr-activate` — stage 3 of a rebuild (SPEC §10, §12).
//!
//! Compare-and-swap under the coordinator lock: verified; source digest
//! unchanged (else back to `pending`, re-prepared at the next Stop, up to
//! `source_change_retries` times); candidate digest unchanged; the target
//! (tmux pane pid, systemd `MainPID`, pointer content) is the one recorded at
//! prepare and no other transcript in `project_dir` changed since — else
//! `failed` with `session_conflict` and the target untouched. Then switches
//! the target to the new session and checks its health (and Claude Code's
//! own `SessionStart` receipt when `ktr-ack` is installed): `activated`, or the
//! old session is resumed (`rolled_back`; `failed` + `needs_attention` if
//! even that fails).
//!
//! Usage: `ktr-activate --config PATH --operation ID`

fn main() {
    ktr_pipeline::stages::cli::main(
        ktr_pipeline::stages::Stage::Activate,
        ktr_pipeline::stages::activate_stage,
    )
}
