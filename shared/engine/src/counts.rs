//! Characters counted for the token estimate (SPEC §6).

/// The characters of a text, counted the way the token estimate needs
/// (SPEC §6), so that estimates of joined texts need no text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    pub cjk: u64,
    pub other: u64,
}

impl Counts {
    /// Count `text`.
    pub fn of(text: &str) -> Counts {
        let mut c = Counts::default();
        for ch in text.chars() {
            let u = ch as u32;
            let is_cjk = matches!(u,
                0x3000..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF);
            if is_cjk {
                c.cjk += 1;
            } else {
                c.other += 1;
            }
        }
        c
    }
    /// Token estimate (SPEC §6): CJK code points × 1.1 + others ÷ 1.5, truncated.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    pub fn tokens(self) -> u64 {
        (self.cjk as f64 * 1.1 + self.other as f64 / 1.5) as u64
    }
    /// Characters counted.
    pub fn chars(self) -> u64 {
        self.cjk + self.other
    }
}

impl std::ops::Add for Counts {
    type Output = Counts;
    fn add(self, o: Counts) -> Counts {
        Counts {
            cjk: self.cjk + o.cjk,
            other: self.other + o.other,
        }
    }
}
