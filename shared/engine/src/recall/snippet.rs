//! A hit's snippet: at most [`MAX_CHARS`] characters of the text around
//! the match, on one line, the match between `⟦` and `⟧`.

/// The longest snippet, in characters (marks included).
pub const MAX_CHARS: usize = 300;
const BEFORE: usize = 100;
const MATCH_MAX: usize = 120;

/// The snippet of `text` around the match `start..end` (byte offsets).
pub fn around(text: &str, start: usize, end: usize) -> String {
    let before: Vec<char> = text[..start].chars().rev().take(BEFORE + 1).collect();
    let cut_before = before.len() > BEFORE;
    let matched: Vec<char> = text[start..end].chars().collect();
    let shown = matched.len().min(MATCH_MAX);
    let used = before.len().min(BEFORE) + shown + 2 + 2;
    let after_room = MAX_CHARS.saturating_sub(used);
    let mut after: Vec<char> = text[end..].chars().take(after_room + 1).collect();
    let cut_after = after.len() > after_room;
    after.truncate(after_room.saturating_sub(usize::from(cut_after)));
    let mut out = String::new();
    if cut_before {
        out.push('…');
    }
    out.extend(
        before
            .iter()
            .take(BEFORE - usize::from(cut_before))
            .rev()
            .map(|&c| flat(c)),
    );
    out.push('⟦');
    out.extend(matched[..shown].iter().map(|&c| flat(c)));
    if shown < matched.len() {
        out.push('…');
    }
    out.push('⟧');
    out.extend(after.iter().map(|&c| flat(c)));
    if cut_after {
        out.push('…');
    }
    out
}

/// Line breaks and other control characters as a space: one line.
fn flat(c: char) -> char {
    if c.is_control() {
        ' '
    } else {
        super::record::visible(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_match_is_marked_and_the_snippet_stays_short() {
        let text = format!("{}needle\n{}", "前".repeat(500), "后".repeat(500));
        let start = text.find("needle").unwrap();
        let s = around(&text, start, start + 6);
        assert!(s.contains("⟦needle⟧ 后"), "{s}");
        assert!(s.starts_with('…') && s.ends_with('…'));
        assert!(s.chars().count() <= MAX_CHARS, "{}", s.chars().count());
        assert_eq!(around("a needle", 2, 8), "a ⟦needle⟧");
    }
}
