//! How large the window is: config `context_window_tokens`,
//! else what the statusline last reported for this session, else the
//! model id. The source always travels with the number.

use serde::{Deserialize, Serialize};

/// The default window of models not known to have a larger one.
pub(crate) const DEFAULT_TOKENS: u64 = 200_000;
/// The 1M window (`[1m]` models, the models below).
pub(crate) const ONE_MILLION: u64 = 1_000_000;
/// Model ids measured with a 1M window: Claude Code 2.1.328 (offline,
/// `--model ID`) reported `context_window_size: 1000000` for them in the
/// statusline, and 200000 for `claude-sonnet-4-6`, `claude-opus-4-6`,
/// `claude-opus-4-5`, `claude-sonnet-4-5`, `claude-sonnet-4-0` and
/// `claude-haiku-4-5`.
const KNOWN_1M: &[&str] = &[
    "claude-opus-5-5",
    "claude-opus-5",
    "claude-sonnet-5-5",
    "claude-sonnet-5",
    "claude-haiku-5-5",
    "claude-fable-5-2",
    "claude-fable-5-1",
    "claude-fable-5",
    "claude-mythos-5-2",
    "claude-mythos-5",
    "claude-opus-4-8",
    "claude-opus-4-7",
    "claude-opus-4-1",
];

pub use ktr_base::config::WindowSetting;

/// A window size and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    pub tokens: u64,
    pub source: String,
    /// Nothing said the size: it is assumed from the model id (or its absence).
    #[serde(default)]
    pub assumed: bool,
}

/// What `ktr-statusline` remembers about a session (the pipeline keeps it
/// in its window caches, `window/<session>.json` in the state dir).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remembered {
    pub context_window_size: u64,
    #[serde(default)]
    pub model_id: Option<String>,
    /// When it was first reported with this size (RFC 3339).
    pub at: String,
}

/// Resolve the size for a session.
pub fn resolve(
    setting: WindowSetting,
    remembered: Option<&Remembered>,
    model: Option<&str>,
) -> Size {
    if let WindowSetting::Tokens(tokens) = setting {
        return Size {
            tokens,
            source: "config context_window_tokens".into(),
            assumed: false,
        };
    }
    if let Some(r) = remembered {
        return Size {
            tokens: r.context_window_size,
            source: format!("reported by the statusline {}", r.at),
            assumed: false,
        };
    }
    from_model(model)
}

/// The size a model id implies.
pub fn from_model(model: Option<&str>) -> Size {
    match model {
        Some(m) if m.to_ascii_lowercase().ends_with("[1m]") || KNOWN_1M.contains(&m) => Size {
            tokens: ONE_MILLION,
            source: format!("model {m} (known 1M window)"),
            assumed: false,
        },
        Some(m) => Size {
            tokens: DEFAULT_TOKENS,
            source: format!("model {m} (not known to have 1M; assumed 200k)"),
            assumed: true,
        },
        None => Size {
            tokens: DEFAULT_TOKENS,
            source: "no model seen yet (assumed 200k)".into(),
            assumed: true,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_then_statusline_then_model() {
        let r = Remembered {
            context_window_size: 500_000,
            model_id: None,
            at: "2026-11-30T04:00:00Z".into(),
        };
        let fixed = resolve(
            WindowSetting::Tokens(300_000),
            Some(&r),
            Some("claude-opus-5-5"),
        );
        assert_eq!(
            (fixed.tokens, fixed.source.as_str()),
            (300_000, "config context_window_tokens")
        );
        let told = resolve(WindowSetting::Auto, Some(&r), Some("claude-opus-5-5"));
        assert_eq!(told.tokens, 500_000);
        assert!(told.source.contains("statusline"));
        assert_eq!(
            resolve(WindowSetting::Auto, None, Some("claude-opus-5-5")).tokens,
            ONE_MILLION
        );
        assert_eq!(
            resolve(WindowSetting::Auto, None, Some("claude-x[1M]")).tokens,
            ONE_MILLION
        );
        let other = resolve(WindowSetting::Auto, None, Some("claude-haiku-4-5"));
        assert_eq!(other.tokens, DEFAULT_TOKENS);
        assert!(other.source.contains("claude-haiku-4-5"));
        // Only a size nothing said is assumed.
        assert!(other.assumed && from_model(None).assumed);
        assert!(!told.assumed && !fixed.assumed);
        assert!(!resolve(WindowSetting::Auto, None, Some("claude-sonnet-5")).assumed);
        assert_eq!(
            resolve(WindowSetting::Auto, None, Some("claude-sonnet-5")).tokens,
            ONE_MILLION
        );
        assert_eq!(
            resolve(WindowSetting::Auto, None, None).tokens,
            DEFAULT_TOKENS
        );
    }
}
