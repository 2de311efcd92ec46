//! Stage 2, `ktr-verify` (SPEC §10): check the candidate against the
//! frozen backup, independently of how prepare selected it.

use super::{Outcome, Stage, Steps, abandon, guarded, pause_point, update};
use crate::operation::Verification;
use crate::operation::{Status, Store, manifest, progress};
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::OperationId;
use ktr_engine::conserve::{self, Expected, check};
use ktr_engine::meter::Meter;

/// Verify operation `id` (status `verifying`): the backup still has the
/// frozen digest, the manifest artifact still has the digest prepare
/// recorded, and [`ktr_engine::conserve::check`] passes (structure, a fresh
/// rebuild, the conservation check). Passing records the report and
/// names `ktr-activate` next; failing discards the candidate and fails the
/// operation with the reason.
pub fn verify(
    config: &Config,
    store: &Store,
    id: &OperationId,
    steps: &mut Steps,
) -> Result<Outcome> {
    let op = store.claim(id, Stage::Verify, Status::Verifying)?;
    guarded(store, id, steps, |steps| {
        pause_point(Stage::Verify, "start");
        let missing = |what: &str| Error::refused(format!("operation {id} has no {what} recorded"));
        let candidate = op.candidate.clone().ok_or_else(|| missing("candidate"))?;
        let backup = op.backup.clone().ok_or_else(|| missing("backup"))?;
        let source_sha256 = op
            .source_sha256
            .clone()
            .ok_or_else(|| missing("source digest"))?;
        let recorded = op
            .manifest_artifact
            .clone()
            .ok_or_else(|| missing("manifest artifact"))?;
        let artifact = manifest::Artifact {
            store,
            id,
            recorded: &recorded,
        };
        let expected = Expected {
            session_id: &candidate.session_id,
            backup_sha256: source_sha256.as_str(),
            candidate_sha256: candidate.sha256.as_str(),
            manifest: &artifact,
            left_out: &artifact,
        };
        // Planned without the blocked prompt's open turn when it comes back.
        let without_tail;
        let config = if op.prompt_back.as_ref().is_some_and(|b| !b.carried) {
            without_tail = super::prepare::without_open_tail(config);
            &without_tail
        } else {
            config
        };
        let total = std::fs::metadata(&backup).map_or(0, |m| m.len());
        let meter = Meter::default();
        let checked =
            progress::watching(store, id, Stage::Verify, "verifying", total, &meter, || {
                check(config, &backup, &candidate.path, &expected, &meter)
            })
            .map_err(|mut e| {
                // A changed or missing manifest artifact is found mid-check.
                if e.find::<conserve::Failed>().is_none() {
                    e.message = format!("verification failed: {}", e.message);
                }
                e
            });
        match checked {
            Ok(report) => {
                // The same counts `ktr status` shows (items, left out by
                // reason), then what the independent check found.
                steps.say(format!(
                    "verified {} candidate lines: {} carried items; left out: {}; conservation: {} speech pieces of the source found in the candidate, {} records with speech left out as planned",
                    report.candidate_lines,
                    recorded.items,
                    crate::operation::manifest::left_out_summary(&recorded.left_out_by_reason),
                    report.source_pieces_checked,
                    report.source_records_left_out
                ));
                pause_point(Stage::Verify, "verified");
                let op = update(store, id, Status::Verifying, None, |op| {
                    op.verification = Some(Verification::passed(report));
                })?;
                Ok(Outcome {
                    operation: op,
                    next: Some(Stage::Activate),
                })
            }
            Err(e) => {
                steps.say(&e.message);
                let op = abandon(store, id, &e.message, |op| {
                    op.verification = Some(Verification::failed(&e.message));
                })?;
                Ok(Outcome::done(op))
            }
        }
    })
}
