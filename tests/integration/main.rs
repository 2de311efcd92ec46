//! ktr's integration tests: one test binary (`cargo test --test integration`),
//! one module per area, and one [`support`] tree every area shares.
//!
//! Tests that need something a fresh clone does not have are `#[ignore]`d
//! with the reason (run them with `cargo test -- --include-ignored`; then a
//! missing requirement fails the test with what to set):
//! - the corpus of real transcripts: `KTR_CORPUS` (default `../shared/corpus`);
//! - the real Claude Code CLI: `KTR_CLAUDE_BIN` (`.ci/run` installs it).

mod support;

mod admin;
mod claude_fidelity;
mod claude_hooks;
mod claude_loop;
mod claude_resume;
mod claude_runner;
mod claude_turns;
mod claude_window;
mod corpus;
mod doctor;
mod full_disk;
mod golden;
mod hostile;
mod install;
mod kill;
mod lone_surrogates;
mod long_texts;
mod mcp;
mod memory;
mod pipeline;
mod properties;
mod rules;
mod runner;
mod stop_hook;
mod target_binding;
mod targets;
mod verify;
mod window;
