//! [`Status`]: where an operation is in its life, and the one table of
//! allowed transitions (SPEC §9).

use std::fmt;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Requested; waits for the next Stop hook.
    Pending,
    /// A Stop hook spawned `ktr-prepare`.
    Scheduled,
    /// `ktr-prepare` is freezing the source and writing the candidate.
    Running,
    /// `ktr-verify` is checking the candidate (and `ktr-activate` its CAS checks).
    Verifying,
    /// `ktr-activate` is switching the target.
    Activating,
    /// The hand target (no tmux pane): verified, and the person was
    /// offered the line `/resume <candidate>` to type; the old session runs
    /// on untouched. Ends at `ktr-ack`'s receipt (`activated`), a turn of
    /// the source (withdrawn: `pending`, the candidate removed), or after
    /// `request_ttl_hours` (`expired`, the candidate removed).
    Offered,
    /// The target runs the candidate session. Terminal, but can be rolled back.
    Activated,
    /// Rollback requested; waits for the next Stop hook.
    RollbackPending,
    /// A Stop hook spawned `ktr-rollback`.
    RollbackScheduled,
    /// `ktr-rollback` is switching back.
    RollingBack,
    /// The hand target: the person was offered the line `/resume <old>`
    /// (or the restore session's id). Ends at `ktr-ack`'s receipt
    /// (`rolled_back`), a turn of the rebuilt session (withdrawn:
    /// `rollback_pending`), or after `request_ttl_hours` (`activated`: the
    /// rebuilt session runs on).
    RollbackOffered,
    /// Cancelled before it was scheduled.
    Cancelled,
    /// Abandoned; the old session is untouched unless `needs_attention`.
    Failed,
    /// The old session runs again.
    RolledBack,
    /// Pending for longer than `request_ttl_hours`: the bound session never
    /// stopped (it no longer runs, or not in the target). Nothing was changed.
    Expired,
}

impl Status {
    /// Every status, in life-cycle order.
    pub const ALL: [Status; 15] = [
        Status::Pending,
        Status::Scheduled,
        Status::Running,
        Status::Verifying,
        Status::Activating,
        Status::Offered,
        Status::Activated,
        Status::RollbackPending,
        Status::RollbackScheduled,
        Status::RollingBack,
        Status::RollbackOffered,
        Status::Cancelled,
        Status::Failed,
        Status::RolledBack,
        Status::Expired,
    ];

    /// Terminal operations block nothing: activated, cancelled, failed, `rolled_back`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Activated
                | Status::Cancelled
                | Status::Failed
                | Status::RolledBack
                | Status::Expired
        )
    }

    /// Statuses no stage works in: ended, or waiting for the next Stop (a
    /// request, an attempt put back). The stage that moved an operation
    /// here ended as it should; its worker record goes, so recovery never
    /// takes it for a dead one.
    pub(crate) fn unworked(self) -> bool {
        self.is_terminal() || matches!(self, Status::Pending | Status::RollbackPending)
    }

    /// Statuses in which the target has certainly not been touched yet, so
    /// a written candidate was never run and can be discarded.
    pub(crate) fn before_switch(self) -> bool {
        matches!(
            self,
            Status::Pending
                | Status::Scheduled
                | Status::Running
                | Status::Verifying
                | Status::Offered
        )
    }

    /// Statuses in which ktr waits for the person to type the offered
    /// line (the hand target): no worker runs, so none can have died.
    pub fn offered(self) -> bool {
        matches!(self, Status::Offered | Status::RollbackOffered)
    }

    /// Statuses of an operation whose candidate the target was switched
    /// to: its lane is the candidate's session ([`super::Lane::of`]).
    pub(crate) fn after_switch(self) -> bool {
        matches!(
            self,
            Status::Activated
                | Status::RollbackPending
                | Status::RollbackScheduled
                | Status::RollingBack
                | Status::RollbackOffered
                | Status::RolledBack
        )
    }

    /// The `snake_case` name used in files and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Scheduled => "scheduled",
            Status::Running => "running",
            Status::Verifying => "verifying",
            Status::Activating => "activating",
            Status::Offered => "offered",
            Status::Activated => "activated",
            Status::RollbackPending => "rollback_pending",
            Status::RollbackScheduled => "rollback_scheduled",
            Status::RollingBack => "rolling_back",
            Status::RollbackOffered => "rollback_offered",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
            Status::RolledBack => "rolled_back",
            Status::Expired => "expired",
        }
    }

    /// Parse a `snake_case` name.
    pub fn parse(name: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Whether the state machine allows `self → to` (SPEC §9):
    ///
    /// ```text
    /// pending → scheduled → running → verifying → activating → activated
    /// scheduled → pending            (scheduling undone)
    /// verifying → pending            (source changed: retry from the fresh transcript)
    /// activating → pending           (a turn or a draft: not switched, the next Stop prepares again)
    /// activating → rolled_back       (unhealthy, old session resumed)
    /// verifying → offered            (the hand target: the person types /resume <candidate>)
    /// offered → activated | pending | expired   (receipt; the source spoke: withdrawn; unanswered)
    /// activated → rollback_pending → rollback_scheduled → rolling_back → rolled_back
    /// rolling_back → rollback_offered → rolled_back | rollback_pending | activated
    /// rollback_scheduled → rollback_pending   (scheduling undone)
    /// rollback_scheduled → rolled_back        (ktr-rollback without a rolling_back step)
    /// pending → cancelled | expired;   any non-terminal → failed
    /// ```
    pub(crate) fn can_become(self, to: Status) -> bool {
        use Status::{
            Activated, Activating, Cancelled, Expired, Failed, Offered, Pending, RollbackOffered,
            RollbackPending, RollbackScheduled, RolledBack, RollingBack, Running, Scheduled,
            Verifying,
        };
        if to == Failed {
            return !self.is_terminal();
        }
        matches!(
            (self, to),
            (Pending, Scheduled | Cancelled | Expired)
                | (Scheduled, Running | Pending)
                | (Running, Verifying)
                | (Verifying, Activating | Offered | Pending)
                | (Offered, Activated | Pending | Expired)
                | (Activating, Activated | RolledBack | Pending)
                | (Activated, RollbackPending)
                | (RollbackPending, RollbackScheduled)
                | (
                    RollbackScheduled,
                    RollingBack | RollbackPending | RolledBack
                )
                | (RollingBack, RolledBack | RollbackPending | RollbackOffered)
                | (RollbackOffered, RolledBack | RollbackPending | Activated)
        )
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
