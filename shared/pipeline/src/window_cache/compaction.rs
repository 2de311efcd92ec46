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
//! - else the default: window − 33,000;
//! - the window those are computed from is min(window, the auto-compact
//!   window): `CLAUDE_CODE_AUTO_COMPACT_WINDOW` (`150000`, `150k`, `1m`; a
//!   value under 100,000 counts as 100,000; one that is no size is
//!   ignored), else `autoCompactWindow` in the settings files (a number,
//!   or `"auto"` for none); measured: `=150000` on a 200k window compacts
//!   after a reply at 118,570, `=100000` after 70,000 (not after 66,800);
//! - `CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE` (a positive number) is the hard
//!   limit itself (default: window − 23,000); the auto-compact window does
//!   not move the hard limit.
//!
//! Not followed: `modelSettings.<model>.autoCompactWindow` (per model; the
//! hooks do not know the model before the first reply) and `/autocompact`
//! (it keeps its choice in the session's own metadata).

use std::path::{Path, PathBuf};

use ktr_base::open::{Links, cap, read_capped};
use ktr_engine::window::{Compaction, CompactionSetting, Sourced};

/// The smallest auto-compact window Claude Code 2.1.328 takes: a smaller
/// value counts as this.
const MIN_AUTO_COMPACT_WINDOW: u64 = 100_000;

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
    CompactionSetting {
        window_cap: window_cap(env, files),
        hard_limit: env("CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE")
            .and_then(|raw| Some((parse_int(&raw).filter(|n| *n > 0)?, raw)))
            .map(|(tokens, raw)| Sourced {
                tokens,
                source: format!("CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE={}", raw.trim()),
            }),
        ..how_it_compacts(env, files, legacy)
    }
}

/// The auto-compact window: the environment's, else the last settings
/// file's that names one.
fn window_cap(env: &dyn Fn(&str) -> Option<String>, files: &[PathBuf]) -> Option<Sourced> {
    if let Some(raw) = env("CLAUDE_CODE_AUTO_COMPACT_WINDOW")
        && let Some(tokens) = window_size(&raw)
    {
        return Some(Sourced {
            tokens,
            source: format!("CLAUDE_CODE_AUTO_COMPACT_WINDOW={}", raw.trim()),
        });
    }
    let mut found = None;
    for file in files {
        match setting_value(file, "autoCompactWindow") {
            Some(serde_json::Value::Number(n)) => {
                found = n.as_u64().map(|tokens| Sourced {
                    tokens: tokens.max(MIN_AUTO_COMPACT_WINDOW),
                    source: format!("autoCompactWindow {tokens} in {}", file.display()),
                });
            }
            // "auto" (or anything else) in a later file: no cap from the
            // settings.
            Some(_) => found = None,
            None => {}
        }
    }
    found
}

/// A size as Claude Code 2.1.328 reads `CLAUDE_CODE_AUTO_COMPACT_WINDOW`:
/// `k`/`m` suffixes (`150k`, `1.5m`), else an integer (`150000`, `1e5`,
/// `150,000`); under 100,000 counts as 100,000; None when it is no size.
fn window_size(raw: &str) -> Option<u64> {
    let r = raw.trim();
    let last = r.chars().last()?.to_ascii_lowercase();
    let tokens = match last {
        'k' | 'm' => {
            let unit = if last == 'k' { 1_000.0 } else { 1_000_000.0 };
            (parse_float(&r[..r.len() - 1])? * unit).round()
        }
        _ => parse_int(r)? as f64,
    };
    // Claude Code refuses what is not a safe integer or is below 1.
    if !(1.0..=9_007_199_254_740_991.0).contains(&tokens) {
        return None;
    }
    Some((tokens as u64).max(MIN_AUTO_COMPACT_WINDOW))
}

/// An integer as Claude Code reads one from the environment: scientific
/// notation (`1e5`, a whole number only), digits grouped by `,` `_` or a
/// space (`150,000`), else JavaScript's `parseInt` (the leading digits).
fn parse_int(raw: &str) -> Option<u64> {
    let s = raw.trim();
    if s.contains(['e', 'E']) {
        let n: f64 = s.parse().ok()?;
        return (n.fract() == 0.0 && (0.0..9e15).contains(&n)).then_some(n as u64);
    }
    let grouped = s.trim_start_matches('+');
    let sep = grouped
        .chars()
        .find(|c| matches!(c, ',' | '_' | ' ' | '\u{a0}' | '\u{202f}'));
    if let Some(sep) = sep {
        let mut groups = grouped.split(sep);
        let head = groups.next()?;
        let well_formed = (1..=3).contains(&head.len())
            && head.bytes().all(|b| b.is_ascii_digit())
            && groups.all(|g| g.len() == 3 && g.bytes().all(|b| b.is_ascii_digit()));
        if well_formed {
            return grouped.replace(sep, "").parse().ok();
        }
    }
    let digits: String = grouped.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Whether and how Claude Code compacts on its own.
fn how_it_compacts(
    env: &dyn Fn(&str) -> Option<String>,
    files: &[PathBuf],
    legacy: Option<&Path>,
) -> CompactionSetting {
    for var in ["DISABLE_COMPACT", "DISABLE_AUTO_COMPACT"] {
        if env(var).is_some_and(|v| truthy(&v)) {
            return CompactionSetting {
                compaction: Compaction::Off,
                source: format!("{var} set"),
                ..CompactionSetting::default()
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
            ..CompactionSetting::default()
        };
    }
    if let Some(raw) = env("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE")
        && let Some(p) = parse_float(&raw).filter(|p| *p > 0.0 && *p <= 100.0)
    {
        return CompactionSetting {
            compaction: Compaction::Percent(p),
            source: format!("CLAUDE_AUTOCOMPACT_PCT_OVERRIDE={}", raw.trim()),
            ..CompactionSetting::default()
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
    setting_value(file, "autoCompactEnabled")?.as_bool()
}

/// The top-level `key` of a settings file, if it sets one; a file that
/// does not name the key is not parsed.
fn setting_value(file: &Path, key: &str) -> Option<serde_json::Value> {
    let bytes = read_capped(file, cap::SETTINGS, Links::Follow).ok()??;
    memchr::memmem::find(&bytes, format!("\"{key}\"").as_bytes())?;
    let mut doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    doc.get_mut(key).map(serde_json::Value::take)
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
    fn sizes_read_as_claude_code_reads_them() {
        for (raw, want) in [
            ("150000", Some(150_000)),
            (" 150k ", Some(150_000)),
            ("1.5m", Some(1_500_000)),
            ("1M", Some(1_000_000)),
            ("1e5", Some(100_000)),
            ("150,000", Some(150_000)),
            ("150000abc", Some(150_000)),
            // Under the minimum: the minimum.
            ("50000", Some(100_000)),
            ("1", Some(100_000)),
            // No size: ignored.
            ("abc", None),
            ("", None),
            ("0", None),
            ("-5", None),
            ("1.5e5", Some(150_000)),
            ("1.25e0", None),
        ] {
            assert_eq!(window_size(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn the_auto_compact_window_and_the_hard_limit() {
        let dir = tempfile::tempdir().unwrap();
        let user = dir.path().join("settings.json");
        let local = dir.path().join("settings.local.json");
        let files = [user.clone(), local.clone()];
        let acw = env_of(&[("CLAUDE_CODE_AUTO_COMPACT_WINDOW", "150000")]);
        let s = resolve(&acw, &files, None);
        assert_eq!(s.compaction, Compaction::Default);
        assert_eq!(s.window_cap.as_ref().map(|c| c.tokens), Some(150_000));
        assert_eq!(s.point(200_000).0, 117_000);
        // From the settings, later files winning; "auto" clears it.
        std::fs::write(&user, r#"{"autoCompactWindow": 120000}"#).unwrap();
        let s = resolve(&env_of(&[]), &files, None);
        assert_eq!(s.point(200_000).0, 87_000);
        assert!(s.window_cap.unwrap().source.contains("settings.json"));
        std::fs::write(&local, r#"{"autoCompactWindow": "auto"}"#).unwrap();
        assert_eq!(resolve(&env_of(&[]), &files, None).window_cap, None);
        // The environment wins over the files.
        std::fs::write(&local, "{}").unwrap();
        assert_eq!(resolve(&acw, &files, None).point(200_000).0, 117_000);
        // The hard limit.
        let off = env_of(&[
            ("DISABLE_AUTO_COMPACT", "1"),
            ("CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE", "150000"),
        ]);
        let s = resolve(&off, &files, None);
        assert_eq!(s.compaction, Compaction::Off);
        assert_eq!(s.point(200_000).0, 150_000);
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
