//! A regex matched over a JSON string's raw content (the bytes between its
//! quotes) instead of its decoded text. A raw match that overlaps no
//! escape is the same bytes in the decoded text, so it is a match there
//! too — unless the regex looks at what is around a match (`^`, `$`,
//! `\b`…), when no escape may lie beside it either. Matched as bytes: no
//! string is checked as UTF-8 first (the literal prefilter does not check
//! either; JSON as Claude Code writes it is UTF-8).

use regex::bytes::{Regex, RegexBuilder};

/// The longest JSON escape (`\uXXXX`), in bytes.
const ESCAPE_MAX: usize = 6;

#[derive(Debug)]
pub(crate) struct RawRegex {
    regex: Regex,
    /// Whether the regex asserts anything about a match's surroundings.
    looks_around: bool,
}

impl RawRegex {
    /// `pattern` over raw bytes (`None` if it does not compile so; the
    /// caller's own regex has said whether the pattern is valid).
    pub(crate) fn new(pattern: &str, size_limit: usize) -> Option<RawRegex> {
        let hir = regex_syntax::Parser::new().parse(pattern).ok()?;
        let regex = RegexBuilder::new(pattern)
            .size_limit(size_limit)
            .dfa_size_limit(size_limit)
            .build()
            .ok()?;
        Some(RawRegex {
            regex,
            looks_around: !hir.properties().look_set().is_empty(),
        })
    }

    /// Whether the raw string holds a (non-empty) match that is surely one
    /// in its decoded text. `false` says nothing when `raw` holds escapes.
    pub(crate) fn clean_match(&self, raw: &[u8]) -> bool {
        let mut found = self.regex.find_iter(raw).filter(|m| !m.is_empty());
        if memchr::memchr(b'\\', raw).is_none() {
            return found.next().is_some();
        }
        found.any(|m| {
            if self.looks_around {
                // No escape in the match or beside it.
                let around =
                    &raw[m.start().saturating_sub(ESCAPE_MAX)..(m.end() + 1).min(raw.len())];
                memchr::memchr(b'\\', around).is_none()
            } else {
                !overlaps_escape(raw, m.start(), m.end())
            }
        })
    }
}

/// Whether an escape of `raw` (a JSON string's content) overlaps
/// `start..end`: one begins in it, or one begun before reaches into it.
fn overlaps_escape(raw: &[u8], start: usize, end: usize) -> bool {
    if memchr::memchr(b'\\', &raw[start..end]).is_some() {
        return true;
    }
    (start.saturating_sub(ESCAPE_MAX - 1)..start).any(|b| {
        let len = if raw.get(b + 1) == Some(&b'u') {
            ESCAPE_MAX
        } else {
            2
        };
        raw[b] == b'\\' && !escaped(raw, b) && b + len > start
    })
}

/// Whether the byte at `at` is escaped (an odd run of backslashes before it).
pub(crate) fn escaped(raw: &[u8], at: usize) -> bool {
    raw[..at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_beside_an_escape_is_clean_unless_the_regex_looks_around() {
        let re = RawRegex::new("timeout (retry|queue)", 1 << 20).unwrap();
        assert!(re.clean_match(br"a\ntimeout retry\n"));
        assert!(re.clean_match(br"\u65e5timeout queue"));
        assert!(!re.clean_match(br"timeout\nretry"));
        let word = RawRegex::new(r"\w+retry", 1 << 20).unwrap();
        assert!(!word.clean_match(br"\nretry"), "it starts inside \\n");
        assert!(
            !word.clean_match(br"\u0041retry"),
            "it starts inside \\u0041"
        );
        assert!(
            word.clean_match(br"\\nretry"),
            "the n follows an escaped backslash"
        );
        let bounded = RawRegex::new(r"\bretry", 1 << 20).unwrap();
        assert!(!bounded.clean_match(br"x\n retry"));
        assert!(bounded.clean_match(br"x retry"));
    }
}
