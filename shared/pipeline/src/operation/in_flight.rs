//! What is in flight, lane by lane: the `active` file read cheaply by the
//! hooks, and under a lane's lock derived from the operation files
//! themselves (SPEC §9: at most one operation in flight per session).

use std::time::Duration;

use super::index::{Active, InFlight, Index};
use super::store::Header;
use super::{Lane, Locked, Operation, Status, Store};
use ktr_base::error::{Error, Result};
use ktr_base::fsutil::{Existing, write_atomic};
use ktr_base::ids::{OperationId, SessionId};
use ktr_base::open::{Links, cap, read_capped};

impl Store {
    /// What the `active` file says: the operations in flight, one per
    /// lane, or — missing, unreadable, a FIFO, too large, garbage, the
    /// previous layout — unknown, to be rebuilt from the operation files
    /// ([`Store::rebuild_active`]). Cheap (one small read, no lock): the
    /// hooks' fast path.
    pub fn active_state(&self) -> Active {
        match read_capped(&self.dir.join("active"), cap::ACTIVE, Links::Refuse) {
            Ok(Some(bytes)) => match Index::parse(&String::from_utf8_lossy(&bytes)) {
                Ok(index) => Active::Known(index),
                Err(why) => Active::Unknown(why),
            },
            Ok(None) => Active::Unknown("missing".into()),
            Err(e) => Active::Unknown(e.message),
        }
    }

    /// Every lane's operation in flight, as `active` says (none when it is
    /// unknown).
    pub fn in_flight(&self) -> Vec<InFlight> {
        match self.active_state() {
            Active::Known(index) => index.entries(),
            Active::Unknown(_) => Vec::new(),
        }
    }

    /// The operation in flight when exactly one lane has one (a household
    /// where one session is at work); `None` when none or several do.
    pub fn active(&self) -> Option<(OperationId, Status)> {
        match self.in_flight().as_slice() {
            [one] => Some((one.id.clone(), one.status)),
            _ => None,
        }
    }

    /// What `session`'s hooks have to do with, as `active` says: its own
    /// lane's operation, else a request bound to no session yet.
    pub(crate) fn active_for(&self, session: &SessionId) -> Option<(OperationId, Status)> {
        match self.active_state() {
            Active::Known(index) => index.for_session(session),
            Active::Unknown(_) => None,
        }
    }

    /// The lanes with an operation in flight, read from the operation
    /// files without a lock (a damaged file is skipped: the lanes' writes
    /// refuse on it).
    pub(super) fn live_lanes(&self) -> Result<Vec<Lane>> {
        let (headers, _damaged) = self.scan_as::<Header>()?;
        Ok(lanes_of(headers.iter().filter(|h| !h.status.is_terminal())))
    }

    /// Rebuild `active` from the operation files holding the household
    /// lock (at most `timeout` for it): in each lane more than one
    /// operation in flight is repaired ([`Locked::lane_operation`]).
    /// Returns the operations in flight, in lane order.
    pub fn rebuild_active(&self, timeout: Duration) -> Result<Vec<Operation>> {
        // The method path does not satisfy the closure's higher-ranked
        // lifetime (`Locked<'_>`), which clippy's suggestion overlooks.
        #[allow(clippy::redundant_closure_for_method_calls)]
        self.with_lock_within(timeout, |tx| tx.rebuild_index())
    }
}

impl Locked<'_> {
    /// The operation in flight in `lane`, derived from the operation files
    /// (not from `active` alone: a deleted or stale `active` must not let a
    /// second operation start in the lane); `active` is rewritten when it
    /// disagrees. More than one in flight (only a lost `active` lets that
    /// happen): the newest whose worker is alive or that no stage has
    /// started yet is the one, every other ends `failed`, saying why. A
    /// damaged operation file refuses: it could be this lane's (`ktr
    /// repair` sets it aside).
    pub(crate) fn lane_operation(&mut self, lane: &Lane) -> Result<Option<Operation>> {
        self.require(lane)?;
        let live = self.live_headers()?;
        let op = self.one_in_flight(lane, &live)?;
        let agrees = match self.store.active_state() {
            Active::Known(index) => {
                index.get(lane) == op.as_ref().map(|o| (o.id.clone(), o.status))
            }
            Active::Unknown(_) => false,
        };
        if !agrees {
            self.edit_index(|index| match &op {
                Some(op) => index.set(lane.clone(), &op.id, op.status),
                None => {
                    if let Some((id, _)) = index.get(lane) {
                        index.remove(&id);
                    }
                }
            })?;
        }
        Ok(op)
    }

    /// What a hook of `session` works on: its lane's operation, else (when
    /// this lock holds it) the request no session is bound to yet.
    pub(crate) fn session_operation(&mut self, session: &SessionId) -> Result<Option<Operation>> {
        if let Some(op) = self.lane_operation(&Lane::Session(session.clone()))? {
            return Ok(Some(op));
        }
        if !self.holds(&Lane::Unbound) {
            return Ok(None);
        }
        self.lane_operation(&Lane::Unbound)
    }

    /// Every lane's operation in flight (the household lock): `active`
    /// written anew from them.
    pub(crate) fn rebuild_index(&mut self) -> Result<Vec<Operation>> {
        let live = self.live_headers()?;
        let lanes = lanes_of(live.iter());
        let mut ops = Vec::new();
        for lane in &lanes {
            ops.extend(self.one_in_flight(lane, &live)?);
        }
        let mut index = Index::default();
        for op in &ops {
            index.set(op.lane(), &op.id, op.status);
        }
        let _held = self.store.index_lock()?;
        self.write_index(&index)?;
        Ok(ops)
    }

    /// `active` follows `op` (its lane's entry names it while it is in
    /// flight; it names it nowhere once it is terminal) — as its file says
    /// now: between this writer's save and this update, a writer of the
    /// operation's next lane (a ROLLBACK right after activation, under the
    /// candidate's lock) may have moved it on, and its entry must stay.
    pub(super) fn set_entry(&mut self, op: &Operation) -> Result<()> {
        let store = self.store;
        self.edit_index(|index| {
            let now = store.load(&op.id).ok();
            let op = now.as_ref().unwrap_or(op);
            if op.status.is_terminal() {
                index.remove(&op.id);
            } else {
                index.set(op.lane(), &op.id, op.status);
            }
        })
    }

    /// Refused unless `op`, in `status`, lies in a lane this lock holds
    /// (a terminal operation is in flight nowhere).
    pub(super) fn may_write(&self, status: Status, op: &Operation) -> Result<()> {
        if status.is_terminal() {
            return Ok(());
        }
        let lane = Lane::of(
            status,
            op.session_id.as_ref(),
            op.candidate.as_ref().map(|c| &c.session_id),
        );
        self.require(&lane)
    }

    fn require(&self, lane: &Lane) -> Result<()> {
        if self.holds(lane) {
            return Ok(());
        }
        Err(Error::refused(format!(
            "the lock of {lane} is not held; not writing its operation"
        )))
    }

    /// The headers of the operations in flight; a damaged file refuses.
    fn live_headers(&self) -> Result<Vec<Header>> {
        // Every hook and stage comes through here under a lock: read only
        // each file's few header fields (a finished operation's manifest
        // can be megabytes), then load the one in flight.
        let (headers, damaged) = self.store.scan_as::<Header>()?;
        if let Some(d) = damaged.first() {
            let more = match damaged.len() - 1 {
                0 => String::new(),
                n => format!(" (and {n} more damaged files)"),
            };
            return Err(Error::refused(format!(
                "{}{more}; `ktr repair` sets damaged files aside (nothing is deleted)",
                d.why
            )));
        }
        let mut live: Vec<Header> = headers
            .into_iter()
            .filter(|h| !h.status.is_terminal())
            .collect();
        live.sort_by(|a, b| a.order().cmp(&b.order()));
        Ok(live)
    }

    /// The one operation in flight in `lane` among `live` (oldest first);
    /// with more than one, every other ends `failed`.
    fn one_in_flight(&mut self, lane: &Lane, live: &[Header]) -> Result<Option<Operation>> {
        let mut ops = Vec::new();
        for h in live.iter().filter(|h| h.lane() == *lane) {
            ops.extend(self.store.try_load(&h.id)?);
        }
        let Some(last) = ops.len().checked_sub(1) else {
            return Ok(None);
        };
        let keep = ops
            .iter()
            .rposition(|op| op.worker.as_ref().is_none_or(super::Worker::alive))
            .unwrap_or(last);
        let kept = ops[keep].id.clone();
        for (i, op) in ops.iter_mut().enumerate() {
            if i != keep {
                let why = format!(
                    "operation {kept} is in flight for {lane} too (only a lost `active` file lets two run); this one ends here"
                );
                op.error = Some(why.clone());
                self.transition(op, Status::Failed, &why)?;
            }
        }
        Ok(Some(ops.swap_remove(keep)))
    }

    /// Change `active` under `active.lock`; an unknown one is first
    /// rebuilt from the operation files as they are now (each lane's
    /// newest in flight: a lane's own lock repairs more than one).
    fn edit_index(&self, change: impl FnOnce(&mut Index)) -> Result<()> {
        let _held = self.store.index_lock()?;
        let mut index = match self.store.active_state() {
            Active::Known(index) => index,
            Active::Unknown(_) => {
                let (mut live, _damaged) = self.store.scan_as::<Header>()?;
                live.retain(|h| !h.status.is_terminal());
                live.sort_by(|a, b| a.order().cmp(&b.order()));
                let mut index = Index::default();
                for h in live {
                    index.set(h.lane(), &h.id, h.status);
                }
                index
            }
        };
        change(&mut index);
        self.write_index(&index)
    }

    fn write_index(&self, index: &Index) -> Result<()> {
        write_atomic(
            &self.store.dir.join("active"),
            index.render().as_bytes(),
            0o600,
            Existing::Replace,
        )
    }
}

/// The lanes of `headers`, each once, in lane order.
fn lanes_of<'a>(headers: impl Iterator<Item = &'a Header>) -> Vec<Lane> {
    let mut lanes: Vec<Lane> = headers.map(Header::lane).collect();
    lanes.sort();
    lanes.dedup();
    lanes
}
