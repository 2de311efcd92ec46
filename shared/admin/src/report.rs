//! What a human (`ktr status`, `ktr ops`) or the model (`thread_rebuild_status`)
//! is shown about operations: one serializable view per operation and one
//! row per operation for the history table. Built from [`Operation`] only,
//! so the CLI and the MCP server show the same facts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use ktr_base::config::Config;
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Exists, confine};
use ktr_base::time::{Timestamp, parse_rfc3339};
use ktr_engine::window;
pub use ktr_pipeline::operation::manifest::{left_out_by_reason, left_out_summary};
use ktr_pipeline::operation::{Operation, RestoreFile, Status, Store, Transition, Worker};
use ktr_pipeline::window_cache;

/// Everything `status` shows about one operation. The manifest is summarised
/// by its length (it holds one entry per carried item and can be long).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusView {
    pub id: OperationId,
    pub status: Status,
    /// Activated, cancelled, failed or rolled back: blocks nothing.
    pub terminal: bool,
    /// What happens next, or what the human can do, in one sentence.
    pub next: String,
    pub reasons: Vec<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    /// The source session (bound by `--session` or by the first Stop hook).
    pub session_id: Option<String>,
    pub transcript_path: Option<PathBuf>,
    pub attempts: u32,
    pub worker: Option<Worker>,
    pub error: Option<String>,
    pub session_conflict: bool,
    pub needs_attention: bool,
    pub rollback_ok: Option<bool>,
    /// The rebuilt session's id, once prepare wrote it.
    pub candidate_session_id: Option<String>,
    pub candidate_path: Option<PathBuf>,
    pub candidate_sha256: Option<String>,
    /// The candidate file was discarded (a refused or failed switch never
    /// ran it), so `candidate_path` no longer exists.
    pub candidate_discarded: bool,
    pub source_sha256: Option<String>,
    /// The frozen 0600 copy of the source that the candidate was built from.
    pub backup: Option<PathBuf>,
    /// When prepare froze the source.
    pub prepared_at: Option<Timestamp>,
    pub manifest_items: usize,
    /// Conversation records the plan did not carry (each with its reason).
    pub left_out_records: usize,
    /// The same, counted by reason.
    pub left_out_by_reason: BTreeMap<String, usize>,
    /// Whether ktr-verify passed (`verification.ok`), once it ran.
    pub verified: Option<bool>,
    pub target_before: Option<String>,
    /// What the target ran right before the switch (the fallback and a
    /// rollback restore it): session and command line.
    pub target_ran: Option<String>,
    pub target_after: Option<String>,
    /// What the target runs now (`ktr status` and the MCP status tool fill
    /// it in by looking; None when not looked at or unreadable).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_now: Option<String>,
    /// ktr's estimate of the carried conversation (SPEC §6), without the
    /// fixed overhead of a fresh window (the window account measures it).
    pub estimated_tokens: Option<u64>,
    /// Claude Code's own count at resume (`ktr-ack`; see `Ack::context_tokens`).
    pub context_tokens: Option<u64>,
    /// When Claude Code acknowledged loading the rebuilt session.
    pub acked_at: Option<String>,
    pub history: Vec<Transition>,
    /// The restore session a rollback built (the old transcript's records,
    /// then the turns said since the switch), when it built one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreFile>,
    /// `rolled back to <old>: the N turns said since the rebuild came
    /// along`, once a rollback took them along.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<String>,
    /// The window of the session the operation is about (the rebuilt one
    /// once activated), filled in by [`StatusView::with_window`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowView>,
    /// How far the running stage's long step has come, filled in by
    /// [`StatusView::with_progress`] while one runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressView>,
}

/// A long step's progress as shown: the facts and the line a human reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProgressView {
    pub stage: String,
    pub step: String,
    pub done_bytes: u64,
    pub total_bytes: u64,
    pub percent: u64,
    /// At the rate so far; absent before anything was read.
    pub eta_seconds: Option<u64>,
    pub updated_at: Timestamp,
    /// `planning 340 of 680 MB (50 %), ≈ 12 s left`.
    pub line: String,
}

/// The window of a session as `ktr status` shows it: each figure with
/// where it came from. Read from the transcript's tail only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowView {
    pub session_id: String,
    /// The API's count for the last reply; None before the first reply.
    pub used_tokens: Option<u64>,
    pub used_source: String,
    pub size_tokens: u64,
    pub size_source: String,
    pub compaction_point_tokens: u64,
    pub compaction_point_source: String,
    /// False when Claude Code does not auto-compact: the point is then the
    /// window's hard limit.
    pub auto_compaction: bool,
    /// What a rebuild starts at, by the plan prepare made; None before.
    pub after_rebuild_tokens: Option<u64>,
    pub after_rebuild_source: String,
    /// The window begins after a compaction: the turns before it, which
    /// Claude Code has only in its summary and a rebuild carries word for
    /// word (the hooks' running account; 0 without one).
    pub summarised_turns: u64,
    /// The newest context Claude Code dropped without a compaction
    /// boundary (the same running account).
    pub cleared: Option<window::cleared::Cleared>,
}

impl StatusView {
    /// The view of `op`.
    pub fn of(op: &Operation) -> StatusView {
        StatusView {
            id: op.id.clone(),
            status: op.status,
            terminal: op.status.is_terminal(),
            next: next_step(op),
            reasons: op.reasons.clone(),
            created_at: op.created_at.clone(),
            updated_at: op.updated_at.clone(),
            session_id: op.session_id.as_ref().map(ToString::to_string),
            transcript_path: op.transcript_path.clone(),
            attempts: op.attempts,
            worker: op.worker.clone(),
            error: op.error.clone(),
            session_conflict: op.session_conflict,
            needs_attention: op.needs_attention,
            rollback_ok: op.rollback_ok,
            candidate_session_id: op.candidate.as_ref().map(|c| c.session_id.to_string()),
            candidate_path: op.candidate.as_ref().map(|c| c.path.clone()),
            candidate_sha256: op.candidate.as_ref().map(|c| c.sha256.to_string()),
            candidate_discarded: op
                .candidate
                .as_ref()
                .is_some_and(|c| !matches!(op.status, Status::Activated) && !c.path.exists()),
            source_sha256: op.source_sha256.as_ref().map(ToString::to_string),
            backup: op.backup.clone(),
            prepared_at: op.prepared_at.clone(),
            manifest_items: op.manifest_artifact.as_ref().map_or(0, |m| m.items),
            left_out_records: op.manifest_artifact.as_ref().map_or(0, |m| m.left_out),
            left_out_by_reason: op
                .manifest_artifact
                .as_ref()
                .map(|m| m.left_out_by_reason.clone())
                .unwrap_or_default(),
            verified: op.verification.as_ref().map(|v| v.ok),
            target_before: op.target_before.clone(),
            target_ran: op.target_ran.as_ref().map(|r| {
                if r.argv.is_empty() {
                    format!("session {}", r.session)
                } else {
                    format!("session {} ({})", r.session, r.argv.join(" "))
                }
            }),
            target_after: op.target_after.clone(),
            target_now: None,
            estimated_tokens: op.estimated_tokens,
            context_tokens: op.context_tokens(),
            acked_at: op.ack.as_ref().map(|a| a.at.to_string()),
            history: op.history.clone(),
            restore: op.restore.clone(),
            rolled_back: op
                .restore
                .as_ref()
                .filter(|_| op.status == Status::RolledBack)
                .and_then(|r| {
                    let old = ktr_pipeline::recall::lineage::source_session(op)?;
                    Some(ktr_pipeline::stages::came_along(&old, r.turns))
                }),
            window: None,
            progress: None,
        }
    }

    /// Add the progress of the operation's running step (a non-terminal
    /// operation whose stage writes one; see
    /// [`ktr_pipeline::operation::progress`]).
    #[must_use]
    pub fn with_progress(mut self, store: &Store) -> StatusView {
        if self.terminal {
            return self;
        }
        self.progress = store.progress(&self.id).map(|p| ProgressView {
            stage: p.stage.name().to_string(),
            percent: p.percent(),
            eta_seconds: p.eta().map(|d| d.as_secs()),
            line: p.line(),
            step: p.step,
            done_bytes: p.done_bytes,
            total_bytes: p.total_bytes,
            updated_at: p.updated_at,
        });
        self
    }

    /// Add the window of the session `op` is about: its rebuilt session
    /// once activated, else its source; a transcript that is not a regular
    /// file directly inside `project_dir` is not read (the one path rule).
    #[must_use]
    pub fn with_window(mut self, op: &Operation, config: &Config) -> StatusView {
        let (session, path) = match (&op.candidate, op.status) {
            (Some(c), Status::Activated) => (&c.session_id, c.path.clone()),
            _ => match (&op.session_id, &op.transcript_path) {
                (Some(s), Some(p)) => (s, p.clone()),
                _ => return self,
            },
        };
        let planned = op.stats.as_ref().and_then(|s| s.window.as_ref());
        self.window = WindowView::of(session, &path, config, planned);
        self
    }
}

impl WindowView {
    /// The window of `session` (transcript `path`), with the rebuild
    /// figure of prepare's plan when there is one; None when the
    /// transcript is not a regular file directly inside `project_dir` (the
    /// one path rule) or cannot be read.
    pub fn of(
        session: &SessionId,
        path: &Path,
        config: &Config,
        planned: Option<&window::Window>,
    ) -> Option<WindowView> {
        let path = confine(path, &config.project_dir, "transcript", Exists::Must).ok()?;
        let tail = window::usage::read_tail(&path).ok()?;
        let size = window_cache::size_for(config, session, None, tail.model.as_deref());
        let compaction = window_cache::compaction::setting();
        let (point, point_source) = compaction.point(size.tokens);
        let running = window_cache::running::peek(config, session, &path);
        Some(WindowView {
            used_tokens: tail.usage.as_ref().map(|u| u.tokens),
            used_source: match &tail.usage {
                Some(u) => format!(
                    "the API's count for the last reply{}",
                    u.at.as_deref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default()
                ),
                None => tail.missing.unwrap_or("no usage recorded yet").to_string(),
            },
            compaction_point_tokens: point,
            compaction_point_source: point_source,
            auto_compaction: compaction.auto(),
            size_tokens: size.tokens,
            size_source: size.source,
            after_rebuild_tokens: planned.map(|w| w.after_rebuild_tokens),
            after_rebuild_source: match planned {
                Some(w) => format!(
                    "prepare's plan: carried {} + overhead {}",
                    w.carried_tokens, w.overhead_tokens
                ),
                None => "not planned yet (`ktr plan` shows it)".into(),
            },
            session_id: session.to_string(),
            summarised_turns: running.as_ref().map_or(0, |r| r.summarised_turns),
            cleared: running.and_then(|r| r.clearing.last),
        })
    }
}

impl StatusView {
    /// Look at what `target` runs now: fills `target_now` and, for a
    /// pending request bound to a session the target does not run, says
    /// so in `next` (it waits for a Stop that may never come).
    #[must_use]
    pub fn looking_at(mut self, target: &ktr_pipeline::targets::Target) -> StatusView {
        let Ok(running) = target.running() else {
            return self;
        };
        self.target_now = Some(format!("{target} runs {}", running.describe()));
        let bound = self.session_id.as_deref();
        if let (Status::Pending, Some(bound), Some(runs)) = (self.status, bound, &running.session)
            && bound != runs
        {
            self.next = format!(
                "bound to session {bound}, which has not stopped since {}: the target runs session {runs}; resume {bound} there, or cancel with `ktr cancel {} --confirm CANCEL` (requests expire after request_ttl_hours)",
                self.created_at, self.id
            );
        }
        self
    }
}

/// One sentence: what happens next to `op`, or what a human can do.
pub fn next_step(op: &Operation) -> String {
    let id = &op.id;
    match op.status {
        Status::Pending => match &op.deferred {
            Some(why) => format!(
                "not switched yet ({why}); waits for the end of the next reply (Stop hook); cancel with `ktr cancel {id} --confirm CANCEL`"
            ),
            None => format!(
                "waits for the current reply to finish (Stop hook); cancel with `ktr cancel {id} --confirm CANCEL`"
            ),
        },
        Status::Scheduled | Status::Running => {
            "ktr-prepare is freezing the source and writing the candidate".into()
        }
        Status::Verifying => {
            "ktr-verify is checking the candidate against the frozen source".into()
        }
        Status::Activating => "ktr-activate is switching the target".into(),
        Status::Offered | Status::RollbackOffered => format!(
            "{}; the offer is withdrawn if the session speaks first, and expires after request_ttl_hours",
            ktr_pipeline::stages::hand::said(op)
        ),
        Status::Activated if op.needs_attention => {
            "activated, but a human must look at the target (needs_attention)".into()
        }
        Status::Activated => format!(
            "the target runs the rebuilt session; undo with `ktr rollback-request {id} --confirm ROLLBACK`"
        ),
        Status::RollbackPending => {
            "rollback waits for the current reply to finish (Stop hook)".into()
        }
        Status::RollbackScheduled | Status::RollingBack => {
            "ktr-rollback is switching back to the old session".into()
        }
        Status::Cancelled => "cancelled; nothing was changed".into(),
        Status::Failed if op.needs_attention => {
            "failed and a human must check what the target runs (target_after)".into()
        }
        Status::Failed if op.session_conflict => {
            "failed: a third party changed the target; check it before requesting again".into()
        }
        Status::Failed => {
            "failed; the old session is untouched; fix the error and request again".into()
        }
        Status::RolledBack => match &op.restore {
            Some(r) => format!(
                "the old conversation runs again as session {}, with the {} turns said since the rebuild",
                r.session_id, r.turns
            ),
            None => "the old session runs again".into(),
        },
        Status::Expired if op.candidate.is_some() => format!(
            "expired: {}; request again for a new one",
            op.error.as_deref().unwrap_or("nobody typed the offered line")
        ),
        Status::Expired => {
            "expired: the bound session never stopped within request_ttl_hours; nothing was changed; request again from the session the target runs".into()
        }
    }
}

/// One line of the `ops` history table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpsRow {
    pub id: String,
    pub status: Status,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub attempts: u32,
    pub reasons: Vec<String>,
    pub session_id: Option<String>,
    pub candidate_session_id: Option<String>,
    pub estimated_tokens: Option<u64>,
    pub context_tokens: Option<u64>,
    pub error: Option<String>,
    pub needs_attention: bool,
}

impl OpsRow {
    /// The row of `op`.
    pub fn of(op: &Operation) -> OpsRow {
        OpsRow {
            id: op.id.to_string(),
            status: op.status,
            created_at: op.created_at.clone(),
            updated_at: op.updated_at.clone(),
            attempts: op.attempts,
            reasons: op.reasons.clone(),
            session_id: op.session_id.as_ref().map(ToString::to_string),
            candidate_session_id: op.candidate.as_ref().map(|c| c.session_id.to_string()),
            estimated_tokens: op.estimated_tokens,
            context_tokens: op.context_tokens(),
            error: op.error.clone(),
            needs_attention: op.needs_attention,
        }
    }
}

/// The history table, newest first (from [`ktr_pipeline::operation::Store::list`],
/// which is oldest first).
pub fn ops(list: &[Operation]) -> Vec<OpsRow> {
    list.iter().rev().map(OpsRow::of).collect()
}

/// How long ago an RFC 3339 time was (None if unparseable or in the future).
pub fn age(at: &str, now: SystemTime) -> Option<Duration> {
    now.duration_since(parse_rfc3339(at)?).ok()
}

/// A short human age: `45 s`, `12 min`, `5 h`, `3 d`.
pub fn human_age(age: Duration) -> String {
    let s = age.as_secs();
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86_400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktr_base::ids::SessionId;
    use ktr_pipeline::operation::{Ack, CandidateFile, Verification};

    fn op(status: Status) -> Operation {
        Operation {
            status,
            ..Operation::new("big", None)
        }
    }

    #[test]
    fn the_view_shows_estimate_and_measurement_side_by_side() {
        let mut o = op(Status::Activated);
        o.estimated_tokens = Some(11_800);
        o.ack = Some(Ack {
            at: Timestamp::parse("2026-11-29T08:00:00.000Z").unwrap(),
            session_id: SessionId::parse("new").unwrap(),
            context_tokens: Some(49_100),
        });
        o.candidate = Some(CandidateFile {
            session_id: SessionId::parse("new").unwrap(),
            path: "/p/new.jsonl".into(),
            sha256: ktr_base::digest::Sha256::of_bytes(b"new"),
        });
        o.manifest_artifact = Some(ktr_pipeline::operation::ManifestRef {
            items: 3,
            left_out: 2,
            left_out_by_reason: [("local_command".to_string(), 2)].into(),
            ..Default::default()
        });
        o.verification = Some(Verification::failed("x"));
        o.verification.as_mut().unwrap().ok = true;
        let v = StatusView::of(&o);
        assert_eq!(
            (v.estimated_tokens, v.context_tokens),
            (Some(11_800), Some(49_100))
        );
        assert_eq!(v.candidate_session_id.as_deref(), Some("new"));
        assert_eq!(
            (v.manifest_items, v.left_out_records, v.verified, v.terminal),
            (3, 2, Some(true), true)
        );
        assert_eq!(v.left_out_by_reason["local_command"], 2);
        assert!(v.next.contains("ktr rollback-request"), "{}", v.next);
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["status"], "activated");
        assert!(json.get("manifest").is_none(), "the manifest is summarised");
    }

    #[test]
    fn every_status_has_a_next_step() {
        for s in Status::ALL {
            assert!(!next_step(&op(s)).is_empty(), "{s}");
        }
        assert!(next_step(&op(Status::Pending)).contains("ktr cancel"));
    }

    #[test]
    fn ops_are_newest_first() {
        let list = [
            op(Status::Failed),
            op(Status::Activated),
            op(Status::Pending),
        ];
        let rows = ops(&list);
        let statuses: Vec<_> = rows.iter().map(|r| r.status).collect();
        assert_eq!(
            statuses,
            [Status::Pending, Status::Activated, Status::Failed]
        );
    }

    #[test]
    fn ages_read_the_stored_times() {
        let now = parse_rfc3339("2026-11-29T12:00:00.000Z").unwrap();
        let age = age("2026-11-27T11:00:00.000Z", now).unwrap();
        assert_eq!(human_age(age), "2 d");
        assert_eq!(super::age("garbage", now), None);
        assert_eq!(super::age("2026-11-30T00:00:00Z", now), None);
        assert_eq!(human_age(Duration::from_secs(59)), "59 s");
        assert_eq!(human_age(Duration::from_secs(7200)), "2 h");
    }
}
