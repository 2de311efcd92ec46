//! `ktr-verify` — stage 2 of a rebuild (SPEC §10).
//!
//! Re-reads the frozen backup (its digest must still be the frozen one)
//! and checks the candidate line by line: JSON, only `user`/`assistant`,
//! derived uuids and links, timestamps, plain text equal to the manifest,
//! the file digest; then a fresh rebuild must give the same bytes, and the
//! independent conservation check must find every real user/assistant text
//! of the source in the candidate, except what the plan left out. Passing
//! records the report and starts `ktr-activate`; failing deletes the
//! candidate and fails the operation with the reason.
//!
//! Usage: `ktr-verify --config PATH --operation ID`

fn main() {
    ktr_pipeline::stages::cli::main(
        ktr_pipeline::stages::Stage::Verify,
        ktr_pipeline::stages::verify_stage,
    )
}
