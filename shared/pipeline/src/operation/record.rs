//! The operation file (`operations/<id>.json`): the typed contract the
//! binaries hand off through. See docs/ARCHITECTURE.md for its schema.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::manifest::ManifestRef;
use super::{Stage, Status};
use crate::process::{self, ProcessId};
use crate::targets::Ran;
use ktr_base::digest::Sha256;
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::Timestamp;
use ktr_engine::{ConservationCounts, PlanReport};

/// The operation file format this ktr writes. 1: every release before the
/// field existed (untyped timestamps); 2: the `schema` field, timestamps
/// validated at load.
pub const SCHEMA: u32 = 2;

pub(super) fn schema_before_the_field() -> u32 {
    1
}

/// `history` keeps its first [`HISTORY_FIRST`] steps and the newest, up to
/// [`HISTORY_KEPT`] in all; notes are cut to [`NOTE_CHARS`] characters.
pub(crate) const HISTORY_KEPT: usize = 100;
const HISTORY_FIRST: usize = 10;
const NOTE_CHARS: usize = 1000;
/// `reasons` and `blocked_prompts` keep their newest entries.
pub(crate) const LIST_KEPT: usize = 20;

fn keep_newest<T>(list: &mut Vec<T>, kept: usize) {
    if list.len() > kept {
        list.drain(..list.len() - kept);
    }
}

fn cut_chars(text: &mut String, max: usize) {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
        text.push('…');
    }
}

/// How far in the future a time in an operation file may lie (clocks
/// that disagree a little): further, the file was edited or damaged.
const FUTURE_SLACK: Duration = Duration::from_secs(24 * 3600);

/// The process currently responsible for an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worker {
    pub pid: u32,
    /// `/proc/<pid>/stat` field 22: tells a live worker from a reused pid.
    pub start_time: u64,
    /// Which stage it runs.
    pub stage: Stage,
}

impl Worker {
    /// Describe a live process (None if it is already gone).
    pub fn of(pid: u32, stage: Stage) -> Option<Worker> {
        Some(Worker {
            pid,
            start_time: process::start_time(pid)?,
            stage,
        })
    }

    /// A process this one just spawned; when it is already gone, a record
    /// that recovery will see as dead.
    pub fn spawned(pid: u32, stage: Stage) -> Worker {
        Worker::of(pid, stage).unwrap_or(Worker {
            pid,
            start_time: 0,
            stage,
        })
    }

    /// The calling process.
    pub fn current(stage: Stage) -> Worker {
        let pid = std::process::id();
        Worker {
            pid,
            start_time: process::start_time(pid).unwrap_or(0),
            stage,
        }
    }

    /// Whether that very process still runs.
    pub fn alive(&self) -> bool {
        process::same_process_alive(self.pid, self.start_time)
    }
}

/// The rebuilt session file written by `ktr-prepare`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CandidateFile {
    pub session_id: SessionId,
    pub path: PathBuf,
    pub sha256: Sha256,
}

/// The restore session a rollback built (SPEC §10): the old transcript's
/// records, then the turns said in the rebuilt session since the switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreFile {
    pub session_id: SessionId,
    pub path: PathBuf,
    pub sha256: Sha256,
    /// The old transcript's records it holds (all of them).
    pub old_records: usize,
    /// The records of the rebuilt session it carries after them.
    pub new_records: usize,
    /// The turns said since the switch: prompts and channel messages.
    pub turns: usize,
}

/// A target as seen at one moment: its identity and the session it ran
/// (when that could be found).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SeenTarget {
    pub identity: String,
    #[serde(default)]
    pub session: Option<String>,
}

/// Claude Code's own receipt that it loaded the candidate (`ktr-ack`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    pub at: Timestamp,
    pub session_id: SessionId,
    /// Claude Code's `context_tokens` at resume: the last reply's usage of
    /// the resumed transcript, else (a ktr candidate carries no usage) its
    /// rough count of the messages, without system prompt and tools
    /// (2.1.328). With the first reply after the switch it measures the
    /// fixed overhead (`engine::window::overhead`).
    pub context_tokens: Option<u64>,
}

/// A Stop hook that came while an attempt was at work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StopMark {
    /// When the hook started.
    pub at: Timestamp,
    /// The end of its reply (as `scheduled_reply`).
    pub reply: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One step of an operation's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub at: Timestamp,
    pub from: Status,
    pub to: Status,
    pub note: String,
}

/// One rebuild request and everything learned while carrying it out
/// (`operations/<id>.json`). Fields the stages have not reached yet are null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Operation {
    /// The file's format ([`SCHEMA`]); files written before the field
    /// existed read as 1. A file newer than this ktr reads is refused.
    #[serde(default = "schema_before_the_field")]
    pub schema: u32,
    /// UUID v4.
    pub id: OperationId,
    pub status: Status,
    /// RFC 3339 UTC.
    pub created_at: Timestamp,
    /// RFC 3339 UTC; refreshed by every save.
    pub updated_at: Timestamp,
    /// Why a rebuild was requested; repeated requests merge in.
    pub reasons: Vec<String>,
    /// The source session. When set, only that session's Stop hook schedules.
    pub session_id: Option<SessionId>,
    /// The source transcript, as the Stop hook reported it.
    pub transcript_path: Option<PathBuf>,
    /// How many times prepare started (deferrals and source changes count).
    pub attempts: u32,
    /// How many attempts found the source changed after prepare with no
    /// new turn to explain it (`source_change_retries` bounds these).
    #[serde(skip_serializing_if = "is_zero")]
    pub source_changes: u32,
    pub worker: Option<Worker>,
    /// Digest of the frozen source backup.
    pub source_sha256: Option<Sha256>,
    pub candidate: Option<CandidateFile>,
    /// The manifest artifact (`artifacts/<id>/manifest.jsonl`: one entry
    /// per carried item (SPEC §7), the records left out, the malformed
    /// lines): its digest, size and counts, filled by prepare. Older
    /// operation files held the lists inline (`manifest`, `left_out`);
    /// those fields are ignored now.
    pub manifest_artifact: Option<ManifestRef>,
    /// Selection statistics of the plan (its report without `left_out`,
    /// `source_path` naming the real source, lists that grow with the
    /// transcript cut to their first 20 entries), filled by prepare.
    pub stats: Option<PlanReport>,
    /// Result of ktr-verify, filled by verify.
    pub verification: Option<Verification>,
    /// What the target ran when the rebuild was requested: prepare refuses
    /// when it changed since, unless the same session was resumed.
    pub requested_target: Option<SeenTarget>,
    /// The Claude Code process whose Stop hook scheduled the rebuild (the
    /// hook's parent, past `sh -c`): the target must run it to be switched.
    pub claude: Option<ProcessId>,
    /// Target identity recorded before the switch (tmux pane pid, `MainPID`, pointer).
    pub target_before: Option<String>,
    /// What the target ran right before the switch (session, command line,
    /// directory): the fallback and a rollback restore exactly this.
    pub target_ran: Option<Ran>,
    /// Target identity after the switch (or what it ran when a worker died).
    pub target_after: Option<String>,
    /// Why it failed, one line.
    pub error: Option<String>,
    /// A third party changed the target: never retry blindly.
    pub session_conflict: bool,
    /// A human must look at the target (e.g. a worker died mid-switch).
    pub needs_attention: bool,
    /// Whether the automatic fallback to the old session worked.
    pub rollback_ok: Option<bool>,
    /// Token estimate of the carried conversation (SPEC §6).
    pub estimated_tokens: Option<u64>,
    pub ack: Option<Ack>,
    pub history: Vec<Transition>,
    /// The frozen 0600 copy of the source (`artifacts/<id>/<source>.jsonl`).
    pub backup: Option<PathBuf>,
    /// RFC 3339 UTC: when prepare froze the source. Transcripts modified
    /// after this are competitors at activation.
    pub prepared_at: Option<Timestamp>,
    /// RFC 3339 UTC: when the Stop hook that scheduled this attempt started.
    /// A turn of the source session that began after it is never switched away.
    pub scheduled_at: Option<Timestamp>,
    /// The end of the reply whose Stop hook scheduled this attempt (at most
    /// 40 characters of its last line, from `last_assistant_message`):
    /// prepare freezes the transcript once it holds it.
    pub scheduled_reply: Option<String>,
    /// RFC 3339 UTC: when `ktr-prompt` first saw a prompt of the source
    /// session after the scheduling Stop (activation then defers).
    pub turn_started_at: Option<Timestamp>,
    /// Why the last attempt went back to `pending` instead of switching.
    pub deferred: Option<String>,
    /// The last Stop of the source session that came while this attempt
    /// was at work (`scheduled` … `verifying`), when it could not start
    /// one: if the attempt defers for a turn that Stop ended, the next one
    /// starts at once, as if that Stop had scheduled it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped_since: Option<StopMark>,
    /// Prompts `ktr-prompt` refused while the target was being switched;
    /// the new session tells the human to send them again.
    pub blocked_prompts: Vec<BlockedPrompt>,
    /// The prompt the compaction guard blocked, left out of this attempt's
    /// candidate because it comes back to the input line after the switch
    /// (tmux) or is sent again by the runner (pointer). Its text is never
    /// here: it stays in `<state_dir>/prompts/` ([`crate::prompt_back`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_back: Option<PromptBack>,
    /// The compaction guard (`ktr-precompact`) started the rebuild of this
    /// operation in place of Claude Code's compaction: when it fails, the
    /// guard does not block the next compaction for the same failure.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub by_compaction_guard: bool,
    /// Recovery failed it because its worker died in this status (killed,
    /// out of memory): a failure of the moment, not of the session.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_died_in: Option<Status>,
    /// The restore session the rollback switches to when the rebuilt
    /// session holds turns said since the switch (none: the old session
    /// itself is resumed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreFile>,
}

/// What the operation knows of the blocked prompt it puts back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptBack {
    /// Claude Code's `prompt_id` of the blocked prompt.
    pub prompt_id: String,
    /// Its length in characters.
    pub chars: usize,
    /// Image blocks the prompt's records held (they cannot be put back).
    pub images: usize,
    /// Too long to keep (tmux): the candidate carries it as its last turn
    /// instead, and the notice says so.
    #[serde(default)]
    pub carried: bool,
}

/// A prompt refused by `ktr-prompt` during a switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedPrompt {
    pub at: Timestamp,
    pub session_id: String,
    /// The prompt's first 200 characters.
    pub text: String,
    /// The session of ktr's own `/resume <id>` line when the prompt ended
    /// with it: the in-place switch collided with the person's typing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collided_with: Option<SessionId>,
}

impl BlockedPrompt {
    /// Whether this prompt is ktr's switch to `session` mixed with a
    /// person's keys.
    pub(crate) fn collision_with(&self, session: &SessionId) -> bool {
        self.collided_with.as_ref() == Some(session)
    }
}

impl Default for Operation {
    fn default() -> Self {
        let now = Timestamp::now();
        Operation {
            schema: SCHEMA,
            id: OperationId::default(),
            status: Status::Pending,
            created_at: now.clone(),
            updated_at: now,
            reasons: Vec::new(),
            session_id: None,
            transcript_path: None,
            attempts: 0,
            source_changes: 0,
            worker: None,
            source_sha256: None,
            candidate: None,
            manifest_artifact: None,
            stats: None,
            verification: None,
            requested_target: None,
            claude: None,
            target_before: None,
            target_ran: None,
            target_after: None,
            error: None,
            session_conflict: false,
            needs_attention: false,
            rollback_ok: None,
            estimated_tokens: None,
            ack: None,
            history: Vec::new(),
            backup: None,
            prepared_at: None,
            scheduled_at: None,
            scheduled_reply: None,
            turn_started_at: None,
            deferred: None,
            stopped_since: None,
            blocked_prompts: Vec::new(),
            prompt_back: None,
            by_compaction_guard: false,
            worker_died_in: None,
            restore: None,
        }
    }
}

impl Operation {
    /// Whether a stage is on record for it and that very process still runs.
    pub fn stage_alive(&self) -> bool {
        self.worker.as_ref().is_some_and(Worker::alive)
    }

    /// A new pending operation with a fresh UUID v4.
    pub fn new(reason: &str, session_id: Option<SessionId>) -> Operation {
        Operation {
            id: OperationId::new_random(),
            reasons: vec![reason.to_string()],
            session_id,
            ..Operation::default()
        }
    }

    /// Why this operation, as read from the state dir `dir`, cannot be one
    /// ktr wrote: a time far in the future, or a path that is not where
    /// ktr puts that file (the backup outside `artifacts/<id>/`, a
    /// candidate not named after its session, a relative or `..` path).
    /// Every value a stage would act on is checked here, once, at load.
    pub fn implausible(&self, dir: &Path) -> Option<String> {
        let latest = SystemTime::now() + FUTURE_SLACK;
        for (name, at) in [
            ("created_at", &self.created_at),
            ("updated_at", &self.updated_at),
        ] {
            if at.time() > latest {
                return Some(format!("{name} {at} lies in the future"));
            }
        }
        if let Some(backup) = &self.backup {
            let artifacts = dir.join("artifacts").join(self.id.as_str());
            let inside = backup.parent() == Some(artifacts.as_path())
                && backup
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().ends_with(".jsonl"));
            if !inside {
                return Some(format!(
                    "backup {backup:?} is not a transcript in {artifacts:?}"
                ));
            }
        }
        let sessions = [
            self.candidate
                .as_ref()
                .map(|c| ("candidate", &c.session_id, &c.path)),
            self.restore
                .as_ref()
                .map(|r| ("restore", &r.session_id, &r.path)),
        ];
        for (what, session, path) in sessions.into_iter().flatten() {
            let name = format!("{session}.jsonl");
            if !plain_absolute(path) || path.file_name() != Some(std::ffi::OsStr::new(&name)) {
                return Some(format!(
                    "{what} path {path:?} is not an absolute path to {name}"
                ));
            }
        }
        if let Some(path) = &self.transcript_path
            && !plain_absolute(path)
        {
            return Some(format!(
                "transcript_path {path:?} is not a plain absolute path"
            ));
        }
        None
    }

    /// Keep the lists that grow with an operation's life bounded, so the
    /// file every hook reads stays a few KiB: the first and the newest
    /// steps of `history`, the newest `reasons` and `blocked_prompts`.
    pub(crate) fn cap_lists(&mut self) {
        if self.history.len() > HISTORY_KEPT {
            let first = self.history.len() - (HISTORY_KEPT - HISTORY_FIRST);
            self.history.drain(HISTORY_FIRST..first);
        }
        for t in &mut self.history {
            cut_chars(&mut t.note, NOTE_CHARS);
        }
        keep_newest(&mut self.reasons, LIST_KEPT);
        keep_newest(&mut self.blocked_prompts, LIST_KEPT);
    }

    /// The measured size of the new window, if Claude Code acknowledged it.
    pub fn context_tokens(&self) -> Option<u64> {
        self.ack.as_ref().and_then(|a| a.context_tokens)
    }
}

/// What `ktr-verify` concluded. The activation gate reads `ok`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verification {
    pub ok: bool,
    pub at: Timestamp,
    /// Why it failed (when `ok` is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What was checked (when `ok` is true).
    #[serde(flatten)]
    pub counts: Option<ConservationCounts>,
}

impl Verification {
    /// A passed verification with what it checked.
    pub fn passed(counts: ConservationCounts) -> Verification {
        Verification {
            ok: true,
            at: Timestamp::now(),
            error: None,
            counts: Some(counts),
        }
    }

    /// A failed verification and why.
    pub fn failed(error: &str) -> Verification {
        Verification {
            ok: false,
            at: Timestamp::now(),
            error: Some(error.to_string()),
            counts: None,
        }
    }
}

/// Absolute, with no `.` or `..` component.
fn plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}
