//! RFC 3339 UTC timestamps (`2026-11-29T08:15:02.113Z`), written and parsed
//! by the `humantime` crate.

use std::fmt;
use std::ops::Deref;
use std::time::{Duration, SystemTime};

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

/// Format a time as RFC 3339 UTC with milliseconds (a time before 1970 as
/// 1970).
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t.max(SystemTime::UNIX_EPOCH)).to_string()
}

/// Parse what [`rfc3339`] writes (`YYYY-MM-DDTHH:MM:SS[.fff…]Z`, UTC
/// only: not the `+00:00` or the empty fraction `humantime` also takes), to
/// the millisecond.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    if !s.ends_with('Z') || s.ends_with(".Z") {
        return None;
    }
    let t = humantime::parse_rfc3339(s).ok()?;
    let since = t.duration_since(SystemTime::UNIX_EPOCH).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(since.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

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
            "2023-11-14T22:13:20+00:00",
            "1969-12-31T23:59:59Z",
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
