//! Text ktr itself wrote: stamps and the startup header.

/// Markers of text ktr itself wrote (stamps, startup header): such text is
/// carried as it is, never stripped or stamped again.
#[derive(Debug, Clone)]
pub struct Markers {
    pub stamp_prefix: String,
    pub stamp_suffix: String,
    pub header_prefix: String,
}

impl Markers {
    /// Split templates at `{timestamp}`.
    pub fn new(stamp_template: &str, header_template: &str) -> Markers {
        let (sp, ss) = stamp_template
            .split_once("{timestamp}")
            .unwrap_or((stamp_template, ""));
        let hp = header_template
            .split("{timestamp}")
            .next()
            .unwrap_or(header_template);
        Markers {
            stamp_prefix: sp.to_string(),
            stamp_suffix: ss.to_string(),
            header_prefix: hp.to_string(),
        }
    }
    /// Whether `text` starts with the startup header.
    pub(crate) fn is_header(&self, text: &str) -> bool {
        !self.header_prefix.trim().is_empty() && text.starts_with(&self.header_prefix)
    }

    /// Whether `text` already starts with a stamp or the startup header.
    pub(crate) fn carried_before(&self, text: &str) -> bool {
        let is_stamp = !self.stamp_prefix.is_empty()
            && text.strip_prefix(&self.stamp_prefix).is_some_and(|rest| {
                let head: String = rest.chars().take(64).collect();
                self.stamp_suffix.is_empty() || head.contains(&self.stamp_suffix)
            });
        is_stamp || self.is_header(text)
    }
}
