//! Stage 2, `ktr-verify` (SPEC §10): check the candidate against the
//! frozen backup, independently of how prepare selected it.

use super::{Outcome, Stage, Steps, abandon, guarded, pause_point, update};
use crate::carry::ManifestEntry;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::fsutil::sha256_file;
use crate::operation::{Status, Store, now_rfc3339};
use crate::verify::{Expected, verify as check};

/// Verify operation `id` (status `verifying`): the backup still has the
/// frozen digest, and [`crate::verify::verify`] passes (structure, a fresh
/// rebuild, the conservation check). Passing records the report and
/// names `ktr-activate` next; failing discards the candidate and fails the
/// operation with the reason.
pub fn verify(config: &Config, store: &Store, id: &str, steps: &mut Steps) -> Result<Outcome> {
    let op = store.claim(id, Status::Verifying, Status::Verifying, "verify")?;
    guarded(store, id, steps, |steps| {
        pause_point(Stage::Verify, "start");
        let missing = |what: &str| Error::refused(format!("operation {id} has no {what} recorded"));
        let candidate = op.candidate.clone().ok_or_else(|| missing("candidate"))?;
        let backup = op.backup.clone().ok_or_else(|| missing("backup"))?;
        let source_sha256 = op
            .source_sha256
            .clone()
            .ok_or_else(|| missing("source digest"))?;
        let backup_sha256 = sha256_file(&backup)?;
        if backup_sha256 != source_sha256 {
            return Err(Error::refused(format!(
                "verification failed: backup {} no longer has the frozen digest",
                backup.display()
            )));
        }
        let manifest: Vec<ManifestEntry> = op
            .manifest
            .iter()
            .map(|v| serde_json::from_value(v.clone()))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| {
                Error::refused(format!("verification failed: manifest is damaged: {e}"))
            })?;
        let expected = Expected {
            session_id: &candidate.session_id,
            candidate_sha256: &candidate.sha256,
            manifest: &manifest,
            left_out: &op.left_out,
        };
        match check(config, &backup, &candidate.path, &expected) {
            Ok(report) => {
                // The same counts `ktr status` shows (items, left out by
                // reason), then what the independent check found.
                steps.say(format!(
                    "verified {} candidate lines: {} carried items; left out: {}; conservation: {} speech pieces of the source found in the candidate, {} records with speech left out as planned",
                    report.candidate_lines,
                    op.manifest.len(),
                    crate::report::left_out_summary(&crate::report::left_out_by_reason(&op.left_out)),
                    report.source_pieces_checked,
                    report.source_records_left_out
                ));
                pause_point(Stage::Verify, "verified");
                let mut verification = serde_json::to_value(&report).unwrap_or_default();
                if let Some(map) = verification.as_object_mut() {
                    map.insert("ok".into(), true.into());
                    map.insert("at".into(), now_rfc3339().into());
                }
                let op = update(store, id, Status::Verifying, None, |op| {
                    op.verification = Some(verification);
                })?;
                Ok(Outcome {
                    operation: op,
                    next: Some(Stage::Activate),
                })
            }
            Err(e) => {
                steps.say(&e.message);
                let op = abandon(store, id, &e.message, |op| {
                    op.verification = Some(serde_json::json!({
                        "ok": false,
                        "at": now_rfc3339(),
                        "error": e.message,
                    }));
                })?;
                Ok(Outcome::done(op))
            }
        }
    })
}
