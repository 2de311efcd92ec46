//! What happens to a session when its window reaches Claude Code's
//! compaction point: the decision the advice, the offer after a compaction
//! and the statusline all say (one place, so they never disagree).

use super::target_guard;
use ktr_base::config::{Config, OnAutoCompaction};
use ktr_base::ids::SessionId;
use ktr_engine::window;

/// What happens when the window reaches the point, as the advice says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// A rebuild can switch this session once the person asks: offer it.
    Offer,
    /// The same, with the hand target: the person types the line ktr
    /// offers once the rebuild is verified.
    OfferByHand,
    /// The standing approval (`on_auto_compaction = "rebuild"`): the guard
    /// will rebuild instead of Claude Code's compaction.
    Rebuild,
    /// The target does not run this session: a rebuild cannot switch it,
    /// so nothing is offered.
    NotSwitched,
    /// No target at all: no `tmux_target` is configured and this session's
    /// Claude Code runs in no tmux pane ([`crate::targets::NoTarget`]).
    NoTarget,
}

impl Next {
    /// For the session whose Claude Code ran this hook: the target's
    /// decision ([`target_guard::runs_hooks_session`], the guard's own),
    /// then the standing approval where Claude Code auto-compacts and the
    /// rebuild leaves room.
    pub fn of(config: &Config, session: &SessionId, w: &window::Window) -> Next {
        let runs = target_guard::runs_hooks_session(config, session);
        if runs
            .as_ref()
            .is_err_and(|e| e.find::<crate::targets::NoTarget>().is_some())
        {
            Next::NoTarget
        } else if runs.is_err() {
            Next::NotSwitched
        } else if config.on_auto_compaction == OnAutoCompaction::Rebuild
            && w.auto_compaction
            && w.fits()
        {
            Next::Rebuild
        } else if by_hand(config) {
            Next::OfferByHand
        } else {
            Next::Offer
        }
    }
}

/// Whether the session whose Claude Code ran this hook has the hand target.
fn by_hand(config: &Config) -> bool {
    let mut settled = config.clone();
    crate::targets::discover::settle(&mut settled, crate::process::runner_of(std::process::id()));
    matches!(
        crate::targets::Target::from_config(&settled),
        crate::targets::Target::Hand(_)
    )
}
