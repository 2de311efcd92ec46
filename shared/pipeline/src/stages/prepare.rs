//! Stage 1, `ktr-prepare` (SPEC §10): wait for the transcript to settle,
//! freeze a backup, build and write the candidate session.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::thread;

use sha2::Digest as _;

use super::freeze::freeze;
use super::{Outcome, Stage, Steps, guarded, pause_point, seconds, space, target_guard, update};
use crate::operation::manifest::{self, ManifestRef, ManifestWriter};
use crate::operation::progress;
use crate::operation::{CandidateFile, Operation, Status, Store, Worker};
use crate::targets::Target;
use crate::window_cache;
use ktr_base::config::{Activation, Config};
use ktr_base::digest::Sha256;
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, copy_atomic, write_atomic_with};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::time::Timestamp;
use ktr_engine::candidate::{ManifestEntry, Sink};
use ktr_engine::meter::Meter;
use ktr_engine::plan::{self, LeftOut, PlanReport};

/// Prepare operation `id` (status `scheduled`): sleep
/// `activation_delay_seconds`; resolve the transcript (`transcript`, else
/// the one the Stop hook recorded) inside `project_dir`; → `running`;
/// refuse a workdir that does not encode to `project_dir`'s name before
/// writing anything; wait until the file is stable; freeze it into
/// `artifacts/<id>/` and from then on read only that copy; build the plan
/// (blocked plans fail the operation with their reason); write the startup
/// snapshot and the candidate; record everything; → `verifying`.
///
/// Room on disk is measured before anything is written ([`space`]); a
/// write that finds none fails the operation with one line saying where
/// and how much, its partial files removed (a little room is kept aside so
/// that the failure can be recorded on a full disk).
pub fn prepare(
    config: &Config,
    store: &Store,
    id: &OperationId,
    transcript: Option<&Path>,
    steps: &mut Steps,
) -> Result<Outcome> {
    let op = store.claim(id, Stage::Prepare, Status::Scheduled)?;
    guarded(store, id, steps, |steps| {
        let artifacts = store.artifacts_dir(id)?;
        let prepared = space::Room::keep(&artifacts).and_then(|room| {
            let prepared = run(config, store, id, &op, transcript, steps);
            drop(room); // given back before the outcome is recorded
            prepared
        });
        prepared.map_err(|e| {
            if !e.is_no_space() {
                return e;
            }
            space::clear(&artifacts);
            let source = transcript
                .or(op.transcript_path.as_deref())
                .and_then(|t| plan::resolve_transcript(config, Some(t)).ok());
            match source.and_then(|s| Some((s.metadata().ok()?.len(), side_bytes(&s)))) {
                Some((len, side)) => {
                    space::Need::of(len, side, store.dir(), &config.project_dir).failure(&e)
                }
                None => e,
            }
        })
    })
}

/// The work of [`prepare`].
fn run(
    config: &Config,
    store: &Store,
    id: &OperationId,
    op: &Operation,
    transcript: Option<&Path>,
    steps: &mut Steps,
) -> Result<Outcome> {
    {
        pause_point(Stage::Prepare, "delay");
        if config.activation_delay_seconds > 0.0 {
            steps.say(format!(
                "waiting {} s (activation_delay_seconds)",
                config.activation_delay_seconds
            ));
            thread::sleep(seconds(config.activation_delay_seconds));
        }
        if let Some(refusal) = target_refusal(config, op) {
            steps.say(&refusal);
            let op = super::abandon(store, id, &refusal, |op| op.session_conflict = true)?;
            return Ok(Outcome::done(op));
        }
        let given = transcript
            .or(op.transcript_path.as_deref())
            .ok_or_else(|| {
                Error::usage("no transcript recorded for this operation; pass --transcript PATH")
            })?;
        let source = plan::resolve_transcript(config, Some(given))?;
        let op = update(
            store,
            id,
            Status::Scheduled,
            Some((Status::Running, "ktr-prepare started")),
            |op| {
                op.attempts += 1;
                op.transcript_path = Some(source.clone());
            },
        )?;
        steps.say(format!(
            "running (attempt {}) on {}",
            op.attempts,
            source.display()
        ));
        check_workdir(config)?;
        let len = std::fs::metadata(&source)
            .map_err(|e| Error::io_at("stat", &source, &e))?
            .len();
        space::Need::of(len, side_bytes(&source), store.dir(), &config.project_dir).check()?;
        pause_point(Stage::Prepare, "running");

        let frozen = freeze(
            config,
            store,
            id,
            &source,
            op.scheduled_reply.as_deref(),
            steps,
        )?;
        pause_point(Stage::Prepare, "frozen");

        let new_id = SessionId::new_random();
        let artifacts = store.artifacts_dir(id)?;
        keep_side_files(&source, &artifacts, steps)?;
        // The candidate is written as it is planned, into the operation's
        // artifacts first (its digest is known only at the end), then put
        // in place once the operation records it; its manifest goes beside
        // the backup as it is written, and the operation keeps the
        // manifest's digest and counts (a blocked plan's too: it lists the
        // malformed lines).
        let part = artifacts.join("candidate.jsonl.part");
        let _ = std::fs::remove_file(&part); // a killed earlier attempt's
        let mut out = Streamed::new(&part, ManifestWriter::create(store, id)?, corruption(steps))?;
        let back = prompt_back_for(config, store, &op, &frozen.backup, steps);
        let without_tail;
        let plan_config = match &back {
            Some(b) if !b.carried => {
                without_tail = without_open_tail(config);
                &without_tail
            }
            _ => config,
        };
        let meter = Meter::default();
        let plan = progress::watching(store, id, Stage::Prepare, "planning", len, &meter, || {
            pause_point(Stage::Prepare, "planning");
            plan::build_frozen_into(plan_config, &frozen.backup, Some(&new_id), &mut out, &meter)
        })?;
        // The window account: a rebuilt window over the compaction point
        // blocks the plan.
        let mut plan = plan;
        window_cache::measure(
            config,
            &frozen.backup,
            &mut plan.report,
            plan.window_estimate,
        )?;
        let written = out.finish(&plan.report).inspect_err(|_| {
            let _ = std::fs::remove_file(&part);
        })?;
        let manifest_ref = written.manifest.clone();
        let mut stats = manifest::bounded_stats(&plan.report, &source);
        stats.source_sha256 = frozen.sha256.to_string(); // the backup's, checked by the freeze
        if let Some(reason) = &plan.report.blocked_reason {
            let _ = std::fs::remove_file(&part);
            steps.say(format!("blocked: {reason}"));
            let op = super::abandon(store, id, reason, |op| {
                op.stats = Some(stats);
                op.manifest_artifact = Some(manifest_ref);
                op.source_sha256 = Some(frozen.sha256.clone());
                op.backup = Some(frozen.backup.clone());
            })?;
            return Ok(Outcome::done(op));
        }
        steps.say(format!(
            "planned {} turns, {} items, ~{} tokens",
            plan.report.selected_turns, plan.report.carried_items, plan.report.estimated_tokens
        ));
        if let Some(snapshot) = &plan.startup_text {
            let path = artifacts.join("startup_snapshot.txt");
            // Streamed: a long startup context is read again from the
            // frozen source a chunk at a time, never held whole.
            write_atomic_with(&path, 0o600, Existing::Replace, |file| {
                let mut out = std::io::BufWriter::with_capacity(1 << 16, file);
                let mut failed = None;
                let read = snapshot.for_each_chunk(&mut |s| {
                    out.write_all(s.as_bytes()).map_err(|e| {
                        let error = Error::io(e.to_string());
                        failed = Some(e);
                        error
                    })
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                read.map_err(|e| std::io::Error::other(e.message))?;
                out.flush()
            })?;
            steps.say(format!("startup snapshot frozen to {}", path.display()));
        }
        let target_before = Target::from_config(config).identity().map_err(|e| {
            Error::refused(format!("cannot read the target's identity: {}", e.message))
        })?;
        let project = config
            .project_dir
            .canonicalize()
            .map_err(|e| Error::io_at("resolve", &config.project_dir, &e))?;
        let candidate = CandidateFile {
            session_id: new_id.clone(),
            path: project.join(format!("{new_id}.jsonl")),
            sha256: written.sha256.clone(),
        };
        // Record first, then put in place: a stage killed in between leaves
        // a candidate on record that recovery can discard.
        update(store, id, Status::Running, None, |op| {
            op.source_sha256 = Some(frozen.sha256.clone());
            op.backup = Some(frozen.backup.clone());
            op.prepared_at = Some(Timestamp::at(frozen.at));
            op.candidate = Some(candidate.clone());
            op.manifest_artifact = Some(manifest_ref.clone());
            op.stats = Some(stats);
            op.estimated_tokens = Some(plan.report.estimated_tokens);
            op.target_before = Some(target_before.clone());
            op.verification = None;
            op.prompt_back.clone_from(&back);
        })?;
        put_in_place(&part, &candidate)?;
        steps.say(format!(
            "candidate {} written ({} lines, {} bytes); target identity {target_before:?}",
            candidate.path.display(),
            plan.lines,
            written.bytes
        ));
        pause_point(Stage::Prepare, "written");
        let op = update(
            store,
            id,
            Status::Running,
            Some((Status::Verifying, "candidate written")),
            |_| {},
        )?;
        Ok(Outcome {
            operation: op,
            next: Some(Stage::Verify),
        })
    }
}

/// Pointer mode without a Stop hook: the runner calls `ktr-prepare
/// --transcript P` between `claude -p` runs. Schedules the pending
/// operation for that transcript; when nothing is pending, requests one
/// itself, but only with `confirm == "REBUILD"`. Returns the operation,
/// scheduled with this process as its worker.
pub fn schedule_by_hand(
    config: &Config,
    store: &Store,
    transcript: Option<&Path>,
    confirmation: Option<&str>,
    reason: Option<&str>,
) -> Result<Operation> {
    if config.activation != Activation::Pointer {
        return Err(Error::usage(
            "--operation ID is required (the Stop hook passes it); only activation = \"pointer\" runs ktr-prepare without one",
        ));
    }
    let transcript = transcript.ok_or_else(|| {
        Error::usage("pointer mode needs --transcript PATH (the session the runner resumes)")
    })?;
    let source = plan::resolve_transcript(config, Some(transcript))?;
    let session = SessionId::of_transcript(&source)?;
    store.recover_stale()?;
    match store.active_for(&session) {
        None => {
            let Some(word) = confirmation else {
                return Err(Error::refused(
                    "no pending operation; pass --confirm REBUILD to request one for this transcript",
                ));
            };
            store.request(
                reason.unwrap_or("pointer-mode rebuild"),
                word,
                Some(&session),
            )?;
        }
        Some((_, Status::Pending)) => {}
        Some((other, status)) => {
            return Err(Error::refused(format!(
                "operation {other} is {status}; wait for it to finish (or cancel/rollback it) before requesting another"
            )));
        }
    }
    store.with_session(&session, crate::operation::LOCK_TIMEOUT, |tx| {
        let mut op = tx
            .session_operation(&session)?
            .ok_or_else(|| Error::refused("the pending operation disappeared; request again"))?;
        if op.status != Status::Pending {
            return Err(Error::refused(format!(
                "operation {} is {}; wait for it to finish first",
                op.id, op.status
            )));
        }
        if op.session_id.as_ref().is_some_and(|s| **s != *session) {
            return Err(Error::refused(format!(
                "operation {} is pending for session {}, not {session}",
                op.id,
                op.session_id.as_deref().unwrap_or("")
            )));
        }
        op.session_id = Some(session.clone());
        op.transcript_path = Some(source.clone());
        op.worker = Some(Worker::current(Stage::Prepare));
        tx.transition(
            &mut op,
            Status::Scheduled,
            "scheduled by ktr-prepare (pointer mode)",
        )?;
        Ok(op)
    })
}

/// Why the target must not be switched for this operation, if it must
/// not: it does not run the source session, or it changed since the
/// request. Checked before anything is frozen or written.
fn target_refusal(config: &Config, op: &Operation) -> Option<String> {
    let target = Target::from_config(config);
    let source = super::source_session(op).ok()?;
    let checked = target_guard::runs_source(&target, op, &source)
        .and_then(|running| target_guard::unchanged_since_request(&target, op, &running));
    checked.err().map(|e| e.message)
}

/// `claude_workdir` must encode to `project_dir`'s name, or `--resume`
/// would look in another folder after the old process is gone (INCIDENTS 4).
fn check_workdir(config: &Config) -> Result<()> {
    match config.workdir_mismatch() {
        Some(why) if config.verify_workdir_matches_project => Err(Error::refused(format!(
            "{why}; set claude_workdir to the directory Claude Code runs in (or verify_workdir_matches_project = false)"
        ))),
        _ => Ok(()),
    }
}

/// The bytes of the source's `<session>/tool-results/`, kept beside its
/// backup: part of the room a rebuild needs.
fn side_bytes(source: &Path) -> u64 {
    project_and_session(source).map_or(0, |(project, session)| {
        crate::recall::archive::side_bytes(project, &session)
    })
}

/// The folder of a transcript and the session its name gives.
fn project_and_session(source: &Path) -> Option<(&Path, SessionId)> {
    Some((source.parent()?, SessionId::of_transcript(source).ok()?))
}

/// Keep the source's `<session>/tool-results/` beside its backup: Claude
/// Code's cleanup deletes them with the transcript.
fn keep_side_files(source: &Path, artifacts: &Path, steps: &mut Steps) -> Result<()> {
    let Some((project, session)) = project_and_session(source) else {
        return Ok(());
    };
    let kept = crate::recall::archive::copy_side_files(project, artifacts, &session)?;
    if kept.files > 0 {
        steps.say(format!(
            "kept {} tool-results files ({} bytes) beside the backup",
            kept.files, kept.bytes
        ));
    }
    Ok(())
}

/// Put the written candidate at its path: a hard link (no copy; refused if
/// the path exists, like every candidate write), or a checked copy when the
/// state dir is on another file system. The `.part` file goes either way.
fn put_in_place(part: &Path, candidate: &CandidateFile) -> Result<()> {
    let placed = match std::fs::hard_link(part, &candidate.path) {
        Ok(()) => ktr_base::fsutil::sync_dir(&ktr_base::fsutil::parent_of(&candidate.path))
            .map_err(|e| Error::io_at("write", &candidate.path, &e)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::refused(format!(
            "{} already exists; refusing to overwrite it",
            candidate.path.display()
        ))),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            copy_atomic(part, &candidate.path, 0o600, Existing::Refuse).and_then(|copied| {
                if copied == candidate.sha256 {
                    Ok(())
                } else {
                    Err(Error::refused(format!(
                        "candidate {} changed while it was put in place (digest {copied}, written {}); prepare again",
                        candidate.path.display(),
                        candidate.sha256
                    )))
                }
            })
        }
        Err(e) => Err(Error::io_at("write", &candidate.path, &e)),
    };
    let _ = std::fs::remove_file(part);
    placed
}

/// The candidate as it is planned: each line into the `.part` file and its
/// digest, each manifest entry into the manifest artifact. Nothing of it is
/// held in memory.
struct Streamed {
    out: std::io::BufWriter<std::fs::File>,
    hasher: sha2::Sha256,
    bytes: u64,
    manifest: ManifestWriter,
    corruption: Option<Corruption>,
}

/// What [`Streamed`] wrote.
struct Written {
    sha256: Sha256,
    bytes: u64,
    manifest: ManifestRef,
}

impl Streamed {
    fn new(
        path: &Path,
        manifest: ManifestWriter,
        corruption: Option<Corruption>,
    ) -> Result<Streamed> {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| Error::io_at("create", path, &e))?;
        Ok(Streamed {
            out: std::io::BufWriter::with_capacity(1 << 16, file),
            hasher: sha2::Sha256::new(),
            bytes: 0,
            manifest,
            corruption,
        })
    }

    /// Make the candidate durable and put the manifest in place, with the
    /// plan's malformed lines after the items and the records left out.
    fn finish(mut self, report: &PlanReport) -> Result<Written> {
        let file = self
            .out
            .into_inner()
            .map_err(|e| Error::io(format!("cannot write the candidate: {}", e.error())))?;
        file.sync_all()
            .map_err(|e| Error::io(format!("cannot write the candidate: {e}")))?;
        for line in &report.malformed_line_numbers {
            self.manifest.push_malformed_line(*line)?;
        }
        Ok(Written {
            sha256: Sha256::of_hasher(self.hasher),
            bytes: self.bytes,
            manifest: self.manifest.finish()?,
        })
    }
}

impl Sink for Streamed {
    fn line(&mut self, json: &str, entry: ManifestEntry) -> Result<()> {
        let line = match self.corruption {
            Some(c) => c.apply(json),
            None => json.to_string(),
        };
        let (out, hasher, bytes) = (&mut self.out, &mut self.hasher, &mut self.bytes);
        let mut write = |part: &[u8]| {
            out.write_all(part)
                .map_err(|e| Error::io(format!("cannot write the candidate: {e}")))?;
            hasher.update(part);
            *bytes += part.len() as u64;
            Ok(())
        };
        // A long text's raw bytes are copied from the source as they go.
        ktr_engine::span::expand_json(&line, &mut write)?;
        write(b"\n")?;
        self.manifest.push_item(&entry)
    }

    fn left_out(&mut self, entry: LeftOut) -> Result<Option<LeftOut>> {
        self.manifest.push_left_out(&entry)?;
        Ok(None)
    }
}

/// A test hook's damage to every candidate line (debug builds only).
#[derive(Clone, Copy)]
#[cfg_attr(not(debug_assertions), allow(dead_code))]
enum Corruption {
    StripTimestamps,
}

impl Corruption {
    fn apply(self, json: &str) -> String {
        match self {
            Corruption::StripTimestamps => match serde_json::from_str::<serde_json::Value>(json) {
                Ok(mut record) => {
                    if let Some(map) = record.as_object_mut() {
                        map.remove("timestamp");
                    }
                    record.to_string()
                }
                Err(_) => json.to_string(),
            },
        }
    }
}

/// Debug builds only: `KTR_TEST_CORRUPT_CANDIDATE=strip-timestamps` removes
/// the `timestamp` of every candidate line as it is written, so that the
/// recorded digests describe the corrupted bytes (the manifest's texts are
/// unchanged) but Claude Code cannot load the session. The end-to-end tests
/// use it to prove that such a candidate is refused and the old session
/// keeps running. Release builds ignore the variable.
#[cfg(debug_assertions)]
fn corruption(steps: &mut Steps) -> Option<Corruption> {
    match std::env::var("KTR_TEST_CORRUPT_CANDIDATE").as_deref() {
        Ok("strip-timestamps") => {
            steps.say(
                "test hook: stripped every timestamp from the candidate (KTR_TEST_CORRUPT_CANDIDATE)",
            );
            Some(Corruption::StripTimestamps)
        }
        Ok(other) => {
            steps.say(format!(
                "KTR_TEST_CORRUPT_CANDIDATE={other:?} is not a known corruption; ignored"
            ));
            None
        }
        Err(_) => None,
    }
}

/// Release builds: the candidate is written as built.
#[cfg(not(debug_assertions))]
fn corruption(_steps: &mut Steps) -> Option<Corruption> {
    None
}

/// The plan's config when the blocked prompt comes back: its open turn
/// is left out (`include_open_tail = false`), so the rebuilt session ends
/// with the last reply. Verify checks with the same config.
pub(super) fn without_open_tail(config: &Config) -> Config {
    Config {
        include_open_tail: false,
        ..config.clone()
    }
}

/// Whether the prompt the compaction guard blocked for this operation
/// comes back after the switch, so the candidate must not carry it: the
/// target can give it back (tmux: pasted, with its text kept; pointer: the
/// runner sends it again) and the frozen transcript ends with its open
/// turn. Otherwise the kept prompt is forgotten: the rebuilt session
/// carries it as its last, unanswered turn (↑ then Enter sends it again).
fn prompt_back_for(
    config: &Config,
    store: &Store,
    op: &crate::operation::Operation,
    backup: &Path,
    steps: &mut Steps,
) -> Option<crate::operation::PromptBack> {
    use crate::prompt_back;
    let session = super::source_session(op).ok()?;
    let kept = match prompt_back::blocked(store.dir(), &session, &op.id) {
        Ok(Some(kept)) => kept,
        Ok(None) => return None,
        Err(e) => {
            steps.say(format!(
                "the blocked prompt is carried as the last turn: {}",
                e.message
            ));
            return None;
        }
    };
    let why_not = match (config.activation, &kept.prompt_id) {
        (_, None) => Some("Claude Code gave it no prompt_id".to_string()),
        (Activation::Systemd, _) => Some("a systemd unit has no input line".into()),
        _ => None,
    };
    // tmux pastes the kept text: one too long to keep stays in the
    // candidate, and the notice after the switch says so.
    let carried = config.activation == Activation::Tmux && kept.text.is_none();
    let found = match (&why_not, &kept.prompt_id) {
        (None, Some(id)) => match prompt_back::open_turn_is(backup, id) {
            Ok(Some(images)) => Ok(images),
            Ok(None) => Err("the transcript does not end with it".to_string()),
            Err(e) => Err(e.message),
        },
        (Some(why), _) => Err(why.clone()),
        (None, None) => Err("no prompt_id".into()),
    };
    match found {
        Ok(images) => {
            steps.say(if carried {
                format!(
                    "the prompt the guard blocked ({} characters) is too long to keep: the candidate carries it as its last turn",
                    kept.chars
                )
            } else {
                format!(
                    "the prompt the guard blocked ({} characters) is left out of the candidate: it comes back after the switch",
                    kept.chars
                )
            });
            Some(crate::operation::PromptBack {
                prompt_id: kept.prompt_id.clone().unwrap_or_default(),
                chars: kept.chars,
                images,
                carried,
            })
        }
        Err(why) => {
            steps.say(format!(
                "the prompt the guard blocked is carried as the last turn ({why})"
            ));
            prompt_back::forget(store.dir(), &session);
            None
        }
    }
}
