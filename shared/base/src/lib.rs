//! The base every ktr layer stands on: the one [`Error`], the [`config`],
//! durable writes ([`fsutil`]), reading files ktr did not write ([`open`]),
//! the rule that the state dir is ktr's own ([`state_dir`]),
//! typed [`ids`], [`time`] and [`digest`]s, and [`text::printable`] for what a person reads.
//!
//! The layers above, each its own crate so the compiler enforces the
//! direction (`admin → pipeline → engine → base`):
//!
//! | crate | what |
//! |---|---|
//! | `ktr_engine` | read-only: stream a transcript, decide what is speech, find the conversation, build the candidate, measure residue, check conservation |
//! | `ktr_pipeline` | acts: the operation file and its state machine, the stages and hooks, the targets that get switched |
//! | `ktr_admin` | for humans: doctor, prune, the status view, settings.json |
//!
//! docs/ARCHITECTURE.md has the map; docs/SPEC.md is the contract.

pub mod cli;
pub mod config;
pub mod digest;
pub mod error;
pub mod fsutil;
pub mod ids;
pub mod open;
pub mod state_dir;
pub mod text;
pub mod time;

pub use error::{Error, ErrorKind, Result};
