//! `ktr-rollback` (SPEC §10): switch an activated operation back to the
//! old session, compare-and-swap checked.

use super::{Outcome, Stage, Steps, abandon, guarded, pause_point, source_session};
use crate::operation::{Status, Store};
use crate::target::Target;
use ktr_base::config::Config;
use ktr_base::error::Result;

/// Roll operation `id` back (status `rollback_scheduled` → `rolling_back`):
/// the target must still run what activation left (the identity recorded
/// after activation), else `failed` + `session_conflict` with the target
/// untouched; then resume the source session and check its health:
/// `rolled_back`, or `failed` with `needs_attention`.
pub fn rollback(config: &Config, store: &Store, id: &str, steps: &mut Steps) -> Result<Outcome> {
    let op = store.claim(id, Stage::Rollback, Status::RollingBack)?;
    guarded(store, id, steps, |steps| {
        let target = Target::from_config(config);
        let old = source_session(&op)?;
        let now = target.identity()?;
        if Some(&now) != op.target_after.as_ref() {
            let why = format!(
                "{target} changed since activation (identity {:?}, now {now:?}); not rolling back",
                op.target_after.as_deref().unwrap_or("")
            );
            steps.say(&why);
            return abandon(store, id, &why, |op| op.session_conflict = true).map(Outcome::done);
        }
        if let Some(restored) = crate::recall::archive::restore_source(&config.project_dir, &op)? {
            steps.say(&restored);
        }
        steps.say(format!("switching {target} back to {old}"));
        let back = super::activate::restore(config, &op, &target, || {
            pause_point(Stage::Rollback, "switched");
        });
        let op = match back {
            Ok((identity, what)) => store.with_lock(|tx| {
                let mut op = tx.load(id)?;
                op.target_after = Some(identity.clone());
                let note = format!("rolled back: {target} runs {what} again (identity {identity})");
                tx.transition(&mut op, Status::RolledBack, &note)?;
                Ok(op)
            })?,
            Err(e) => {
                let now = target
                    .identity()
                    .unwrap_or_else(|e| format!("unknown: {e}"));
                abandon(store, id, &format!("rollback to {old} failed: {e}"), |op| {
                    op.rollback_ok = Some(false);
                    op.needs_attention = true;
                    op.target_after = Some(now);
                })?
            }
        };
        steps.say(format!("operation is {}", op.status));
        Ok(Outcome::done(op))
    })
}
