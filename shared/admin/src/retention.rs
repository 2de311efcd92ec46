//! Claude Code's transcript retention against the lineage:
//! `cleanupPeriodDays` (settings; default 30, minimum 1) deletes a
//! transcript that has not changed for that long, and a session ktr
//! rebuilt from never changes again. `ktr doctor` says when the oldest
//! ancestor of the current session is already that old.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::settings::Json;
use ktr_base::config::Config;
use ktr_base::open::{Links, cap, read_capped};
use ktr_base::time::parse_rfc3339;
use ktr_pipeline::operation::Store;
use ktr_pipeline::recall::lineage;

/// Claude Code's default `cleanupPeriodDays`.
pub(crate) const DEFAULT_DAYS: u64 = 30;

/// What doctor reports.
#[derive(Debug, Clone, PartialEq)]
pub struct Retention {
    /// The setting in force, and the file that set it (None: the default).
    pub days: u64,
    pub set_in: Option<PathBuf>,
    /// The oldest ancestor of the current session and how long it has
    /// been unchanged, in days.
    pub oldest: Option<(String, u64)>,
    /// Ancestors with no copy at all.
    pub lost: Vec<String>,
}

impl Retention {
    /// Whether Claude Code deletes (or has deleted) an ancestor's transcript.
    pub(crate) fn at_risk(&self) -> bool {
        self.oldest
            .as_ref()
            .is_some_and(|(_, age)| *age >= self.days)
    }
}

/// The setting from `files` (later files win, as Claude Code reads them).
pub(crate) fn cleanup_days(files: &[PathBuf]) -> (u64, Option<PathBuf>) {
    let mut found = (DEFAULT_DAYS, None);
    for file in files {
        let Ok(Some(bytes)) = read_capped(file, cap::SETTINGS, Links::Follow) else {
            continue;
        };
        let days = Json::parse(&String::from_utf8_lossy(&bytes))
            .ok()
            .and_then(|j| match j.get("cleanupPeriodDays") {
                Some(Json::Number(n)) => n.as_u64(),
                _ => None,
            });
        if let Some(d) = days {
            found = (d.max(1), Some(file.clone()));
        }
    }
    found
}

/// The retention of the current session's lineage (the session the Claude
/// Code running this serves, else the newest transcript).
pub fn of(config: &Config, settings: &[PathBuf], now: SystemTime) -> Retention {
    let (days, set_in) = cleanup_days(settings);
    let mut r = Retention {
        days,
        set_in,
        oldest: None,
        lost: Vec::new(),
    };
    let Ok(current) = ktr_pipeline::binding::default_transcript(config) else {
        return r;
    };
    let session = current
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Ok(members) =
        lineage::lineage(&Store::at(&config.state_dir), &config.project_dir, &session)
    else {
        return r;
    };
    for m in members.iter().skip(1) {
        let since = unchanged_since(m.live.as_deref(), m.rebuilt_at.as_deref());
        let age = since
            .and_then(|t| now.duration_since(t).ok())
            .unwrap_or(Duration::ZERO);
        let days = age.as_secs() / 86_400;
        if r.oldest.as_ref().is_none_or(|(_, d)| days >= *d) {
            r.oldest = Some((m.session.clone(), days));
        }
        if !m.readable() {
            r.lost.push(m.session.clone());
        }
    }
    r
}

/// When a member last changed: its live transcript's mtime, else when it
/// was rebuilt.
fn unchanged_since(live: Option<&Path>, rebuilt_at: Option<&str>) -> Option<SystemTime> {
    live.and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .or_else(|| rebuilt_at.and_then(parse_rfc3339))
}
