//! The typed view over the raw TOML table, producing one-line errors
//! that name the key (and a close known key for a typo).

use std::collections::BTreeMap;

use toml::Value;

use crate::error::{Error, Result};

use super::declared::{KEYS, Key, Type};
use super::error::ConfigError;
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
            if !KEYS.iter().any(|k| k.name == key) {
                let close = KEYS.iter().map(|k| k.name).find(|k| close(k, key));
                return Err(ConfigError::UnknownKey {
                    key: key.clone(),
                    close,
                }
                .into());
            }
        }
        Ok(())
    }

    pub(super) fn rule(key: &str, rule: &str) -> Error {
        ConfigError::Rule {
            key: key.to_string(),
            rule: rule.to_string(),
        }
        .into()
    }

    pub(super) fn wrong_type(key: &str, expected: &'static str, got: &Value) -> Error {
        ConfigError::WrongType {
            key: key.to_string(),
            expected,
            got: got.type_str(),
        }
        .into()
    }

    /// The value of `key` as written, else its declared default (`None`:
    /// a required or unset key that is not written).
    fn value(&self, key: &str) -> Option<Value> {
        self.table
            .get(key)
            .cloned()
            .or_else(|| Key::of(key).default_value())
    }

    /// Whether the config file sets `key` itself.
    pub(super) fn is_set(&self, key: &str) -> bool {
        self.table.contains_key(key)
    }

    /// A string key (empty when unset without a default).
    pub(super) fn string(&self, key: &str) -> Result<String> {
        match self.value(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(Self::wrong_type(key, "a string", &v)),
        }
    }

    /// A key of [`Type::OneOf`]: the word, one of the declared ones.
    pub(super) fn one_of(&self, key: &str) -> Result<&'static str> {
        let Type::OneOf(words) = Key::of(key).ty else {
            unreachable!("{key} is not declared as one of some words")
        };
        let value = self.string(key)?;
        words.iter().copied().find(|w| *w == value).ok_or_else(|| {
            let (last, rest) = words.split_last().unwrap_or((&"", &[]));
            Self::rule(
                key,
                &format!("must be {} or {last} (got {value:?})", rest.join(", ")),
            )
        })
    }

    pub(super) fn boolean(&self, key: &str) -> Result<bool> {
        match self.value(key) {
            Some(Value::Boolean(b)) => Ok(b),
            Some(v) => Err(Self::wrong_type(key, "true or false", &v)),
            None => unreachable!("{key} has no default"),
        }
    }

    /// The declared range of a numeric key.
    fn range(key: &str) -> Range {
        match Key::of(key).ty {
            Type::Whole(r) | Type::Number(r) => r,
            _ => unreachable!("{key} is not declared as a number"),
        }
    }

    /// A whole-number key, checked against its declared range.
    pub(super) fn integer(&self, key: &str) -> Result<u64> {
        let range = Self::range(key);
        let value = match self.value(key) {
            Some(Value::Integer(i)) => i,
            Some(v) => return Err(Self::wrong_type(key, "a whole number", &v)),
            None => unreachable!("{key} has no default"),
        };
        let value = u64::try_from(value).map_err(|_| Self::rule(key, &range.describe()))?;
        #[allow(clippy::cast_precision_loss)]
        range
            .check(value as f64)
            .map_err(|why| Self::rule(key, &why))?;
        Ok(value)
    }

    /// A whole percentage, 0 to 100 (its declared range).
    pub(super) fn percent(&self, key: &str) -> Result<u8> {
        let value = self.integer(key)?;
        u8::try_from(value).map_err(|_| Self::rule(key, &Self::range(key).describe()))
    }

    /// `context_window_tokens`: `"auto"` or a number of tokens (at least 10000).
    pub(super) fn window_size(&self) -> Result<WindowSetting> {
        let key = "context_window_tokens";
        match self.value(key) {
            Some(Value::String(s)) if s == "auto" => Ok(WindowSetting::Auto),
            Some(Value::Integer(i)) if i >= 10_000 => Ok(WindowSetting::Tokens(i.unsigned_abs())),
            Some(Value::Integer(_)) => Err(Self::rule(key, "must be \"auto\" or at least 10000")),
            Some(v) => Err(Self::wrong_type(key, "\"auto\" or a number of tokens", &v)),
            None => unreachable!("{key} has no default"),
        }
    }

    /// A number of seconds (or hours), checked against its declared range.
    pub(super) fn seconds(&self, key: &str) -> Result<f64> {
        let range = Self::range(key);
        let value = match self.value(key) {
            #[allow(clippy::cast_precision_loss)]
            Some(Value::Integer(i)) => i as f64,
            Some(Value::Float(f)) => f,
            Some(v) => return Err(Self::wrong_type(key, "a number of seconds", &v)),
            None => unreachable!("{key} has no default"),
        };
        range.check(value).map_err(|why| Self::rule(key, &why))?;
        Ok(value)
    }

    /// A regular expression, case-insensitive when declared so.
    pub(super) fn regex(&self, key: &'static str) -> Result<Pattern> {
        let Type::Pattern { ignore_case } = Key::of(key).ty else {
            unreachable!("{key} is not declared as a pattern")
        };
        Pattern::checked(key, self.string(key)?, ignore_case)
    }

    pub(super) fn string_map(&self, key: &str) -> Result<BTreeMap<String, String>> {
        match self.value(key) {
            None => Ok(BTreeMap::new()),
            Some(Value::Table(t)) => {
                let mut out = BTreeMap::new();
                for (k, v) in t {
                    let Value::String(s) = v else {
                        return Err(Self::wrong_type(&format!("{key}.{k}"), "a string", &v));
                    };
                    if k.is_empty() || k.contains('=') || k.contains('\0') || s.contains('\0') {
                        return Err(Self::rule(
                            &format!("{key}.{k}"),
                            "is not a usable environment variable",
                        ));
                    }
                    out.insert(k, s);
                }
                Ok(out)
            }
            Some(v) => Err(Self::wrong_type(key, "a table of strings", &v)),
        }
    }

    pub(super) fn resume_command(&self) -> Result<Vec<String>> {
        const KEY: &str = "resume_command";
        let argv = match self.value(KEY) {
            Some(Value::String(s)) => split_shell_words(&s).map_err(|e| Self::rule(KEY, &e))?,
            Some(Value::Array(items)) => {
                let mut argv = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(s) => argv.push(s),
                        v => return Err(Self::wrong_type(KEY, "an array of strings", &v)),
                    }
                }
                argv
            }
            Some(v) => return Err(Self::wrong_type(KEY, "an array of strings", &v)),
            None => unreachable!("{KEY} has no default"),
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
