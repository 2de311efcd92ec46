//! The read-only engine: everything that reads a transcript and decides
//! what a rebuild would carry. Nothing here writes outside a path it is
//! given, and nothing here knows about operations or targets.
//!
//! The facade is [`plan::build`] (with [`PlanReport`], [`ManifestEntry`],
//! [`LeftOut`]) and [`conserve::check`]; `classify`, `transcript`, `turns`
//! and `candidate` stay public for the rule and property tests. `chain`,
//! `rawjson`, `scan` and `symbols` are internals.

pub mod candidate;
pub(crate) mod chain;
pub mod classify;
pub mod conserve;
pub(crate) mod counts;
pub(crate) mod inline_str;
pub(crate) mod jsonskip;
pub mod ledger;
pub(crate) mod left_out;
pub(crate) mod lines;
pub mod lone;
pub mod meter;
pub(crate) mod options;
pub mod plan;
pub(crate) mod rawjson;
mod readahead;
pub mod recall;
pub(crate) mod reread;
pub(crate) mod scan;
pub mod span;
pub(crate) mod symbols;
pub mod transcript;
pub mod turns;
pub mod window;

pub use candidate::ManifestEntry;
pub use conserve::ConservationCounts;
pub use ledger::LedgerReport;
pub use options::EngineOptions;
pub use plan::{LeftOut, Plan, PlanReport};
pub use rawjson::with_top_level;
pub use turns::{ItemKind, LeftOutReason, Role};
