//! Where Claude Code compacts, as its setting says: the
//! hooks and the statusline run inside Claude Code, so they see its
//! environment and read its small settings files (capped reads).
//!
//! Claude Code 2.1.328 (read from its bundle, measured offline):
//! - `DISABLE_COMPACT` or `DISABLE_AUTO_COMPACT` in the environment, or
//!   `autoCompactEnabled: false` in its settings (`~/.claude/settings.json`,
//!   the project's `.claude/settings.json` and `.claude/settings.local.json`,
//!   later files win; else the legacy global config `~/.claude.json`), turn
//!   auto-compaction off: the window's hard limit is the only limit;
//! - else `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=N` (parsed as a float, used
//!   when 0 < N ≤ 100) moves the point to N % of (window − 20,000), never
//!   later than the default;
//! - else the default: window − 33,000.

use std::path::{Path, PathBuf};

use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window::{Compaction, CompactionSetting};

/// The setting for this process (its environment, `$HOME`, its current
/// folder).
pub fn setting() -> CompactionSetting {
    let env = |k: &str| std::env::var(k).ok();
    let home = env("HOME").map(PathBuf::from);
    let config_dir = env("CLAUDE_CONFIG_DIR")
        .map(PathBuf::from)
        .or_else(|| home.as_ref().map(|h| h.join(".claude")));
    let mut files = Vec::new();
    if let Some(dir) = &config_dir {
        files.push(dir.join("settings.json"));
    }
    if let Ok(cwd) = std::env::current_dir() {
        files.push(cwd.join(".claude/settings.json"));
        files.push(cwd.join(".claude/settings.local.json"));
    }
    let legacy = match env("CLAUDE_CONFIG_DIR") {
        Some(dir) => Some(Path::new(&dir).join(".claude.json")),
        None => home.map(|h| h.join(".claude.json")),
    };
    resolve(&env, &files, legacy.as_deref())
}

/// [`setting`] from `env`, the settings `files` (later wins) and the
/// legacy global config.
pub fn resolve(
    env: &dyn Fn(&str) -> Option<String>,
    files: &[PathBuf],
    legacy: Option<&Path>,
) -> CompactionSetting {
    for var in ["DISABLE_COMPACT", "DISABLE_AUTO_COMPACT"] {
        if env(var).is_some_and(|v| truthy(&v)) {
            return CompactionSetting {
                compaction: Compaction::Off,
                source: format!("{var} set"),
            };
        }
    }
    let mut enabled: Option<(bool, &Path)> = None;
    for file in files {
        if let Some(v) = auto_compact_enabled(file) {
            enabled = Some((v, file));
        }
    }
    if enabled.is_none()
        && let Some(file) = legacy
    {
        enabled = auto_compact_enabled(file).map(|v| (v, file));
    }
    if let Some((false, file)) = enabled {
        return CompactionSetting {
            compaction: Compaction::Off,
            source: format!("autoCompactEnabled false in {}", file.display()),
        };
    }
    if let Some(raw) = env("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE")
        && let Some(p) = parse_float(&raw).filter(|p| *p > 0.0 && *p <= 100.0)
    {
        return CompactionSetting {
            compaction: Compaction::Percent(p),
            source: format!("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE={}", raw.trim()),
        };
    }
    CompactionSetting::default()
}

/// Claude Code's truthy environment values.
fn truthy(v: &str) -> bool {
    matches!(
        v.trim().to_ascii_lowercase().as_str(),
        "1" | "true" | "yes" | "on"
    )
}

/// JavaScript's `parseFloat`: the longest leading decimal number
/// (`"60%"` → 60), None when there is none.
fn parse_float(raw: &str) -> Option<f64> {
    let s = raw.trim_start();
    let mut end = 0;
    let mut seen_dot = false;
    let mut seen_digit = false;
    for (i, c) in s.char_indices() {
        match c {
            '+' | '-' if i == 0 => {}
            '0'..='9' => seen_digit = true,
            '.' if !seen_dot => seen_dot = true,
            _ => break,
        }
        end = i + c.len_utf8();
    }
    if !seen_digit {
        return None;
    }
    s[..end].trim_end_matches('.').parse().ok()
}

/// `autoCompactEnabled` of a settings file, if it sets one. The legacy
/// `~/.claude.json` can be megabytes (Claude Code keeps every project's
/// history there) and this runs on every Stop and statusline call: a file
/// that does not name the key is not parsed.
fn auto_compact_enabled(file: &Path) -> Option<bool> {
    let bytes = read_capped(file, cap::SETTINGS, Links::Follow).ok()??;
    memchr::memmem::find(&bytes, b"\"autoCompactEnabled\"")?;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    doc.get("autoCompactEnabled")?.as_bool()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn parse_float_reads_like_javascript() {
        assert_eq!(parse_float("60"), Some(60.0));
        assert_eq!(parse_float(" 60.5%"), Some(60.5));
        assert_eq!(parse_float("60."), Some(60.0));
        assert_eq!(parse_float("abc"), None);
        assert_eq!(parse_float(""), None);
        assert_eq!(parse_float("-5"), Some(-5.0));
    }

    #[test]
    fn precedence_off_then_override_then_default() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("settings.json");
        let local = dir.path().join("settings.local.json");
        let legacy = dir.path().join(".claude.json");
        let files = [user.clone(), local.clone()];
        let none = env_of(&[]);
        let pct = env_of(&[("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "60")]);
        // Nothing set: the default.
        assert_eq!(
            resolve(&none, &files, Some(&legacy)),
            CompactionSetting::default()
        );
        // The override.
        let s = resolve(&pct, &files, Some(&legacy));
        assert_eq!(s.compaction, Compaction::Percent(60.0));
        assert_eq!(s.source, "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60");
        // Out of range: ignored, as Claude Code does.
        for bad in [
            &[("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "0")][..],
            &[("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "150")],
            &[("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE", "x")],
        ] {
            let leaked: &'static [(&str, &str)] = Box::leak(bad.to_vec().into_boxed_slice());
            assert_eq!(
                resolve(&env_of(leaked), &files, None).compaction,
                Compaction::Default
            );
        }
        // The legacy global config turns it off when no settings file says.
        std::fs::write(&legacy, r#"{"autoCompactEnabled": false}"#).unwrap();
        let s = resolve(&pct, &files, Some(&legacy));
        assert_eq!(s.compaction, Compaction::Off);
        assert!(s.source.contains(".claude.json"), "{}", s.source);
        // A settings file wins over the legacy config…
        std::fs::write(&user, r#"{"autoCompactEnabled": true}"#).unwrap();
        assert_eq!(
            resolve(&pct, &files, Some(&legacy)).compaction,
            Compaction::Percent(60.0)
        );
        // …and a later one over an earlier.
        std::fs::write(&local, r#"{"autoCompactEnabled": false}"#).unwrap();
        let s = resolve(&pct, &files, Some(&legacy));
        assert_eq!(s.compaction, Compaction::Off);
        assert!(s.source.contains("settings.local.json"), "{}", s.source);
        // The environment turns it off whatever the files say.
        std::fs::write(&local, "{}").unwrap();
        let s = resolve(
            &env_of(&[("DISABLE_AUTO_COMPACT", "1")]),
            &files,
            Some(&legacy),
        );
        assert_eq!(s.compaction, Compaction::Off);
        assert_eq!(s.source, "DISABLE_AUTO_COMPACT set");
        assert_eq!(
            resolve(&env_of(&[("DISABLE_AUTO_COMPACT", "0")]), &files, None).compaction,
            Compaction::Default
        );
    }
}
