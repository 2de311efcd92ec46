//! The window caches (the engine writes nothing): what the hooks
//! and the statusline remember between calls under `<state_dir>/window/`,
//! and the accounts built from them with the engine's window arithmetic
//! ([`ktr_engine::window`]).
//!
//! | file | what | written by |
//! |---|---|---|
//! | `<session>.json` | the window size the statusline reported ([`remembered`]) | statusline |
//! | `<session>.overhead.json`, `overhead.json` | the measured overhead, per session and newest ([`overhead`]) | hooks |
//! | `<session>.receipt.json` | Claude Code's count at resume ([`overhead`]) | `ktr-ack` |
//! | `<session>.running.json` | the running account ([`running`]) | Stop hook, statusline |
//! | `not-switched.json` | the last session found not to be the one ktr switches, and why ([`not_switched`]) | Stop hook, `ktr-precompact` |
//!
//! (The advice notices and markers in the same folder are
//! [`crate::stages::advice`]'s.)

pub mod compaction;
pub mod not_switched;
pub mod overhead;
pub mod remembered;
pub mod running;

use std::path::Path;

use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;
use ktr_engine::plan::PlanReport;
use ktr_engine::window::{Advise, CompactionSetting, Inputs, Window, derive, size, usage};

/// Write a small cache file under `<state_dir>/window/`, creating that
/// folder (0700) but never the state dir itself (whose creation and
/// permissions are the store's business).
///
/// # Errors
/// When the folder or the file cannot be written.
pub(crate) fn write_cache(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                return Err(Error::io_at("create", dir, &e));
            }
            _ => {}
        }
    }
    // Caches: never torn, but not worth an fsync on every hook call.
    ktr_base::fsutil::write_cache_atomic(path, bytes, 0o600)
}

/// The advice settings of a config.
pub(crate) fn advise_of(config: &Config) -> Advise {
    Advise {
        at_percent: config.advise_at_percent,
        min_free_percent: config.advise_min_free_percent,
    }
}

/// What Claude Code itself reported (the statusline JSON).
#[derive(Debug, Clone)]
pub struct Reported {
    pub usage: Option<usage::Usage>,
    pub size: Option<u64>,
    pub model: Option<String>,
}

/// The account for a hook: the tail's usage (what Claude Code reported,
/// else `tail` when the caller already read it, else read now), the
/// running account, the remembered size and overhead, and Claude Code's
/// compaction setting (read once by the caller: [`compaction::setting`]).
/// None while the running account is still catching up with a long file.
///
/// # Errors
/// When the transcript cannot be read.
pub(crate) fn for_hook(
    config: &Config,
    session_id: &SessionId,
    transcript: &Path,
    reported: Option<Reported>,
    tail: Option<usage::Tail>,
    compaction: &CompactionSetting,
) -> Result<Option<Window>> {
    let (running, caught_up) = running::advance(
        config,
        session_id,
        transcript,
        ktr_engine::window::running::STEP_BYTES,
    )?;
    if !caught_up {
        return Ok(None);
    }
    let (used, missing, model, reported_size) = match reported {
        Some(r) if r.usage.is_some() => (r.usage, None, r.model, r.size),
        other => {
            let tail = match tail {
                Some(tail) => tail,
                None => usage::read_tail(transcript)
                    .map_err(|e| Error::io_at("read", transcript, &e))?,
            };
            let model = other.as_ref().and_then(|r| r.model.clone()).or(tail.model);
            (tail.usage, tail.missing, model, other.and_then(|r| r.size))
        }
    };
    let size = size_for(config, session_id, reported_size, model.as_deref());
    let mut w = derive(&Inputs {
        used,
        missing: missing.map(str::to_string),
        window_estimate: running.window_estimate,
        carried_estimate: running.carried_estimate,
        size,
        overhead: overhead::resolve(&config.state_dir, session_id, transcript, true),
        advise: advise_of(config),
        compaction: compaction.clone(),
    });
    w.summarised_turns = running.summarised_turns;
    w.cleared = running.clearing.last.as_ref().map(|c| c.kind);
    Ok(Some(w))
}

/// The window size for a hook: what the statusline reports now (with
/// `context_window_tokens = "auto"`), else the config, the remembered
/// report or the model id ([`size::resolve`]).
pub fn size_for(
    config: &Config,
    session_id: &SessionId,
    reported: Option<u64>,
    model: Option<&str>,
) -> size::Size {
    match reported {
        Some(tokens) if config.context_window_tokens == size::WindowSetting::Auto => size::Size {
            tokens,
            source: "reported by the statusline".into(),
            assumed: false,
        },
        _ => size::resolve(
            config.context_window_tokens,
            remembered::read(&config.state_dir, session_id).as_ref(),
            model,
        ),
    }
}

/// The account for a plan (`ktr plan`, `ktr dirty`, the MCP tools,
/// `prepare`): the tail's usage, the planned conversation and the window's
/// tally. Writes nothing. `session_id` is None when the transcript's name
/// is not a session id (a copy, a corpus file): no cache names it, so its
/// overhead is measured from the transcript alone.
///
/// # Errors
/// When the transcript's tail cannot be read.
pub(crate) fn for_plan(
    config: &Config,
    session_id: Option<&SessionId>,
    transcript: &Path,
    window_estimate: u64,
    carried_estimate: u64,
) -> Result<Window> {
    let tail = usage::read_tail(transcript).map_err(|e| Error::io_at("read", transcript, &e))?;
    let size = size::resolve(
        config.context_window_tokens,
        session_id
            .and_then(|s| remembered::read(&config.state_dir, s))
            .as_ref(),
        tail.model.as_deref(),
    );
    Ok(derive(&Inputs {
        used: tail.usage,
        missing: tail.missing.map(str::to_string),
        window_estimate,
        carried_estimate,
        size,
        overhead: match session_id {
            Some(s) => overhead::resolve(&config.state_dir, s, transcript, false),
            None => overhead::uncached(&config.state_dir, transcript),
        },
        advise: advise_of(config),
        compaction: compaction::setting(),
    }))
}

/// Add the window to a plan of `path` (`ktr plan`, `ktr dirty`, the MCP
/// tools, prepare): the account, a refusal when the rebuilt window would
/// not fit (the plan is then blocked), and the ledger's reason when the
/// window advises a rebuild.
///
/// # Errors
/// When the transcript's tail cannot be read.
pub fn measure(
    config: &Config,
    path: &Path,
    report: &mut PlanReport,
    window_estimate: u64,
) -> Result<()> {
    let session = SessionId::parse(&report.session_id).ok();
    let w = for_plan(
        config,
        session.as_ref(),
        path,
        window_estimate,
        report.estimated_tokens,
    )?;
    let mut w = w;
    w.summarised_turns = summarised_turns(report);
    if report.blocked_reason.is_none() {
        report.blocked_reason = ktr_engine::window::refusal(&w);
    }
    if let Some(reason) = ktr_engine::window::reason(&w) {
        report.ledger.reasons.push(reason);
        report.ledger.should_rebuild = true;
    }
    if w.summarised_turns > 0 && w.fits() {
        report.ledger.reasons.push(format!(
            "Claude Code compacted this window: {} turns are only in its summary, a rebuild restores them word for word (≈ {})",
            w.summarised_turns,
            ktr_engine::window::short(w.after_rebuild_tokens)
        ));
        report.ledger.should_rebuild = true;
    }
    report.window = Some(w);
    Ok(())
}

/// The turns a plan's window has only in Claude Code's summary: those
/// before the newest compaction the rebuild undoes, when the live window
/// begins after it (its summary is in the window).
fn summarised_turns(report: &PlanReport) -> u64 {
    report
        .compactions_undone
        .last()
        .filter(|c| c.summary_line >= report.ledger.window_start_line)
        .map_or(0, |c| c.turns_before as u64)
}

/// [`ktr_engine::plan::assess`] with the window measured ([`measure`]):
/// `ktr dirty`, the MCP tools, the demo.
///
/// # Errors
/// When the transcript cannot be read.
pub fn assess(config: &Config, path: &Path) -> Result<ktr_engine::plan::Planned> {
    let mut planned = ktr_engine::plan::assess(config, path)?;
    measure(config, path, &mut planned.report, planned.window_estimate)?;
    Ok(planned)
}
