//! RFC 3339 UTC timestamps (`2026-11-29T08:15:02.113Z`), written and parsed
//! without a calendar crate.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// A point in time as ktr writes it: RFC 3339 UTC (`2026-11-29T08:15:02.113Z`).
/// Validated when parsed *and* when deserialized, so an edited operation
/// file cannot make an unparseable time read as 1970.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Timestamp(String);

impl Timestamp {
    /// Now, with milliseconds.
    pub fn now() -> Timestamp {
        Timestamp(now_rfc3339())
    }

    /// `t`, with milliseconds.
    pub fn at(t: SystemTime) -> Timestamp {
        Timestamp(rfc3339(t))
    }

    /// A timestamp ktr could have written, else a usage error saying what
    /// was expected.
    pub fn parse(s: &str) -> Result<Timestamp> {
        match parse_rfc3339(s) {
            Some(_) => Ok(Timestamp(s.to_string())),
            None => Err(Error::usage(format!(
                "invalid timestamp {:?}: expected RFC 3339 UTC like 2026-11-29T08:15:02.113Z",
                s.chars().take(40).collect::<String>()
            ))),
        }
    }

    /// The time it names.
    pub fn time(&self) -> SystemTime {
        parse_rfc3339(&self.0).expect("a Timestamp is validated when made")
    }
}

impl Default for Timestamp {
    fn default() -> Timestamp {
        Timestamp::now()
    }
}

impl Deref for Timestamp {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(|e| serde::de::Error::custom(e.message))
    }
}

/// Now as RFC 3339 UTC with milliseconds, e.g. `2026-11-29T08:15:02.113Z`.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Format a time as RFC 3339 UTC with milliseconds.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, day) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

/// Parse what [`rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS[.fff]Z`).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || !s.ends_with('Z')
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<u64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let frac = &s[19..s.len() - 1];
    let millis = match frac.strip_prefix('.') {
        None if frac.is_empty() => 0,
        Some(digits) if !digits.is_empty() && digits.bytes().all(|c| c.is_ascii_digit()) => {
            format!("{:0<3}", &digits[..digits.len().min(3)])
                .parse()
                .ok()?
        }
        _ => return None,
    };
    let days = days_from_civil(y as i64, mo as u32, d as u32);
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + mi * 60 + sec;
    Some(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
}

// Howard Hinnant's civil calendar algorithms.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trips() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20.123Z");
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.123Z"), Some(t));
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00.000Z"
        );
        assert_eq!(
            parse_rfc3339("2000-02-29T00:00:00Z"),
            Some(UNIX_EPOCH + Duration::from_secs(951_782_400))
        );
        for bad in [
            "",
            "2023-11-14 22:13:20Z",
            "2023-13-01T00:00:00Z",
            "2023-11-14T22:13:20.Z",
            "2023-11-14T22:13:20+01:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
            assert!(serde_json::from_value::<Timestamp>(bad.into()).is_err());
        }
    }

    #[test]
    fn a_timestamp_reads_back_as_the_time_it_names() {
        let t = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        let stamp = Timestamp::at(t);
        assert_eq!(stamp.time(), t);
        let json = serde_json::to_string(&stamp).unwrap();
        assert_eq!(json, r#""2023-11-14T22:13:20.123Z""#);
        assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), stamp);
    }
}
