//! `ktr-rollback` — switch an activated operation back (SPEC §10).
//!
//! Started by the Stop hook of the new session after a `ROLLBACK` request.
//! The target must still run what activation left (same identity), else
//! the operation fails with `session_conflict` and nothing is touched; then
//! the old session is resumed and health-checked: `rolled_back`, or
//! `failed` with `needs_attention`.
//!
//! Usage: `ktr-rollback --config PATH --operation ID`

fn main() {
    ktr_pipeline::stages::cli::main(
        ktr_pipeline::stages::Stage::Rollback,
        ktr_pipeline::stages::rollback_stage,
    )
}
