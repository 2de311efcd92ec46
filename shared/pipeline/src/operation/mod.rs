//! Operations and their state machine (SPEC §9): the one place where the
//! stages, the hooks and the CLI meet.
//!
//! Layout of the state dir (0700):
//!
//! | file | what |
//! |---|---|
//! | `coordinator.lock` | the household lock: shared by every lane's read-modify-write, exclusive for prune, purge, repair ([`locks`]) |
//! | `locks/<lane>.lock` | one session's lock (`unbound.lock`: a request no session holds yet) |
//! | `active`, `active.lock` | `<lane> <id> <status>` of each lane's operation in flight ([`index`]): the hooks read only this |
//! | `operations/<id>.json` | one [`Operation`] per file (0600, atomic writes) |
//! | `artifacts/<id>/` | backup, `manifest.jsonl` (the manifest artifact), snapshot, ack receipt, `progress.json` while a long step runs (0700) |
//! | `ktr.log` | one JSON line per transition: `{ts, op, from, to, note}` |
//! | `worker.log` | stdout/stderr of detached stages |
//! | `damaged/` | operation files `ktr repair` set aside (never deleted) |
//!
//! One concept per file: [`status`] (the state machine), [`stage`] (who
//! works in which status), [`record`] (the operation file), [`store`] (the
//! state dir), [`lane`] (whose operation it is), [`locks`] (the household
//! and the lanes' locks), [`index`] (the `active` file), [`in_flight`]
//! (each lane's one operation in flight), [`requests`] (what humans and stages ask),
//! [`recovery`] (dead workers), [`repair`] (damaged files set aside),
//! [`manifest`] (the manifest artifact the operation refers to), [`progress`]
//! (how far a long step has come).

mod in_flight;
pub(crate) mod index;
mod lane;
mod locks;
pub mod manifest;
pub mod progress;
mod record;
mod recovery;
mod repair;
mod requests;
mod stage;
mod status;
mod store;

pub use index::{Active, InFlight};
pub use lane::Lane;
pub use locks::{LOCKS_DIR, Locked};
pub use manifest::{ManifestRef, ManifestWriter};
pub use record::{
    Ack, BlockedPrompt, CandidateFile, Operation, PromptBack, RestoreFile, SCHEMA, SeenTarget,
    StopMark, Transition, Verification, Worker,
};
pub use recovery::{discard_candidate, discard_restore};
pub use repair::set_damaged_aside;
pub use requests::confirm;
pub use stage::Stage;
pub use status::Status;
pub use store::{
    DEFAULT_STATE_DIR, Damaged, HOOK_LOCK_WAIT, KEYS_DIR, LOCK_TIMEOUT, Scanned, Store,
    locate_for_hooks, locate_state_dir,
};

#[cfg(test)]
mod tests;
