//! Text shown to a person: data from outside (a model name, a folder, a
//! reason someone typed, a transcript's words) may hold terminal escape
//! sequences or bidirectional overrides. Every human output goes through
//! [`printable`].

/// `text` with every control character except newline and tab — C0, DEL,
/// C1 (ESC starts every terminal escape sequence) — and the bidirectional
/// overrides and isolates replaced by `?`. Borrowed when there is none.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(unsafe_char) {
        text.chars()
            .map(|c| if unsafe_char(c) { '?' } else { c })
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_overrides_never_reach_the_terminal() {
        assert_eq!(printable("Opus 中文\tx\n"), "Opus 中文\tx\n");
        assert!(matches!(printable("plain"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(
            printable("\u{1b}]0;pwned\u{7}\u{1b}[2Jmodel\r\u{9b}31m\u{7f}"),
            "?]0;pwned??[2Jmodel??31m?"
        );
        assert_eq!(printable("a\u{202e}fdp.exe"), "a?fdp.exe");
    }
}
