//! The typed view over the raw TOML table, producing one-line errors
//! that name the key (and a close known key for a typo).

use std::collections::BTreeMap;

use toml::Value;

use crate::error::{Error, Result};

use super::KEYS;
use super::paths::split_shell_words;
use super::pattern::Pattern;
use super::ranges::Range;
use super::values::WindowSetting;

/// The typed view over the raw TOML table, producing one-line errors.
pub(super) struct Keys {
    pub(super) table: toml::Table,
}

impl Keys {
    pub(super) fn reject_unknown(&self) -> Result<()> {
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

    pub(super) fn rule(key: &str, rule: &str) -> Error {
        Error::config(format!("{key} {rule}"))
    }

    pub(super) fn wrong_type(key: &str, expected: &str, got: &Value) -> Error {
        Error::config(format!("{key} must be {expected}, not {}", got.type_str()))
    }

    pub(super) fn string(&self, key: &str, default: &str) -> Result<String> {
        match self.table.get(key) {
            None => Ok(default.to_string()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(v) => Err(Self::wrong_type(key, "a string", v)),
        }
    }

    pub(super) fn boolean(&self, key: &str, default: bool) -> Result<bool> {
        match self.table.get(key) {
            None => Ok(default),
            Some(Value::Boolean(b)) => Ok(*b),
            Some(v) => Err(Self::wrong_type(key, "true or false", v)),
        }
    }

    /// A whole-number key, checked against its row in [`RANGES`].
    pub(super) fn integer(&self, key: &str) -> Result<u64> {
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
    pub(super) fn percent(&self, key: &str) -> Result<u8> {
        let value = self.integer(key)?;
        u8::try_from(value).map_err(|_| Self::rule(key, &Range::of(key).describe()))
    }

    /// `context_window_tokens`: `"auto"` or a number of tokens (at least 10000).
    pub(super) fn window_size(&self) -> Result<WindowSetting> {
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
    pub(super) fn seconds(&self, key: &str) -> Result<f64> {
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

    pub(super) fn regex(
        &self,
        key: &'static str,
        default: &str,
        ignore_case: bool,
    ) -> Result<Pattern> {
        Pattern::checked(key, self.string(key, default)?, ignore_case)
    }

    pub(super) fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>> {
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

    pub(super) fn resume_command(&self) -> Result<Vec<String>> {
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
pub(super) fn close(a: &str, b: &str) -> bool {
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
