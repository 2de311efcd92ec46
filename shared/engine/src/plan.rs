//! The read-only plan: scan → history → turns → candidate, with a report
//! of everything that was counted, dropped or refused. `ktr plan`,
//! `ktr-prepare` and `ktr-verify` all start here.

use crate::options::EngineOptions;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::candidate::{self, Candidate, Sink};
use crate::chain;
use crate::inline_str::InlineStr;
use crate::ledger::{self, Budget, LedgerReport, Measured};
pub use crate::left_out::LeftOut;
use crate::meter::{Meter, Metered};
use crate::reread::{Bytes, Reread};
use crate::scan::{Markers, NotSpeechCounts, Options, Scan};
use crate::turns::{self, LeftOutReason, Role, Selection};
use ktr_base::config::{HistoryMode, OnMalformed};
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;
use ktr_base::open::{Exists, Links, confine, open_regular};

/// How much of the first/last carried text the report shows.
const PREVIEW_CHARS: usize = 300;

/// A carried item as shown in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Preview {
    pub role: Role,
    pub text: String,
}

/// Everything `ktr plan` reports (SPEC §14).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    pub source_path: String,
    pub session_id: String,
    pub source_sha256: String,
    pub source_bytes: u64,
    /// The file grew, shrank or was rewritten while it was read: the plan
    /// (and `source_sha256`) covers the `source_bytes` it had when opened.
    #[serde(default)]
    pub source_changed_while_read: bool,
    pub versions_seen: Vec<String>,
    pub history_mode: HistoryMode,
    pub history_fallback_reason: Option<String>,
    pub source_turns: usize,
    pub selected_turns: usize,
    pub open_tail: bool,
    pub open_tail_kept: bool,
    pub dropped_oldest_turns: usize,
    pub leading_assistant_turns: usize,
    pub carried_items: usize,
    pub estimated_tokens: u64,
    pub startup_frozen: bool,
    pub startup_sha256: Option<String>,
    /// `SessionStart` hook contexts carried as attachment lines (the startup
    /// snapshot of today's format), ahead of the first item.
    #[serde(default)]
    pub startup_attachments: usize,
    pub compact_summaries_dropped: usize,
    pub compact_summaries_carried: usize,
    /// The compactions the rebuild undoes, oldest first (SPEC §5): each
    /// summary dropped, the turns before it carried word for word.
    #[serde(default)]
    pub compactions_undone: Vec<Undone>,
    pub abandoned_branch_records: usize,
    pub malformed_lines: usize,
    pub malformed_line_numbers: Vec<usize>,
    /// Speech texts holding a lone surrogate escape (`\ud83d` alone):
    /// valid JSON Claude Code loads, carried as written (`lone`).
    #[serde(default)]
    pub lone_surrogate_texts: usize,
    /// Speech texts holding a NUL character (`\u0000`), carried as written.
    #[serde(default)]
    pub nul_texts: usize,
    pub unknown_record_types: BTreeMap<String, u64>,
    pub unknown_attachment_types: BTreeMap<String, u64>,
    pub not_speech: NotSpeechCounts,
    pub elided_items: usize,
    /// Slash commands carried with their expansion (`carry_command_expansions`).
    #[serde(default)]
    pub command_expansions_carried: usize,
    /// Carried turns whose first user record had a missing or unparseable
    /// timestamp: stamped with the nearest parseable earlier time, or not
    /// stamped (never with the broken text).
    #[serde(default)]
    pub broken_timestamps: usize,
    pub poison_hits: usize,
    pub blocked_reason: Option<String>,
    pub ledger: LedgerReport,
    /// The window: used, size, after a rebuild, advice.
    pub window: Option<crate::window::Window>,
    pub first_carried: Option<Preview>,
    pub last_carried: Option<Preview>,
    /// Every conversation record that was not carried, with the reason
    /// (empty in an operation's stats, which keep it on its own, and in the
    /// MCP plan, which summarises it by reason); absent when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}

/// A compaction a rebuild undoes: Claude Code's summary, dropped, and the
/// turns before it, carried word for word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undone {
    /// The summary's line (the `isCompactSummary` record after the boundary).
    pub summary_line: usize,
    pub summary_uuid: Option<String>,
    /// Turns of the conversation before this compaction.
    pub turns_before: usize,
    /// Of those, the turns the rebuild carries (all but the oldest a
    /// `carry_max_tokens` cap dropped).
    pub turns_restored: usize,
}

/// A plan whose candidate was written into a [`Sink`]: the report and
/// what else the pipeline keeps.
#[derive(Debug, Clone)]
pub struct Planned {
    pub report: PlanReport,
    /// Formula estimate of what the current window holds (for the window account).
    pub window_estimate: u64,
    /// The frozen startup text (`startup_snapshot.txt`), if any: read
    /// again a chunk at a time ([`crate::span::Frozen`]).
    pub startup_text: Option<crate::span::Frozen>,
    /// The new session id the candidate was written under.
    pub session_id: String,
    /// Lines written into the sink.
    pub lines: usize,
}

/// A plan with its candidate in memory (`ktr plan`, tests). The pipeline
/// streams instead ([`build_into`]).
#[derive(Debug, Clone)]
pub struct Plan {
    pub report: PlanReport,
    /// Formula estimate of what the current window holds (for the window account).
    pub window_estimate: u64,
    pub candidate: Candidate,
    /// The frozen startup text (`startup_snapshot.txt`), if any: read
    /// again a chunk at a time ([`crate::span::Frozen`]).
    pub startup_text: Option<crate::span::Frozen>,
}

impl Planned {
    /// Whether a check refused this plan.
    pub fn is_blocked(&self) -> bool {
        self.report.blocked_reason.is_some()
    }
}

impl Plan {
    /// Whether a check refused this plan.
    pub fn is_blocked(&self) -> bool {
        self.report.blocked_reason.is_some()
    }

    fn from(planned: Planned, mut candidate: Candidate) -> Plan {
        candidate.session_id = planned.session_id;
        Plan {
            report: planned.report,
            window_estimate: planned.window_estimate,
            candidate,
            startup_text: planned.startup_text,
        }
    }
}

/// Find the transcript to plan: the given path (which must be a `*.jsonl`
/// directly inside `project_dir`, symlinks resolved), or the newest session
/// transcript in `project_dir`.
pub fn resolve_transcript<'o>(
    options: impl Into<EngineOptions<'o>>,
    given: Option<&Path>,
) -> Result<PathBuf> {
    let options = &options.into();
    let project = options.project_dir.canonicalize().map_err(|e| {
        Error::config(format!(
            "project_dir {} is not usable: {e}; set project_dir to the Claude Code project folder",
            options.project_dir.display()
        ))
    })?;
    let Some(given) = given else {
        return newest_transcript(&project);
    };
    let real = confine(given, &project, "transcript", Exists::Must)?;
    if real.extension().and_then(|e| e.to_str()) != Some("jsonl") {
        return Err(Error::refused(format!(
            "transcript {} is not a .jsonl file",
            given.display()
        )));
    }
    Ok(real)
}

fn newest_transcript(project: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(project).map_err(|e| Error::io_at("list", project, &e))?;
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".jsonl") || name.starts_with("agent-") || name.starts_with('.') {
            continue;
        }
        let Some(meta) = transcript_in(project, &path) else {
            continue;
        };
        let mtime = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        if best.as_ref().is_none_or(|(t, p)| (mtime, &path) > (*t, p)) {
            best = Some((mtime, path));
        }
    }
    let (_, path) = best.ok_or_else(|| {
        Error::refused(format!(
            "no *.jsonl transcript in project_dir {}; check project_dir or pass --transcript",
            project.display()
        ))
    })?;
    path.canonicalize()
        .map_err(|e| Error::io_at("resolve", &path, &e))
}

/// A `*.jsonl` entry of `project` that is a regular file resolving directly
/// inside `project` (a symlink to a file elsewhere is not a transcript here).
fn transcript_in(project: &Path, path: &Path) -> Option<std::fs::Metadata> {
    let real = path.canonicalize().ok()?;
    if real.parent() != Some(project) {
        return None;
    }
    std::fs::metadata(&real)
        .ok()
        .filter(std::fs::Metadata::is_file)
}

/// Plan a transcript file (already resolved by [`resolve_transcript`]),
/// with the candidate in memory.
pub fn build<'o>(
    options: impl Into<EngineOptions<'o>>,
    path: &Path,
    new_session_id: Option<&SessionId>,
) -> Result<Plan> {
    let options = &options.into();
    let mut candidate = Candidate::default();
    let planned = build_into(options, path, new_session_id, &mut candidate)?;
    Ok(Plan::from(planned, candidate))
}

/// Plan a transcript file for its report only (no candidate is kept).
pub fn assess<'o>(options: impl Into<EngineOptions<'o>>, path: &Path) -> Result<Planned> {
    let options = &options.into();
    build_into(options, path, None, &mut candidate::Discard)
}

/// Plan a transcript file and write the candidate into `sink`, line by line.
/// The file is opened once — a regular file, not through a symlink swapped
/// in after the check — and exactly the length it had at that moment is
/// parsed and digested, so a file that grows meanwhile is read in bounded
/// time and the digest describes the very bytes planned; if the file
/// changed while it was read, `source_changed_while_read` says so. Texts
/// are not kept between the two reads ([`crate::reread`]): memory
/// stays bounded by the number of records, not by their text.
pub fn build_into<'o>(
    options: impl Into<EngineOptions<'o>>,
    path: &Path,
    new_session_id: Option<&SessionId>,
    sink: &mut dyn Sink,
) -> Result<Planned> {
    let options = &options.into();
    build_file(options, path, new_session_id, sink, true, &Meter::default())
}

/// [`build_into`] for a frozen copy whose digest the caller has checked
/// (prepare's and verify's backup): no digest is computed again, and
/// `source_sha256` is left empty. The scan adds the bytes it read to
/// `meter` (a progress display reads it from another thread).
pub fn build_frozen_into<'o>(
    options: impl Into<EngineOptions<'o>>,
    path: &Path,
    new_session_id: Option<&SessionId>,
    sink: &mut dyn Sink,
    meter: &Meter,
) -> Result<Planned> {
    let options = &options.into();
    build_file(options, path, new_session_id, sink, false, meter)
}

fn build_file(
    options: &EngineOptions<'_>,
    path: &Path,
    new_session_id: Option<&SessionId>,
    sink: &mut dyn Sink,
    digest: bool,
    meter: &Meter,
) -> Result<Planned> {
    let file = open_regular(path, Links::Refuse)
        .map_err(|e| Error::refused(format!("cannot open transcript {}: {e}", path.display())))?;
    let at_open = file
        .metadata()
        .map_err(|e| Error::io_at("stat", path, &e))?;
    let len = at_open.len();
    // The digest is computed on a second core, which also reads the file
    // for the scan on this one ([`crate::readahead`]).
    std::thread::scope(|s| {
        let (mut planned, digested) = if digest {
            let (reader, reading) = crate::readahead::start(s, &file, len);
            let planned = plan(
                options,
                path,
                Metered::new(reader, meter),
                &file,
                new_session_id,
                sink,
            );
            let digest = reading
                .join()
                .map_err(|_| Error::io(format!("digest of {} failed", path.display())))?;
            let mut planned = planned?;
            let (sha256, digested) = digest.map_err(|e| Error::io_at("read", path, &e))?;
            planned.report.source_sha256 = sha256;
            (planned, digested)
        } else {
            let input = BufReader::with_capacity(1 << 16, (&file).take(len));
            let planned = plan(
                options,
                path,
                Metered::new(input, meter),
                &file,
                new_session_id,
                sink,
            )?;
            (planned, len)
        };
        planned.report.source_changed_while_read =
            digested != len || planned.report.source_bytes != len || changed_since(&file, &at_open);
        Ok(planned)
    })
}

/// Whether the open file's size or modification time moved on since `then`.
fn changed_since(file: &File, then: &std::fs::Metadata) -> bool {
    file.metadata().map_or(true, |now| {
        now.len() != then.len() || now.modified().ok() != then.modified().ok()
    })
}

/// Plan transcript bytes held in memory (tests, fuzzing). `source_sha256`
/// is left empty and no window is measured.
pub fn build_from_bytes<'o>(
    options: impl Into<EngineOptions<'o>>,
    path: &Path,
    bytes: &[u8],
    new_session_id: Option<&SessionId>,
) -> Result<Plan> {
    let options = &options.into();
    let mut candidate = Candidate::default();
    let planned = plan(options, path, bytes, &bytes, new_session_id, &mut candidate)?;
    Ok(Plan::from(planned, candidate))
}

/// Both reads: the scan (`input`, once, in order) and the candidate
/// (`again`, the same bytes at offsets).
fn plan<R: BufRead>(
    options: &EngineOptions<'_>,
    path: &Path,
    input: R,
    again: &dyn Bytes,
    new_session_id: Option<&SessionId>,
    sink: &mut dyn Sink,
) -> Result<Planned> {
    crate::span::forget_all();
    let markers = Markers::new(options.stamp_template, options.startup_header_template);
    let opts = Options {
        reply_tool: options.reply_tool_pattern,
        markers: &markers,
        command_expansions: options.carry_command_expansions,
    };
    let mut scan = Scan::read(input, &opts).map_err(|e| Error::io_at("read", path, &e))?;
    let rd = Reread::new(again, &opts).with_lone_surrogates(scan.lone_surrogates > 0);
    let history = chain::select(&scan, options.history);
    // The links have served: selection needs only the events.
    scan.nodes = Vec::new();
    let mut sel = turns::select(&scan.events, &history.events, options, &rd)?;
    block_on_input_problems(options, &scan, &mut sel);
    let session_id = new_session_id.map_or_else(SessionId::new_random, Clone::clone);
    let lines = candidate::write(
        options,
        &sel,
        &scan.events,
        &session_id,
        scan.earliest_timestamp.as_deref(),
        &rd,
        sink,
    )?;
    // (event, reason): events are numbered in file order, so by event is by
    // line (and sorting looks at nothing but this list). u32 like every
    // event index (`Scan::read`), so a capped plan's list of hundreds of
    // thousands is half as large when it is sorted at once.
    let narrow = |e: usize| u32::try_from(e).unwrap_or(u32::MAX);
    let mut left_out: Vec<(u32, LeftOutReason)> = history
        .abandoned
        .iter()
        .map(|&e| (narrow(e), LeftOutReason::AbandonedBranch))
        .chain(
            history
                .off_chain_commands
                .iter()
                .map(|&e| (narrow(e), LeftOutReason::LocalCommand)),
        )
        .chain(sel.left_out.iter().map(|&(e, r)| (narrow(e), r)))
        .collect();
    // Each event is listed once at most, so an unstable sort orders it the
    // same, in place (no scratch half its size).
    left_out.sort_unstable_by_key(|&(e, _)| e);
    let mut listed = Vec::new();
    for (e, reason) in left_out {
        let e = e as usize;
        let entry = LeftOut {
            line: scan.events[e].line(),
            uuid: rd.uuid(&scan.events[e])?.as_deref().map(InlineStr::new),
            reason,
        };
        listed.extend(sink.left_out(entry)?);
    }
    let compactions_undone = sel
        .compactions
        .iter()
        .map(|c| {
            Ok(Undone {
                summary_line: scan.events[c.summary].line(),
                summary_uuid: rd.uuid(&scan.events[c.summary])?,
                turns_before: c.turns_before,
                turns_restored: c
                    .turns_before
                    .saturating_sub(sel.dropped_oldest_turns)
                    .min(sel.turns.len()),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let preview = |i: &turns::Item| -> Result<Preview> {
        Ok(Preview {
            role: i.role,
            text: crate::span::head(&i.text(&scan.events, &rd, options, None)?)
                .chars()
                .take(PREVIEW_CHARS)
                .collect(),
        })
    };
    let first_carried = sel.turns.items().first();
    let last_carried = sel.turns.items().last();
    let first_carried = first_carried.map(preview).transpose()?;
    let last_carried = last_carried.map(preview).transpose()?;
    let ledger = ledger::report(
        &Measured {
            window: &scan.window,
            file: &scan.file,
            window_start_line: scan.window_start_line,
            file_bytes: scan.bytes,
            file_lines: scan.lines,
            conversation_turns: sel.turns.len(),
        },
        &Budget {
            dirty_budget_bytes: options.dirty_budget_bytes,
            rebuild_on_original_image_view: options.rebuild_on_original_image_view,
        },
    );
    let report = PlanReport {
        source_path: path.display().to_string(),
        session_id: path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default(),
        source_sha256: String::new(),
        source_bytes: scan.bytes,
        source_changed_while_read: false,
        versions_seen: scan.versions.iter().cloned().collect(),
        history_mode: history.mode,
        history_fallback_reason: history.fallback_reason,
        source_turns: sel.source_turns,
        selected_turns: sel.turns.len(),
        open_tail: sel.open_tail,
        open_tail_kept: sel.open_tail_kept,
        dropped_oldest_turns: sel.dropped_oldest_turns,
        leading_assistant_turns: sel.leading_assistant_turns,
        carried_items: sel.turns.items().len(),
        estimated_tokens: sel.estimated_tokens,
        startup_frozen: sel.startup_sha256.is_some(),
        startup_sha256: sel.startup_sha256.clone(),
        startup_attachments: sel.startup_context.len(),
        compact_summaries_dropped: sel.compact_summaries_dropped,
        compact_summaries_carried: sel.compact_summaries_carried,
        compactions_undone,
        abandoned_branch_records: history.abandoned.len(),
        malformed_lines: scan.malformed_count,
        malformed_line_numbers: scan.malformed.iter().map(|(n, _)| *n).collect(),
        lone_surrogate_texts: scan.lone_surrogate_texts,
        nul_texts: scan.nul_texts,
        unknown_record_types: scan.unknown_record_types.clone(),
        unknown_attachment_types: scan.unknown_attachment_types.clone(),
        not_speech: NotSpeechCounts {
            local_commands: (sel.local_commands + history.off_chain_commands.len()) as u64,
            ..scan.not_speech.clone()
        },
        elided_items: sel.elided_items,
        broken_timestamps: sel.broken_timestamps,
        command_expansions_carried: sel.command_expansions_carried,
        poison_hits: sel.poison_hits,
        blocked_reason: sel.blocked_reason.clone(),
        ledger,
        window: None,
        first_carried,
        last_carried,
        left_out: listed,
    };
    Ok(Planned {
        report,
        window_estimate: crate::window::window_estimate(&scan.window),
        startup_text: sel.startup_frozen,
        session_id: session_id.as_str().to_string(),
        lines,
    })
}

fn block_on_input_problems(options: &EngineOptions<'_>, scan: &Scan, sel: &mut Selection) {
    if sel.blocked_reason.is_some() {
        return;
    }
    if scan.malformed_count > 0 && options.on_malformed_line == OnMalformed::Block {
        let lines: Vec<String> = scan
            .malformed
            .iter()
            .map(|(n, why)| format!("{n} ({why})"))
            .collect();
        sel.blocked_reason = Some(format!(
            "{} malformed line(s): {}; fix the transcript or set on_malformed_line = \"skip\" to carry the rest",
            scan.malformed_count,
            lines.join(", ")
        ));
    } else if scan.lone_surrogates > 0 && scan.reserved_lines > 0 {
        sel.blocked_reason = Some(format!(
            "the transcript holds lone surrogate escapes and, on {} line(s), characters U+10F800–U+10FFFF, which ktr uses to carry those escapes; it cannot carry both verbatim: remove those characters or rebuild by hand",
            scan.reserved_lines
        ));
    } else if sel.turns.is_empty() {
        sel.blocked_reason = Some("no conversation turns to carry".to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ktr_base::config::Config;
    use rustix::fs::{CWD, FileType, Mode, mknodat};
    use std::io::Write;
    use std::time::{Duration, Instant};

    const LINE: &str = r#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"hello"}}"#;

    fn config(project: &Path) -> Config {
        Config::from_toml(&format!(
            "project_dir = {:?}",
            project.display().to_string()
        ))
        .unwrap()
    }

    #[test]
    fn planning_writes_nothing_not_even_in_the_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let config = Config::from_toml(&format!(
            "project_dir = {:?}\nstate_dir = {:?}",
            dir.path().display().to_string(),
            state.display().to_string()
        ))
        .unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, format!("{LINE}\n")).unwrap();
        let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        let plan = build(&config, &path, None).unwrap();
        assert!(plan.report.window.is_none(), "the window is the pipeline's");
        let _ = crate::window::running::advance(&config, None, &path, 1 << 20).unwrap();
        let _ = crate::window::overhead::measure("s", &path, None);
        assert!(!state.exists(), "the engine made the state dir");
        let after: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(before.len(), after.len());
    }

    #[test]
    fn a_fifo_or_a_symlink_as_the_transcript_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("f.jsonl");
        mknodat(CWD, &fifo, FileType::Fifo, Mode::from_raw_mode(0o600), 0).unwrap();
        let start = Instant::now();
        let err = build(&config(dir.path()), &fifo, None).unwrap_err();
        assert!(err.message.contains("a FIFO"), "{err}");
        let real = dir.path().join("r.jsonl");
        std::fs::write(&real, format!("{LINE}\n")).unwrap();
        let link = dir.path().join("l.jsonl");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = build(&config(dir.path()), &link, None).unwrap_err();
        assert!(err.message.contains("symlink"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn a_growing_file_is_read_to_its_size_at_open_and_the_change_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        std::fs::write(&path, format!("{LINE}\n").repeat(2000)).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .unwrap();
                // A steady appender, bounded (at most ~10 s of appends).
                for _ in 0..10_000 {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    f.write_all(format!("{LINE}\n").as_bytes()).unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            std::thread::sleep(Duration::from_millis(20));
            let plan = build(&config(dir.path()), &path, None).unwrap();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let r = &plan.report;
            assert!(r.source_changed_while_read);
            let bytes = std::fs::read(&path).unwrap();
            let read = usize::try_from(r.source_bytes).unwrap();
            assert!(read < bytes.len());
            assert_eq!(
                r.source_sha256,
                ktr_base::digest::sha256_hex(&bytes[..read])
            );
        });
        let plan = build(&config(dir.path()), &path, None).unwrap();
        assert!(!plan.report.source_changed_while_read);
    }

    #[test]
    fn the_newest_transcript_is_never_a_link_out_of_project_dir() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        std::fs::create_dir(&project).unwrap();
        std::fs::write(project.join("old.jsonl"), format!("{LINE}\n")).unwrap();
        let outside = dir.path().join("secret.jsonl");
        std::fs::write(&outside, "SECRET\n").unwrap();
        std::thread::sleep(Duration::from_millis(20));
        std::os::unix::fs::symlink(&outside, project.join("z.jsonl")).unwrap();
        std::fs::create_dir(project.join("d.jsonl")).unwrap();
        let chosen = resolve_transcript(&config(&project), None).unwrap();
        assert_eq!(chosen.file_name().unwrap(), "old.jsonl");
    }
}
