//! Configuration (SPEC §2): a TOML file whose keys keep the names of the
//! original tool. Unknown keys and wrong types are errors naming the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use regex::Regex;
use toml::Value;

use crate::error::{Error, Result};
use crate::open::{Links, cap, read_capped};

/// How the running Claude Code is switched (SPEC §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Tmux,
    Systemd,
    Pointer,
}

/// What a token cap does when the conversation is larger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarryOverflow {
    DropOldest,
    Block,
}

/// What prepare does with lines that are not JSON objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMalformed {
    Block,
    Skip,
}

/// How the conversation is found in the file (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryMode {
    Chain,
    File,
}

impl std::fmt::Display for HistoryMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HistoryMode::Chain => "chain",
            HistoryMode::File => "file",
        })
    }
}

/// What `ktr-precompact` does when Claude Code is about to auto-compact
/// and no rebuild is pending (issue 8 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAutoCompaction {
    /// Let it compact; say that a lossless rebuild was possible.
    Advise,
    /// The human's standing approval: block it and rebuild instead.
    Rebuild,
}

/// A configured regular expression: its syntax is checked when the config
/// loads, and it is compiled on first use (through `Deref`). Compiling the
/// two default patterns (Unicode classes) takes about 2 ms, most of a hook
/// run that never matches anything.
#[derive(Debug, Clone)]
pub struct Pattern {
    key: &'static str,
    source: String,
    ignore_case: bool,
    compiled: std::sync::OnceLock<Regex>,
}

impl Pattern {
    /// Check `source`'s syntax (the regex crate's own parser); compile later.
    fn checked(key: &'static str, source: String, ignore_case: bool) -> Result<Pattern> {
        regex_syntax::ParserBuilder::new()
            .case_insensitive(ignore_case)
            .build()
            .parse(&source)
            .map_err(|e| {
                let first = e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .to_string();
                Keys::rule(key, &format!("is not a valid regular expression: {first}"))
            })?;
        Ok(Pattern {
            key,
            source,
            ignore_case,
            compiled: std::sync::OnceLock::new(),
        })
    }

    /// The pattern as configured.
    pub fn as_str(&self) -> &str {
        &self.source
    }
}

impl std::ops::Deref for Pattern {
    type Target = Regex;
    fn deref(&self) -> &Regex {
        self.compiled.get_or_init(|| {
            regex::RegexBuilder::new(&self.source)
                .case_insensitive(self.ignore_case)
                .build()
                // The syntax was checked at load; what is left is the
                // compiled size limit, only a pathological pattern's.
                .unwrap_or_else(|e| {
                    panic!("{} is too large to compile ({e}); simplify it", self.key)
                })
        })
    }
}

/// `context_window_tokens`: how large the window is taken to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowSetting {
    /// Statusline report, else model heuristics.
    #[default]
    Auto,
    /// A fixed size.
    Tokens(u64),
}

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

/// Default poison pattern (SPEC §2).
pub const DEFAULT_POISON_PATTERN: &str =
    "(AUP|Acceptable Use|policy violation|policy blocked|refusal loop|毒上下文|中毒|拒绝循环)";
/// Default pattern for assistant speech sent through channel tools.
pub const DEFAULT_REPLY_TOOL_PATTERN: &str = r"^mcp__[\w.-]*(companion|telegram)[\w.-]*__reply$";

const KEYS: &[&str] = &[
    "project_dir",
    "state_dir",
    "activation",
    "tmux_target",
    "tmux_socket",
    "claude_workdir",
    "verify_workdir_matches_project",
    "resume_command",
    "resume_env",
    "systemd_unit",
    "systemd_manager",
    "resume_pointer_path",
    "systemd_restart_timeout_seconds",
    "dirty_budget_bytes",
    "rebuild_on_original_image_view",
    "carry_max_tokens",
    "carry_overflow",
    "max_event_chars",
    "include_open_tail",
    "freeze_startup_snapshot",
    "carry_command_expansions",
    "stamp_turns",
    "stamp_template",
    "startup_header_template",
    "poison_pattern",
    "reply_tool_pattern",
    "on_malformed_line",
    "history",
    "activation_delay_seconds",
    "stable_file_seconds",
    "stable_file_timeout_seconds",
    "healthcheck_seconds",
    "healthcheck_min_seconds",
    "source_change_retries",
    "request_ttl_hours",
    "pointer_health_probe",
    "tmux_switch_in_place",
    "context_window_tokens",
    "advise_at_percent",
    "advise_min_free_percent",
    "on_auto_compaction",
];

/// The documented range of a numeric key (README, Configuration; the
/// config template `install` writes). Every value outside it is refused
/// with one line naming the key, so no later `Duration` or allocation can
/// overflow on a value that passed validation.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub key: &'static str,
    pub default: f64,
    /// Smallest value allowed (inclusive) …
    pub min: f64,
    /// … or strictly greater than this when `min_exclusive`.
    pub min_exclusive: bool,
    /// Largest value allowed (inclusive).
    pub max: f64,
    /// 0 is also allowed and means "off" (below `min`).
    pub zero_is_off: bool,
}

const fn range(key: &'static str, default: f64, min: f64, max: f64) -> Range {
    Range {
        key,
        default,
        min,
        min_exclusive: false,
        max,
        zero_is_off: false,
    }
}

/// Every numeric key, its default and its range.
pub const RANGES: &[Range] = &[
    range("systemd_restart_timeout_seconds", 180.0, 10.0, 3600.0),
    range("dirty_budget_bytes", 524_288.0, 0.0, 1_099_511_627_776.0),
    Range {
        zero_is_off: true,
        ..range("carry_max_tokens", 0.0, 5000.0, 100_000_000.0)
    },
    Range {
        zero_is_off: true,
        ..range("max_event_chars", 0.0, 500.0, 1_000_000_000.0)
    },
    range("activation_delay_seconds", 3.0, 0.0, 3600.0),
    Range {
        min_exclusive: true,
        ..range("stable_file_seconds", 1.0, 0.0, 600.0)
    },
    Range {
        min_exclusive: true,
        ..range("stable_file_timeout_seconds", 10.0, 0.0, 3600.0)
    },
    Range {
        min_exclusive: true,
        ..range("healthcheck_seconds", 5.0, 0.0, 3600.0)
    },
    // Also at most healthcheck_seconds; the default is at most half of it.
    range("healthcheck_min_seconds", 1.0, 0.0, 3600.0),
    range("source_change_retries", 2.0, 0.0, 100.0),
    Range {
        min_exclusive: true,
        ..range("request_ttl_hours", 24.0, 0.0, 87_600.0)
    },
    range("advise_at_percent", 70.0, 0.0, 100.0),
    range("advise_min_free_percent", 50.0, 0.0, 100.0),
];

impl Range {
    /// The row of `key` (every numeric key has one).
    fn of(key: &str) -> Range {
        *RANGES
            .iter()
            .find(|r| r.key == key)
            .unwrap_or_else(|| unreachable!("numeric key {key} has no row in RANGES"))
    }

    /// `Ok` when `value` is allowed, else the rule in words.
    pub fn check(&self, value: f64) -> std::result::Result<(), String> {
        let above_min = if self.min_exclusive {
            value > self.min
        } else {
            value >= self.min
        };
        let allowed = value.is_finite()
            && ((above_min && value <= self.max) || (self.zero_is_off && value == 0.0));
        if allowed {
            Ok(())
        } else {
            Err(self.describe())
        }
    }

    /// "must be between 10 and 3600" and the like.
    pub fn describe(&self) -> String {
        let lower = if self.min_exclusive {
            format!("greater than {} and at most {}", self.min, self.max)
        } else {
            format!("between {} and {}", self.min, self.max)
        };
        if self.zero_is_off {
            format!("must be 0 (off) or {lower}")
        } else {
            format!("must be {lower}")
        }
    }
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
        let bytes = read_config_file(&path)?.ok_or_else(|| {
            Error::config(format!(
                "cannot read config {}: it does not exist; create it (see README, Configuration) or pass --config PATH",
                path.display()
            ))
        })?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::config(format!("config {} is not valid UTF-8", path.display())))?;
        let mut config = Self::from_toml(&text)
            .map_err(|e| Error::config(format!("config {}: {}", path.display(), e.message)))?;
        config.anchor_relative_paths(&path);
        config.source = Some(path);
        Ok(config)
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
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            Error::config(format!("not valid TOML: {}", e.message()))
        })?;
        let keys = Keys { table };
        keys.reject_unknown()?;
        let home = home_dir();
        let activation = match keys.string("activation", "tmux")?.as_str() {
            "tmux" => Activation::Tmux,
            "systemd" => Activation::Systemd,
            "pointer" => Activation::Pointer,
            other => {
                return Err(Keys::rule(
                    "activation",
                    &format!("must be tmux, systemd or pointer (got {other:?})"),
                ));
            }
        };
        let project_dir = match keys.table.get("project_dir") {
            None => {
                return Err(Error::config(
                    "project_dir is required: set it to the Claude Code project folder holding <session>.jsonl (~/.claude/projects/<encoded cwd>)",
                ));
            }
            Some(_) => expand_home(&keys.string("project_dir", "")?, &home),
        };
        if project_dir.as_os_str().is_empty() {
            return Err(Keys::rule("project_dir", "must not be empty"));
        }
        let state_dir = expand_home(&keys.string("state_dir", "~/.local/state/ktr")?, &home);
        if state_dir.as_os_str().is_empty() {
            return Err(Keys::rule(
                "state_dir",
                "must not be empty (leave it out for ~/.local/state/ktr)",
            ));
        }
        let tmux_target = keys.string("tmux_target", "cc:0.0")?;
        if tmux_target.is_empty() || tmux_target.chars().any(char::is_control) {
            return Err(Keys::rule(
                "tmux_target",
                "must be non-empty and contain no control characters",
            ));
        }
        let tmux_socket = keys.string("tmux_socket", "")?;
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
        let claude_workdir = expand_home(&keys.string("claude_workdir", "~")?, &home);
        let resume_command = keys.resume_command()?;
        let resume_env = keys.string_map("resume_env")?;
        let systemd_unit = keys.string("systemd_unit", "claude-session.service")?;
        if activation == Activation::Systemd && !systemd_unit.ends_with(".service") {
            return Err(Keys::rule("systemd_unit", "must end in .service"));
        }
        let systemd_user = match keys.string("systemd_manager", "system")?.as_str() {
            "system" => false,
            "user" => true,
            other => {
                return Err(Keys::rule(
                    "systemd_manager",
                    &format!("must be system or user (got {other:?})"),
                ));
            }
        };
        let resume_pointer_path = expand_home(
            &keys.string("resume_pointer_path", "~/.local/state/ktr/resume_session")?,
            &home,
        );
        let systemd_restart_timeout_seconds = keys.seconds("systemd_restart_timeout_seconds")?;
        let carry_max_tokens = keys.integer("carry_max_tokens")?;
        let carry_overflow = match keys.string("carry_overflow", "drop_oldest")?.as_str() {
            "drop_oldest" => CarryOverflow::DropOldest,
            "block" => CarryOverflow::Block,
            other => {
                return Err(Keys::rule(
                    "carry_overflow",
                    &format!("must be drop_oldest or block (got {other:?})"),
                ));
            }
        };
        let max_event_chars = keys.integer("max_event_chars")?;
        let stamp_template = keys.string("stamp_template", "[发生时间: {timestamp}]")?;
        if !stamp_template.contains("{timestamp}") {
            return Err(Keys::rule("stamp_template", "must contain {timestamp}"));
        }
        let startup_header_template = keys.string(
            "startup_header_template",
            "[续窗启动快照 · 冻结于 {timestamp}]",
        )?;
        if startup_header_template.trim().is_empty() {
            return Err(Keys::rule("startup_header_template", "must not be empty"));
        }
        let poison_pattern = keys.regex("poison_pattern", DEFAULT_POISON_PATTERN, true)?;
        let reply_tool_pattern =
            keys.regex("reply_tool_pattern", DEFAULT_REPLY_TOOL_PATTERN, false)?;
        let on_malformed_line = match keys.string("on_malformed_line", "block")?.as_str() {
            "block" => OnMalformed::Block,
            "skip" => OnMalformed::Skip,
            other => {
                return Err(Keys::rule(
                    "on_malformed_line",
                    &format!("must be block or skip (got {other:?})"),
                ));
            }
        };
        let history = match keys.string("history", "chain")?.as_str() {
            "chain" => HistoryMode::Chain,
            "file" => HistoryMode::File,
            other => {
                return Err(Keys::rule(
                    "history",
                    &format!("must be chain or file (got {other:?})"),
                ));
            }
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
        let healthcheck_min_seconds = if keys.table.contains_key("healthcheck_min_seconds") {
            keys.seconds("healthcheck_min_seconds")?
        } else {
            // Half of a shorter window, so that the receipt has time to come.
            Range::of("healthcheck_min_seconds")
                .default
                .min(healthcheck_seconds / 2.0)
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
        let on_auto_compaction = match keys.string("on_auto_compaction", "advise")?.as_str() {
            "advise" => OnAutoCompaction::Advise,
            "rebuild" => OnAutoCompaction::Rebuild,
            other => {
                return Err(Keys::rule(
                    "on_auto_compaction",
                    &format!("must be advise or rebuild (got {other:?})"),
                ));
            }
        };
        Ok(Config {
            source: None,
            project_dir,
            state_dir,
            activation,
            tmux_target,
            tmux_socket,
            claude_workdir,
            verify_workdir_matches_project: keys.boolean("verify_workdir_matches_project", true)?,
            resume_command,
            resume_env,
            systemd_unit,
            systemd_user,
            resume_pointer_path,
            systemd_restart_timeout_seconds,
            dirty_budget_bytes: keys.integer("dirty_budget_bytes")?,
            rebuild_on_original_image_view: keys.boolean("rebuild_on_original_image_view", true)?,
            carry_max_tokens,
            carry_overflow,
            max_event_chars,
            include_open_tail: keys.boolean("include_open_tail", true)?,
            freeze_startup_snapshot: keys.boolean("freeze_startup_snapshot", true)?,
            carry_command_expansions: keys.boolean("carry_command_expansions", true)?,
            stamp_turns: keys.boolean("stamp_turns", true)?,
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
            pointer_health_probe: keys.boolean("pointer_health_probe", true)?,
            tmux_switch_in_place: keys.boolean("tmux_switch_in_place", true)?,
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
    pub fn resume_argv(&self, session_id: &str) -> Vec<String> {
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

/// The typed view over the raw TOML table, producing one-line errors.
struct Keys {
    table: toml::Table,
}

impl Keys {
    fn reject_unknown(&self) -> Result<()> {
        for key in self.table.keys() {
            if !KEYS.contains(&key.as_str()) {
                let hint = KEYS
                    .iter()
                    .find(|k| close(k, key))
                    .map(|k| format!(" (did you mean {k}?)"))
                    .unwrap_or_default();
                return Err(Error::config(format!(
                    "unknown key {key:?}{hint}; remove it or fix its spelling (README lists every key)"
                )));
            }
        }
        Ok(())
    }

    fn rule(key: &str, rule: &str) -> Error {
        Error::config(format!("{key} {rule}"))
    }

    fn wrong_type(key: &str, expected: &str, got: &Value) -> Error {
        Error::config(format!("{key} must be {expected}, not {}", got.type_str()))
    }

    fn string(&self, key: &str, default: &str) -> Result<String> {
        match self.table.get(key) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(Self::wrong_type(key, "a string", v)),
        }
    }

    fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.table.get(key) {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(v) => Err(Self::wrong_type(key, "true or false", v)),
        }
    }

    /// A whole-number key, checked against its row in [`RANGES`].
    fn integer(&self, key: &str) -> Result<u64> {
        let range = Range::of(key);
        let value = match self.table.get(key) {
            None => return Ok(range.default as u64),
            Some(Value::Integer(i)) => *i,
            Some(v) => return Err(Self::wrong_type(key, "a whole number", v)),
        };
        let value = u64::try_from(value).map_err(|_| Self::rule(key, &range.describe()))?;
        #[allow(clippy::cast_precision_loss)]
        range
            .check(value as f64)
            .map_err(|why| Self::rule(key, &why))?;
        Ok(value)
    }

    /// A whole percentage, 0 to 100 (its row in [`RANGES`]).
    fn percent(&self, key: &str) -> Result<u8> {
        let value = self.integer(key)?;
        u8::try_from(value).map_err(|_| Self::rule(key, &Range::of(key).describe()))
    }

    /// `context_window_tokens`: `"auto"` or a number of tokens (at least 10000).
    fn window_size(&self) -> Result<WindowSetting> {
        let key = "context_window_tokens";
        match self.table.get(key) {
            None => Ok(WindowSetting::Auto),
            Some(Value::String(s)) if s == "auto" => Ok(WindowSetting::Auto),
            Some(Value::Integer(i)) if *i >= 10_000 => Ok(WindowSetting::Tokens(i.unsigned_abs())),
            Some(Value::Integer(_)) => Err(Self::rule(key, "must be \"auto\" or at least 10000")),
            Some(v) => Err(Self::wrong_type(key, "\"auto\" or a number of tokens", v)),
        }
    }

    /// A number of seconds, checked against its row in [`RANGES`].
    fn seconds(&self, key: &str) -> Result<f64> {
        let range = Range::of(key);
        let value = match self.table.get(key) {
            None => return Ok(range.default),
            #[allow(clippy::cast_precision_loss)]
            Some(Value::Integer(i)) => *i as f64,
            Some(Value::Float(f)) => *f,
            Some(v) => return Err(Self::wrong_type(key, "a number of seconds", v)),
        };
        range.check(value).map_err(|why| Self::rule(key, &why))?;
        Ok(value)
    }

    fn regex(&self, key: &'static str, default: &str, ignore_case: bool) -> Result<Pattern> {
        Pattern::checked(key, self.string(key, default)?, ignore_case)
    }

    fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>> {
        match self.table.get(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Table(t)) => {
                let mut out = BTreeMap::new();
                for (k, v) in t {
                    let Value::String(s) = v else {
                        return Err(Self::wrong_type(&format!("{key}.{k}"), "a string", v));
                    };
                    if k.is_empty() || k.contains('=') || k.contains('\0') || s.contains('\0') {
                        return Err(Self::rule(
                            &format!("{key}.{k}"),
                            "is not a usable environment variable",
                        ));
                    }
                    out.insert(k.clone(), s.clone());
                }
                Ok(out)
            }
            Some(v) => Err(Self::wrong_type(key, "a table of strings", v)),
        }
    }

    fn resume_command(&self) -> Result<Vec<String>> {
        const KEY: &str = "resume_command";
        let argv = match self.table.get(KEY) {
            None => vec!["claude".into(), "--resume".into(), "{session_id}".into()],
            Some(Value::String(s)) => split_shell_words(s).map_err(|e| Self::rule(KEY, &e))?,
            Some(Value::Array(items)) => {
                let mut argv = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(s) => argv.push(s.clone()),
                        v => return Err(Self::wrong_type(KEY, "an array of strings", v)),
                    }
                }
                argv
            }
            Some(v) => return Err(Self::wrong_type(KEY, "an array of strings", v)),
        };
        if argv.is_empty() || argv[0].is_empty() {
            return Err(Self::rule(KEY, "must name a program"));
        }
        if argv.iter().filter(|a| *a == "{session_id}").count() != 1 {
            return Err(Self::rule(
                KEY,
                "must contain exactly one element equal to {session_id} (copy your real launch command and swap --continue for --resume {session_id})",
            ));
        }
        if argv.iter().any(|a| a.contains('\0')) {
            return Err(Self::rule(KEY, "must not contain NUL bytes"));
        }
        Ok(argv)
    }
}

/// Two keys are "close" if they differ by at most two edits (typo hint).
fn close(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut cur = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            cur[j] = (prev[j] + 1).min(cur[j - 1] + 1).min(prev[j - 1] + cost);
        }
        prev = cur;
    }
    prev[b.len()] <= 2
}

/// Split a command string the way a POSIX shell would split words (quotes and
/// backslashes), without expanding anything.
pub fn split_shell_words(s: &str) -> std::result::Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("has an unclosed single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => cur.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("has an unclosed double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("has an unclosed double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some('\n') => {}
                    Some(c) => cur.push(c),
                    None => return Err("ends with a lone backslash".into()),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// The user's home directory (`$HOME`).
pub fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map_or_else(|| PathBuf::from("/"), PathBuf::from)
}

/// The bytes of the config file at `path` (`None` when there is none): a
/// regular file (a FIFO or device there never blocks or floods the read),
/// at most [`cap::CONFIG`] bytes. A symlink is followed (dotfile managers).
pub fn read_config_file(path: &Path) -> Result<Option<Vec<u8>>> {
    read_capped(path, cap::CONFIG, Links::Follow).map_err(|e| {
        Error::config(format!(
            "config {}: {}; pass --config PATH to a regular file",
            path.display(),
            e.message
        ))
    })
}

/// The absolute folder holding `config_file`: relative paths in it are
/// taken from there ([`Config::load`], and the hooks' cheap state-dir look-up).
pub fn config_folder(config_file: &Path) -> PathBuf {
    let absolute = std::path::absolute(config_file).unwrap_or_else(|_| config_file.to_path_buf());
    absolute
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

/// Expand a leading `~` or `~/` to `home`.
pub fn expand_home(s: &str, home: &Path) -> PathBuf {
    if s == "~" {
        home.to_path_buf()
    } else if let Some(rest) = s.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(s)
    }
}

/// Claude Code's project-folder name for a working directory: every
/// character outside `[A-Za-z0-9]` becomes `-`.
pub fn encode_project_name(workdir: &Path) -> String {
    workdir
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Config::from_toml(text).unwrap_err().message
    }

    #[test]
    fn defaults_apply() {
        let c = Config::from_toml("project_dir = \"/p\"").unwrap();
        assert_eq!(c.activation, Activation::Tmux);
        assert_eq!(c.tmux_target, "cc:0.0");
        assert_eq!(c.resume_command, ["claude", "--resume", "{session_id}"]);
        assert_eq!(c.dirty_budget_bytes, 524_288);
        assert_eq!(c.stamp_template, "[发生时间: {timestamp}]");
        assert!(c.poison_pattern.is_match("acceptable use"));
        assert!(
            c.reply_tool_pattern
                .is_match("mcp__plugin_telegram_telegram__reply")
        );
        assert!(c.reply_tool_pattern.is_match("mcp__companion__reply"));
        assert!(
            !c.reply_tool_pattern
                .is_match("mcp__ktr__thread_rebuild_plan")
        );
    }

    #[test]
    fn unknown_key_is_named_with_a_hint() {
        let m = err("project_dir = \"/p\"\ninclude_open_tial = true");
        assert!(
            m.contains("include_open_tial") && m.contains("include_open_tail"),
            "{m}"
        );
    }

    #[test]
    fn wrong_types_name_the_key() {
        assert_eq!(
            err("project_dir = \"/p\"\nstamp_turns = \"yes\""),
            "stamp_turns must be true or false, not string"
        );
        assert!(
            err("project_dir = \"/p\"\ndirty_budget_bytes = 1.5").contains("dirty_budget_bytes")
        );
        assert!(err("project_dir = 3").contains("project_dir must be a string"));
        assert!(err("project_dir = \"/p\"\nresume_env = { A = 1 }").contains("resume_env.A"));
    }

    #[test]
    fn rules_are_enforced() {
        assert!(err("").contains("project_dir is required"));
        assert!(err("project_dir = \"/p\"\ncarry_max_tokens = 100").contains("carry_max_tokens"));
        assert!(err("project_dir = \"/p\"\nmax_event_chars = 10").contains("max_event_chars"));
        assert!(err("project_dir = \"/p\"\nstamp_template = \"x\"").contains("{timestamp}"));
        assert!(
            err("project_dir = \"/p\"\nresume_command = [\"claude\"]").contains("{session_id}")
        );
        assert!(
            err("project_dir = \"/p\"\nactivation = \"systemd\"\nsystemd_unit = \"x\"")
                .contains(".service")
        );
        assert!(
            err("project_dir = \"/p\"\nstable_file_seconds = 15")
                .contains("stable_file_timeout_seconds")
        );
        assert!(err("project_dir = \"/p\"\npoison_pattern = \"(\"").contains("poison_pattern"));
        assert!(err("project_dir = \"/p\"\ntmux_target = \"a\\nb\"").contains("tmux_target"));
        assert_eq!(
            err("project_dir = \"/p\"\nsystemd_restart_timeout_seconds = 3"),
            "systemd_restart_timeout_seconds must be between 10 and 3600"
        );
        assert!(err("not toml [").starts_with("not valid TOML"));
        assert_eq!(
            err("project_dir = \"/p\"\nhealthcheck_min_seconds = 6"),
            "healthcheck_min_seconds must not be greater than healthcheck_seconds"
        );
    }

    #[test]
    fn the_minimum_life_defaults_to_one_second_within_the_window() {
        let min = |text: &str| Config::from_toml(text).unwrap().healthcheck_min_seconds;
        assert!((min("project_dir = \"/p\"") - 1.0).abs() < f64::EPSILON);
        let short = "project_dir = \"/p\"\nhealthcheck_seconds = 0.5";
        assert!((min(short) - 0.25).abs() < f64::EPSILON);
        let explicit = "project_dir = \"/p\"\nhealthcheck_min_seconds = 0";
        assert!(min(explicit).abs() < f64::EPSILON);
    }

    #[test]
    fn resume_command_string_is_split_like_a_shell() {
        let c = Config::from_toml(
            "project_dir = \"/p\"\nresume_command = \"claude --resume {session_id} --append-system-prompt 'be kind'\"",
        )
        .unwrap();
        assert_eq!(
            c.resume_argv("abc"),
            [
                "claude",
                "--resume",
                "abc",
                "--append-system-prompt",
                "be kind"
            ]
        );
    }

    #[test]
    fn every_numeric_key_has_a_range_and_huge_values_name_the_key() {
        for r in RANGES {
            for bad in ["1e300", "-1", "1e20", "nan", "inf"] {
                let m = err(&format!("project_dir = \"/p\"\n{} = {bad}", r.key));
                assert!(m.starts_with(r.key), "{} = {bad}: {m}", r.key);
            }
            let ok = Config::from_toml(&format!("project_dir = \"/p\"\n{} = {}", r.key, r.max));
            // Keys bounded by another key too.
            let lower_ok = ![
                "stable_file_timeout_seconds",
                "stable_file_seconds",
                "healthcheck_min_seconds",
            ]
            .contains(&r.key);
            assert!(ok.is_ok() || !lower_ok, "{} = max refused", r.key);
        }
        assert_eq!(
            err("project_dir = \"/p\"\nhealthcheck_seconds = 1e300"),
            "healthcheck_seconds must be greater than 0 and at most 3600"
        );
        assert_eq!(
            err("project_dir = \"/p\"\ncarry_max_tokens = 100"),
            "carry_max_tokens must be 0 (off) or between 5000 and 100000000"
        );
        assert!(
            err("project_dir = \"/p\"\nstate_dir = \"\"")
                .starts_with("state_dir must not be empty")
        );
        // Every documented range is what the README says.
        let readme = include_str!("../../../README.md");
        for r in RANGES {
            assert!(
                readme.contains(&format!("`{}`", r.key)),
                "README lacks {}",
                r.key
            );
        }
    }

    #[test]
    fn relative_paths_are_taken_from_the_config_folder() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ktr.toml");
        std::fs::write(&file, "project_dir = \"proj\"\nstate_dir = \"st/ate\"\n").unwrap();
        let c = Config::load(Some(&file)).unwrap();
        assert_eq!(c.project_dir, dir.path().join("proj"));
        assert_eq!(c.state_dir, dir.path().join("st/ate"));
    }

    #[test]
    fn project_names_encode_like_claude_code() {
        assert_eq!(
            encode_project_name(Path::new("/home/u/my.proj_x/a b+c")),
            "-home-u-my-proj-x-a-b-c"
        );
        assert_eq!(encode_project_name(Path::new("/root")), "-root");
    }
}
