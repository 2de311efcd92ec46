//! The operations: `active`, what is in flight, what waits.

use super::{Check, fail, pass, warn};
use ktr_base::config::Config;
use ktr_pipeline::operation::{Active, Store};
use ktr_pipeline::targets::Target;

pub(super) fn operations(config: &Config) -> Check {
    let store = Store::at(&config.state_dir);
    if let Active::Unknown(why) = store.active_state()
        && (config.state_dir.join("operations").exists() || why != "missing")
    {
        // The Stop hook would rebuild it at the next reply; doctor does it
        // now and says so.
        return match store.rebuild_active(ktr_pipeline::operation::LOCK_TIMEOUT) {
            Ok(op) => warn(
                "operations",
                format!(
                    "repaired: the state file `active` was {why}; rebuilt from the operation files: {}",
                    in_flight_line(&op)
                ),
                "nothing more to do; if it happens again, check what else writes into state_dir",
            ),
            Err(e) => fail(
                "operations",
                format!("the state file `active` is {why} and cannot be rebuilt: {e}"),
                "`ktr repair` lists damaged operation files; fix or set them aside, then run `ktr doctor` again",
            ),
        };
    }
    if let Ok(scanned) = store.scan()
        && let Some(first) = scanned.damaged.first()
    {
        return fail(
            "operations",
            format!(
                "{} damaged operation file(s): {}",
                scanned.damaged.len(),
                first.why
            ),
            "`ktr repair` lists them; `ktr repair --confirm REPAIR` moves them to state/damaged/ (nothing is deleted)",
        );
    }
    let in_flight = store.in_flight();
    for entry in &in_flight {
        let (id, status) = (&entry.id, entry.status);
        if let Ok(op) = store.load(id)
            && let Some(worker) = op.worker.as_ref().filter(|w| !w.alive())
        {
            return fail(
                "operations",
                format!(
                    "operation {id} ({}) is {status} but its worker (pid {}, {}) is gone",
                    entry.lane, worker.pid, worker.stage
                ),
                "run `ktr status`: it marks the operation failed so the next request is not blocked",
            );
        }
        if let Ok(op) = store.load(id)
            && let Some(check) = waiting_for_another_session(config, &op)
        {
            return check;
        }
    }
    if !in_flight.is_empty() {
        let ops: Vec<_> = in_flight
            .iter()
            .filter_map(|e| store.load(&e.id).ok())
            .collect();
        return pass("operations", in_flight_line(&ops));
    }
    match store.latest() {
        Ok(Some(op)) if op.needs_attention => fail(
            "operations",
            format!(
                "the latest operation {} is {} and needs attention: {}",
                op.id,
                op.status,
                op.error
                    .as_deref()
                    .unwrap_or("the old session could not be restored")
            ),
            "check what the target runs now and resume the right session by hand (HANDOFF.md, \"failed recovery\")",
        ),
        Ok(Some(op)) => pass(
            "operations",
            format!("none active; latest {} is {}", op.id, op.status),
        ),
        Ok(None) => pass("operations", "none yet".into()),
        Err(e) => fail(
            "operations",
            e.message,
            "check state_dir permissions (0700, owned by you)",
        ),
    }
}

/// A pending request bound to a session the target does not run waits for
/// a Stop that may never come: say so, with its age (it expires after
/// `request_ttl_hours`).
/// The operations in flight, one per session, in a line.
fn in_flight_line(ops: &[ktr_pipeline::operation::Operation]) -> String {
    if ops.is_empty() {
        return "none in flight".into();
    }
    ops.iter()
        .map(|op| format!("operation {} is {} ({})", op.id, op.status, op.lane()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A request pending for a session of this project that the configured
/// target does not run (a session of another project, with its own
/// target, is none of this config's business).
fn waiting_for_another_session(
    config: &Config,
    op: &ktr_pipeline::operation::Operation,
) -> Option<Check> {
    let bound = op
        .session_id
        .as_deref()
        .filter(|_| op.status == ktr_pipeline::operation::Status::Pending)?;
    if !config.project_dir.join(format!("{bound}.jsonl")).is_file() {
        return None;
    }
    let runs = Target::from_config(config).running().ok()?.session?;
    if runs == bound {
        return None;
    }
    let age = crate::report::age(&op.created_at, std::time::SystemTime::now())
        .map_or_else(|| "?".to_string(), crate::report::human_age);
    Some(fail(
        "operations",
        format!(
            "operation {} has waited {age} for session {bound}, which the target does not run (it runs {runs}); it expires {} h after the request (request_ttl_hours)",
            op.id, config.request_ttl_hours
        ),
        format!(
            "resume {bound} in the target, or `ktr cancel {} --confirm CANCEL`",
            op.id
        ),
    ))
}
