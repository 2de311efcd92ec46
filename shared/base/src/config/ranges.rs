//! The range of a numeric key (its row in [`super::KEYS`]).

/// The documented range of a numeric key. Every value outside it is
/// refused with one line naming the key, so no later `Duration` or
/// allocation can overflow on a value that passed validation.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Smallest value allowed (inclusive) …
    pub min: f64,
    /// … or strictly greater than this when `min_exclusive`.
    pub min_exclusive: bool,
    /// Largest value allowed (inclusive).
    pub max: f64,
    /// 0 is also allowed and means "off" (below `min`).
    pub zero_is_off: bool,
}

pub(super) const fn range(min: f64, max: f64) -> Range {
    Range {
        min,
        min_exclusive: false,
        max,
        zero_is_off: false,
    }
}

impl Range {
    /// `Ok` when `value` is allowed, else the rule in words.
    pub fn check(&self, value: f64) -> std::result::Result<(), String> {
        let above_min = if self.min_exclusive {
            value > self.min
        } else {
            value >= self.min
        };
        let allowed = value.is_finite()
            && ((above_min && value <= self.max) || (self.zero_is_off && value == 0.0));
        if allowed {
            Ok(())
        } else {
            Err(self.describe())
        }
    }

    /// "must be between 10 and 3600" and the like (an error's words).
    pub fn describe(&self) -> String {
        let lower = if self.min_exclusive {
            format!("greater than {} and at most {}", self.min, self.max)
        } else {
            format!("between {} and {}", self.min, self.max)
        };
        if self.zero_is_off {
            format!("must be 0 (off) or {lower}")
        } else {
            format!("must be {lower}")
        }
    }

    /// "10 to 3600", "> 0 and ≤ 600", "0 or 500 to 1000000000": how the
    /// docs' tables say it, in `words`' language.
    pub fn words(&self, words: &Words) -> String {
        let (min, max) = (number(self.min), number(self.max));
        let span = if self.min_exclusive {
            format!("> {min} {} ≤ {max}", words.and)
        } else {
            format!("{min} {} {max}", words.to)
        };
        if self.zero_is_off {
            format!("0 {} {span}", words.or)
        } else {
            span
        }
    }
}

/// A bound as the docs write it: a large power of two as one (2⁴⁰).
fn number(x: f64) -> String {
    const SUPERSCRIPT: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    #[allow(clippy::cast_sign_loss)]
    let whole = x as u64;
    if x >= 1_048_576.0 && whole.is_power_of_two() {
        let exponent = whole.trailing_zeros().to_string();
        let sup: String = exponent
            .bytes()
            .map(|d| SUPERSCRIPT[usize::from(d - b'0')])
            .collect();
        format!("2{sup}")
    } else {
        x.to_string()
    }
}

/// How a range is said in one language.
pub struct Words {
    pub to: &'static str,
    pub and: &'static str,
    pub or: &'static str,
}

impl Words {
    pub(crate) const EN: Words = Words {
        to: "to",
        and: "and",
        or: "or",
    };
    #[cfg(test)]
    pub(crate) const ZH: Words = Words {
        to: "到",
        and: "且",
        or: "或",
    };
}
