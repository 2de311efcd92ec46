//! Claude Code's `settings.json` and ktr's hooks in it (SPEC §13).
//!
//! [`merge`] puts the fragment of `hooks.json` (the Stop hook `ktr-stop`
//! and the `SessionStart`/`resume` hook `ktr-ack`) into a settings document;
//! [`unmerge`] takes exactly those out again. Both are pure functions on
//! text, so they are tested byte for byte:
//!
//! - idempotent: a hook whose program is named `ktr-stop`/`ktr-prompt`/`ktr-ack` is ours;
//!   it is updated in place (a stale path from an older install becomes the
//!   new one), never duplicated;
//! - foreign hooks and every other key keep their content and their order;
//! - a document of the wrong shape is refused with what to fix, and nothing
//!   is written.
//!
//! [`Edit`] applies either to a file: timestamped backup, atomic write,
//! mode preserved; a dry run only shows the diff.

use std::path::PathBuf;

use ktr_base::config::home_dir;

/// The hook fragment the installer merges (`hooks.json` at the repo root).
/// `{bin_dir}` is replaced by the install prefix and `{config_arg}` by
/// ` --config PATH` (or nothing), both shell-quoted: Claude Code runs hook
/// commands through a shell.
pub(crate) const FRAGMENT: &str = include_str!("../../../../hooks.json");

/// The executables whose hooks are ours.
pub(crate) const OUR_PROGRAMS: [&str; 4] = ["ktr-stop", "ktr-prompt", "ktr-ack", "ktr-precompact"];

/// The statusline program ktr installs (only where no `statusLine` is set).
pub(crate) const STATUSLINE_PROGRAM: &str = "ktr-statusline";

/// `~/.claude/settings.json`, the user-scope settings Claude Code reads.
pub fn default_path() -> PathBuf {
    home_dir().join(".claude/settings.json")
}

mod edit;
mod hooks;
mod json;
mod mcp;
mod shell;
mod statusline;
#[cfg(test)]
mod tests;

pub use edit::{Applied, Change, Edit, line_diff};
pub use hooks::{Found, Wanted, find_ours, merge, unmerge, wanted};
pub use json::Json;
pub use mcp::mcp_registered;
pub use shell::{program_of, sh_quote};
pub use statusline::{
    embed_hint, merge_statusline, statusline_command, unmerge_statusline, wanted_statusline,
};
