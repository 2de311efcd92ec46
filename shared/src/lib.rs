//! ktr: rebuild a long-running Claude Code session losslessly.
//!
//! The library behind every ktr executable, in three layers plus a base.
//! Dependencies point down only: admin → pipeline → engine → base.
//!
//! | layer | what | entry points |
//! |---|---|---|
//! | [`engine`] | read-only: stream a transcript, decide what is speech, find the conversation, build the candidate, measure residue, check conservation | [`engine::plan::build`], [`engine::conserve::check`] |
//! | [`pipeline`] | acts: the operation file and its state machine, the stages and hooks, the targets that get switched | [`pipeline::operation::Store`], [`pipeline::stages`] |
//! | [`admin`] | for humans: doctor, prune, the status view, settings.json | [`admin::doctor::run`] |
//! | base | [`error`], [`config`], [`fsutil`] (durable writes), [`open`] (reading files ktr did not write), [`heap`] (the allocator kept at what is in use), [`ids`], [`time`] | |
//!
//! Reading order for a newcomer: `engine/transcript` (stream records) →
//! `classify` (what is speech) → `scan` (one pass: links, speech, ledger
//! tallies) → `chain` (which records are the conversation) → `turns` (group
//! and select) → `candidate` (the new session file) → `ledger` (what
//! pollutes the window) → `plan` (all of it, read-only) → `conserve` (the
//! independent check). Then `pipeline/operation` (state machine) →
//! `pipeline/stages` (prepare, verify, activate, rollback, and the hooks)
//! → `pipeline/target` (what gets switched). docs/ARCHITECTURE.md has the
//! map; docs/SPEC.md is the contract.

pub mod admin;
pub mod config;
pub mod engine;
pub mod error;
pub mod fsutil;
pub mod heap;
pub mod ids;
pub mod open;
pub mod pipeline;
pub mod time;

pub use error::{Error, ErrorKind, Result};

/// Large blocks spill to unlinked files once an executable names a
/// directory ([`heap::spill_into`]); until then, and for everything small,
/// this is the system allocator.
#[global_allocator]
static ALLOCATOR: heap::Allocator = heap::Allocator;
