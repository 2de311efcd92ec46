//! Configuration (SPEC §2): a TOML file whose keys keep the names of the
//! original tool. Unknown keys and wrong types are errors naming the key.
//! Every key is declared once, in [`KEYS`] (`declared.rs`): its type,
//! default, range and doc; [`Config::from_toml`] reads each one and checks
//! its own rules beside the read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::ids::SessionId;

mod declared;
#[cfg(test)]
mod docs;
mod error;
mod keys;
mod paths;
mod pattern;
mod ranges;
#[cfg(test)]
mod tests;
mod values;

pub use declared::{KEYS, Key, Type, Unset};
pub use error::ConfigError;
use keys::Keys;
pub use paths::{
    config_folder, encode_project_name, expand_home, home_dir, read_config_file, split_shell_words,
};
pub use pattern::Pattern;
pub use ranges::Range;
pub use ranges::Words;
pub use values::{
    Activation, CarryOverflow, HistoryMode, OnAutoCompaction, OnMalformed, WindowSetting,
};

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it was loaded from (None for built-in defaults in tests).
    pub source: Option<PathBuf>,
    pub project_dir: PathBuf,
    pub state_dir: PathBuf,
    pub activation: Activation,
    pub tmux_target: String,
    /// The tmux server: `None` = the default one; a name (`tmux -L NAME`)
    /// or a socket path (`tmux -S PATH`, contains a `/`).
    pub tmux_socket: Option<String>,
    pub claude_workdir: PathBuf,
    pub verify_workdir_matches_project: bool,
    pub resume_command: Vec<String>,
    pub resume_env: BTreeMap<String, String>,
    pub systemd_unit: String,
    /// `systemd_manager = "user"`: every systemctl / systemd-run call gets
    /// `--user` (a unit of the user's own manager); `"system"` (default):
    /// the system manager, which needs root (or a polkit rule).
    pub systemd_user: bool,
    pub resume_pointer_path: PathBuf,
    pub systemd_restart_timeout_seconds: f64,
    pub dirty_budget_bytes: u64,
    pub rebuild_on_original_image_view: bool,
    pub carry_max_tokens: u64,
    pub carry_overflow: CarryOverflow,
    pub max_event_chars: u64,
    pub include_open_tail: bool,
    pub freeze_startup_snapshot: bool,
    pub carry_command_expansions: bool,
    pub stamp_turns: bool,
    pub stamp_template: String,
    pub startup_header_template: String,
    pub poison_pattern: Pattern,
    pub reply_tool_pattern: Pattern,
    pub on_malformed_line: OnMalformed,
    pub history: HistoryMode,
    pub activation_delay_seconds: f64,
    pub stable_file_seconds: f64,
    pub stable_file_timeout_seconds: f64,
    pub healthcheck_seconds: f64,
    /// How long Claude Code must stay alive after its resume receipt
    /// (`ktr-ack`) before the switch counts as healthy (at most
    /// `healthcheck_seconds`, the upper bound).
    pub healthcheck_min_seconds: f64,
    pub source_change_retries: u64,
    /// A pending request older than this many hours expires (`expired`).
    pub request_ttl_hours: f64,
    /// Pointer mode: prove the new session loads before `activated` by
    /// resuming it once with a prompt ktr-prompt refuses (needs ktr-ack and
    /// ktr-prompt installed; `false`: the pointer's content is the health).
    pub pointer_health_probe: bool,
    /// tmux: switch by typing `/resume <id>` into the running Claude Code
    /// (`false`: always respawn the pane with `resume_command`).
    pub tmux_switch_in_place: bool,
    /// The window size: statusline report / model heuristics, or fixed.
    pub context_window_tokens: WindowSetting,
    /// Advice in the Stop hook from this fill level (then 80, 90); 0 = off.
    pub advise_at_percent: u8,
    /// Advise only when a rebuild would free at least this much.
    pub advise_min_free_percent: u8,
    pub on_auto_compaction: OnAutoCompaction,
}

impl Config {
    /// Where the config is looked for: `--config`, else `$KTR_CONFIG`, else
    /// `$XDG_CONFIG_HOME/ktr/config.toml`, else `~/.config/ktr/config.toml`.
    pub fn locate(explicit: Option<&Path>) -> PathBuf {
        if let Some(p) = explicit {
            return p.to_path_buf();
        }
        if let Some(p) = std::env::var_os("KTR_CONFIG").filter(|v| !v.is_empty()) {
            return PathBuf::from(p);
        }
        if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
            return PathBuf::from(x).join("ktr/config.toml");
        }
        home_dir().join(".config/ktr/config.toml")
    }

    /// Load and validate the config file found by [`Config::locate`].
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        let path = Self::locate(explicit);
        let bytes =
            read_config_file(&path)?.ok_or_else(|| ConfigError::Missing { path: path.clone() })?;
        let text =
            String::from_utf8(bytes).map_err(|_| ConfigError::NotUtf8 { path: path.clone() })?;
        let mut config = Self::from_toml(&text).map_err(|e| {
            Error::config(format!("config {}: {}", path.display(), e.message)).because(e)
        })?;
        config.anchor_relative_paths(&path);
        config.check_state_dir()?;
        config.source = Some(path);
        Ok(config)
    }

    /// The state dir must be a folder of ktr's own ([`crate::state_dir`]).
    pub(crate) fn check_state_dir(&self) -> Result<()> {
        let home = home_dir();
        crate::state_dir::check(&self.state_dir, self.state_place(&home))
    }

    /// Where the state dir stands, for [`crate::state_dir`]'s rule.
    pub fn state_place<'a>(&'a self, home: &'a Path) -> crate::state_dir::Place<'a> {
        crate::state_dir::Place {
            home,
            project: Some(&self.project_dir),
            pointer: self
                .resume_pointer_path
                .parent()
                .filter(|p| *p == self.state_dir)
                .and(self.resume_pointer_path.file_name())
                .and_then(|n| n.to_str()),
        }
    }

    /// Relative paths in a config file mean "beside the config file", not
    /// "wherever the command happens to run" (a hook runs in Claude Code's
    /// working directory): anchor them to the file's folder.
    fn anchor_relative_paths(&mut self, config_file: &Path) {
        let base = config_folder(config_file);
        for path in [
            &mut self.project_dir,
            &mut self.state_dir,
            &mut self.claude_workdir,
            &mut self.resume_pointer_path,
        ] {
            if path.is_relative() {
                *path = base.join(&*path);
            }
        }
    }

    /// Parse and validate TOML text.
    pub fn from_toml(text: &str) -> Result<Config> {
        let table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::NotToml {
                    why: e.message().to_string(),
                })?;
        let keys = Keys { table };
        keys.reject_unknown()?;
        let home = home_dir();
        let activation = match keys.one_of("activation")? {
            "systemd" => Activation::Systemd,
            "pointer" => Activation::Pointer,
            _ => Activation::Tmux,
        };
        if !keys.is_set("project_dir") {
            return Err(ConfigError::Required {
                key: "project_dir",
                how: "set it to the Claude Code project folder holding <session>.jsonl (~/.claude/projects/<encoded cwd>)",
            }
            .into());
        }
        let project_dir = expand_home(&keys.string("project_dir")?, &home);
        if project_dir.as_os_str().is_empty() {
            return Err(Keys::rule("project_dir", "must not be empty"));
        }
        let state_dir = expand_home(&keys.string("state_dir")?, &home);
        if state_dir.as_os_str().is_empty() {
            return Err(Keys::rule(
                "state_dir",
                "must not be empty (leave it out for ~/.local/state/ktr)",
            ));
        }
        let tmux_target = keys.string("tmux_target")?;
        if tmux_target.is_empty() || tmux_target.chars().any(char::is_control) {
            return Err(Keys::rule(
                "tmux_target",
                "must be non-empty and contain no control characters",
            ));
        }
        // tmux reads an argument that ends in `;` as its command separator
        // (and `\;` as a literal `;`): such a target names another pane or
        // splits ktr's command in two.
        if tmux_target.ends_with(';') {
            return Err(Keys::rule(
                "tmux_target",
                &format!(
                    "must not end in ';' (tmux reads it as its command separator; got {tmux_target:?}): name the pane as session:window.pane or %id"
                ),
            ));
        }
        let tmux_socket = keys.string("tmux_socket")?;
        if tmux_socket.chars().any(char::is_control) {
            return Err(Keys::rule(
                "tmux_socket",
                "must contain no control characters",
            ));
        }
        let tmux_socket = (!tmux_socket.is_empty()).then(|| {
            if tmux_socket.contains('/') {
                expand_home(&tmux_socket, &home).display().to_string()
            } else {
                tmux_socket
            }
        });
        let claude_workdir = expand_home(&keys.string("claude_workdir")?, &home);
        let resume_command = keys.resume_command()?;
        let resume_env = keys.string_map("resume_env")?;
        let systemd_unit = keys.string("systemd_unit")?;
        if activation == Activation::Systemd && !systemd_unit.ends_with(".service") {
            return Err(Keys::rule("systemd_unit", "must end in .service"));
        }
        let systemd_user = keys.one_of("systemd_manager")? == "user";
        let resume_pointer_path = expand_home(&keys.string("resume_pointer_path")?, &home);
        let systemd_restart_timeout_seconds = keys.seconds("systemd_restart_timeout_seconds")?;
        let carry_max_tokens = keys.integer("carry_max_tokens")?;
        let carry_overflow = match keys.one_of("carry_overflow")? {
            "block" => CarryOverflow::Block,
            _ => CarryOverflow::DropOldest,
        };
        let max_event_chars = keys.integer("max_event_chars")?;
        let stamp_template = keys.string("stamp_template")?;
        if !stamp_template.contains("{timestamp}") {
            return Err(Keys::rule("stamp_template", "must contain {timestamp}"));
        }
        let startup_header_template = keys.string("startup_header_template")?;
        if startup_header_template.trim().is_empty() {
            return Err(Keys::rule("startup_header_template", "must not be empty"));
        }
        let poison_pattern = keys.regex("poison_pattern")?;
        let reply_tool_pattern = keys.regex("reply_tool_pattern")?;
        let on_malformed_line = match keys.one_of("on_malformed_line")? {
            "skip" => OnMalformed::Skip,
            _ => OnMalformed::Block,
        };
        let history = match keys.one_of("history")? {
            "file" => HistoryMode::File,
            _ => HistoryMode::Chain,
        };
        let activation_delay_seconds = keys.seconds("activation_delay_seconds")?;
        let stable_file_seconds = keys.seconds("stable_file_seconds")?;
        let stable_file_timeout_seconds = keys.seconds("stable_file_timeout_seconds")?;
        if stable_file_timeout_seconds <= stable_file_seconds {
            return Err(Keys::rule(
                "stable_file_timeout_seconds",
                "must be greater than stable_file_seconds",
            ));
        }
        let healthcheck_seconds = keys.seconds("healthcheck_seconds")?;
        let healthcheck_min_seconds = keys.seconds("healthcheck_min_seconds")?;
        let healthcheck_min_seconds = if keys.is_set("healthcheck_min_seconds") {
            healthcheck_min_seconds
        } else {
            // Half of a shorter window, so that the receipt has time to come.
            healthcheck_min_seconds.min(healthcheck_seconds / 2.0)
        };
        if healthcheck_min_seconds > healthcheck_seconds {
            return Err(Keys::rule(
                "healthcheck_min_seconds",
                "must not be greater than healthcheck_seconds",
            ));
        }
        let context_window_tokens = keys.window_size()?;
        let advise_at_percent = keys.percent("advise_at_percent")?;
        let advise_min_free_percent = keys.percent("advise_min_free_percent")?;
        let on_auto_compaction = match keys.one_of("on_auto_compaction")? {
            "rebuild" => OnAutoCompaction::Rebuild,
            _ => OnAutoCompaction::Advise,
        };
        Ok(Config {
            source: None,
            project_dir,
            state_dir,
            activation,
            tmux_target,
            tmux_socket,
            claude_workdir,
            verify_workdir_matches_project: keys.boolean("verify_workdir_matches_project")?,
            resume_command,
            resume_env,
            systemd_unit,
            systemd_user,
            resume_pointer_path,
            systemd_restart_timeout_seconds,
            dirty_budget_bytes: keys.integer("dirty_budget_bytes")?,
            rebuild_on_original_image_view: keys.boolean("rebuild_on_original_image_view")?,
            carry_max_tokens,
            carry_overflow,
            max_event_chars,
            include_open_tail: keys.boolean("include_open_tail")?,
            freeze_startup_snapshot: keys.boolean("freeze_startup_snapshot")?,
            carry_command_expansions: keys.boolean("carry_command_expansions")?,
            stamp_turns: keys.boolean("stamp_turns")?,
            stamp_template,
            startup_header_template,
            poison_pattern,
            reply_tool_pattern,
            on_malformed_line,
            history,
            activation_delay_seconds,
            stable_file_seconds,
            stable_file_timeout_seconds,
            healthcheck_seconds,
            healthcheck_min_seconds,
            source_change_retries: keys.integer("source_change_retries")?,
            request_ttl_hours: keys.seconds("request_ttl_hours")?,
            pointer_health_probe: keys.boolean("pointer_health_probe")?,
            tmux_switch_in_place: keys.boolean("tmux_switch_in_place")?,
            context_window_tokens,
            advise_at_percent,
            advise_min_free_percent,
            on_auto_compaction,
        })
    }

    /// Why `claude_workdir` does not match `project_dir` (Claude Code names
    /// the project folder after its working directory), or `None`.
    pub fn workdir_mismatch(&self) -> Option<String> {
        let expected = encode_project_name(&self.claude_workdir);
        let actual = self
            .project_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        (expected != actual).then(|| {
            format!(
                "claude_workdir {} encodes to {expected}, but project_dir is named {actual}",
                self.claude_workdir.display()
            )
        })
    }

    /// The resume argv with `{session_id}` replaced.
    pub fn resume_argv(&self, session_id: &SessionId) -> Vec<String> {
        self.resume_command
            .iter()
            .map(|a| {
                if a == "{session_id}" {
                    session_id.to_string()
                } else {
                    a.clone()
                }
            })
            .collect()
    }
}
