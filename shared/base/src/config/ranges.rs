//! The numeric keys: one table of names, defaults and ranges.

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

pub(super) const fn range(key: &'static str, default: f64, min: f64, max: f64) -> Range {
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
    pub(super) fn of(key: &str) -> Range {
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
