//! The pre-switch checks about the target itself (SPEC §10, §12), each a
//! small function the stages call: the target runs the session being
//! rebuilt, and it is still what it was when the rebuild was requested.

use crate::operation::Operation;
use crate::targets::{Running, Target};
use crate::window_cache;
use ktr_base::config::Config;
use ktr_base::error::{Error, Result};
use ktr_base::ids::SessionId;

/// The target runs the session being rebuilt: for tmux and systemd the
/// Claude Code process whose Stop hook scheduled the rebuild
/// (`op.claude`) is the pane's process / the unit's `MainPID` or one of its
/// descendants; for a pointer, the pointer names `source`. Returns what the
/// target runs. The refusal names both sides; nothing is touched.
pub(crate) fn runs_source(target: &Target, op: &Operation, source: &SessionId) -> Result<Running> {
    target.check_runs(op.claude, source)
}

/// The target is what it was when the rebuild was requested, or it was
/// restarted on the same session (a resume by hand is fine). A Claude
/// restarted on another session must not become the baseline of a switch
/// the human asked for while the old one ran.
pub(crate) fn unchanged_since_request(
    target: &Target,
    op: &Operation,
    now: &Running,
) -> Result<()> {
    let Some(seen) = &op.requested_target else {
        return Ok(());
    };
    if seen.identity == now.identity || (seen.session.is_some() && seen.session == now.session) {
        return Ok(());
    }
    let session = |s: &Option<String>| s.clone().unwrap_or_else(|| "unknown".into());
    Err(Error::refused(format!(
        "{target} changed since the rebuild was requested (identity {:?} → {:?}, session {} → {}); not switching: request again if the rebuild is still wanted",
        seen.identity,
        now.identity,
        session(&seen.session),
        session(&now.session)
    )))
}

/// Whether the target runs `session` as served by the Claude Code process
/// that ran this hook: the one decision behind "this session is not the one
/// ktr switches" (the compaction guard declines, the advice offers no
/// rebuild). The refusal names both sides; nothing is touched.
/// A refusal is kept for `ktr status` ([`window_cache::not_switched`]).
pub(crate) fn runs_hooks_session(config: &Config, session: &SessionId) -> Result<Running> {
    let claude = crate::process::runner_of(std::process::id());
    let mut settled = config.clone();
    crate::targets::discover::settle(&mut settled, claude);
    let runs = Target::from_config(&settled).check_runs(claude, session);
    if let Err(e) = &runs {
        window_cache::not_switched::record(&config.state_dir, session, &e.message);
    }
    runs
}
