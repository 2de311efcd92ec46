//! A regex setting, checked at load and compiled on first use.

use regex::Regex;

use crate::error::Result;

use super::error::ConfigError;

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
    pub(super) fn checked(key: &'static str, source: String, ignore_case: bool) -> Result<Pattern> {
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
                crate::Error::from(ConfigError::Rule {
                    key: key.to_string(),
                    rule: format!("is not a valid regular expression: {first}"),
                })
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
