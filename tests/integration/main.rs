//! ktr's integration tests: one test binary (`cargo test --test integration`),
//! one module per area, and one [`support`] tree every area shares.
//!
//! Tests that need something a fresh clone does not have are `#[ignore]`d
//! with the reason (run them with `cargo test -- --include-ignored`; then a
//! missing requirement fails the test with what to set):
//! - the corpus of real transcripts: `KTR_CORPUS` (default `../shared/corpus`);
//! - the real Claude Code CLI: `KTR_CLAUDE_BIN` (`.ci/run` installs it);
//! - a real systemd (root, cgroup2).
//!
//! Tests that take longer than ~10 s are `#[ignore = "slow: …"]`, so a plain
//! `cargo test` stays a fast loop; `--include-ignored` (and `.ci/run`) runs
//! them too.

mod support;

mod admin;
mod archive;
mod claude_compaction;
mod claude_fidelity;
mod claude_hand;
mod claude_hooks;
mod claude_keys_after_resume;
mod claude_lanes;
mod claude_loop;
mod claude_paste_back;
mod claude_plugin;
mod claude_recall;
mod claude_resume;
mod claude_runner;
mod claude_sessions;
mod claude_soak;
mod claude_switch;
mod claude_turns;
mod claude_typing;
mod claude_window;
mod cli;
mod corpus;
mod discover;
mod doctor;
mod escapes;
mod full_disk;
mod golden;
mod guard_rollback;
mod hand;
mod hostile;
mod install;
mod keep;
mod kill;
mod last_copy;
mod lone_surrogates;
mod long_texts;
mod mcp;
mod memory;
mod no_issue_numbers;
mod paste_back;
mod pipeline;
mod properties;
mod quiet_moment;
mod readmes;
mod recall;
mod recall_context;
mod recall_edges;
mod recall_everywhere;
mod recall_fields;
mod recall_window;
mod rules;
mod runner;
mod sessions;
mod state_dir;
mod stop_hook;
mod target_binding;
mod targets;
mod text_decisions;
mod verify;
mod window;
mod zero_config;
