//! What the window holds and what a rebuild would leave,
//! with every number's derivation.
//!
//! - used: the API's own count ([`super::usage`]), else an estimate
//!   (overhead + the formula estimate of the window's content);
//! - carried: the formula estimate of the conversation a rebuild carries,
//!   calibrated by this transcript's own usage where possible
//!   (`factor = (used − overhead) / window estimate`; the formula is
//!   CJK-aware and errs high, the factor brings it to what the API counts);
//! - after a rebuild: carried + the fixed overhead of a fresh window;
//! - Claude Code compacts a window at [`compaction_point`]: a rebuild
//!   whose result would not fit under it is refused.

use serde::{Deserialize, Serialize};

use super::size::Size;
use super::usage::Usage;

/// Claude Code 2.1.328 auto-compacts when the last reply's usage reaches
/// the window size minus this: its threshold is the window − min(the
/// model's max output, 20,000) − a 13,000-token summary buffer, compared
/// with the last reply's input + cache + output tokens plus a rough count
/// of what was added since. Measured with the next prompt after a reply
/// reporting N input tokens (10 output): 1M window (`claude-opus-5-5`)
/// 966,980 → sent, 967,000 → `PreCompact(auto)`; 200k window
/// (`claude-sonnet-4-6`, `claude-opus-4-6`) 166,950 → sent, 166,980 →
/// compacted. Models whose window Claude Code does not enforce
/// (`claude-haiku-4-5`, `claude-sonnet-4-5` offline: the footer shows "%
/// context used", not "until auto-compact") are not compacted before a
/// prompt at all (199,000 of 200k was sent): the API's "prompt is too
/// long" is their limit. This margin is the tighter, measured rule for both.
pub(crate) const COMPACTION_MARGIN: u64 = 33_000;

/// The fixed overhead of a fresh window when nothing better was measured:
/// system prompt + tools + per-start attachments, 13,770 tokens measured
/// on Claude Code 2.1.328 (no MCP servers, no CLAUDE.md), rounded up.
pub const DEFAULT_OVERHEAD: u64 = 14_000;

/// The calibration factor is kept within these bounds (a transcript whose
/// numbers fall outside is measuring something else).
const FACTOR_RANGE: (f64, f64) = (0.1, 2.0);

/// Where Claude Code compacts a window of `size` tokens (its default).
pub fn compaction_point(size: u64) -> u64 {
    size.saturating_sub(COMPACTION_MARGIN)
}

/// The part of the window Claude Code 2.1.328 takes off for the model's
/// reply before it applies `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`: min(max
/// output, 20,000); every model with an enforced window has ≥ 20,000.
pub(crate) const OUTPUT_RESERVE: u64 = 20_000;

/// With auto-compaction off, Claude Code 2.1.328 refuses to send a prompt
/// ("Context limit reached · /compact or /clear to continue · auto-compact
/// is off") once the last reply's usage reaches the window − min(max
/// output, 20,000) − 3,000: measured on a 1M window, 976,950 → sent,
/// 977,000 → refused (990,000 refused).
pub(crate) const HARD_LIMIT_MARGIN: u64 = 23_000;

/// How Claude Code compacts, as its setting says (the pipeline reads the
/// setting; the engine only does the arithmetic).
#[derive(Debug, Clone, PartialEq)]
pub enum Compaction {
    /// At [`compaction_point`].
    Default,
    /// `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE`: this percent (0 < p ≤ 100) of the
    /// window less [`OUTPUT_RESERVE`], never later than the default
    /// (measured on 2.1.328: 60 on a 1M window → 588,000; on 200k →
    /// 108,000).
    Percent(f64),
    /// Auto-compaction is off (`autoCompactEnabled: false`,
    /// `DISABLE_AUTO_COMPACT`, `DISABLE_COMPACT`): the window's hard limit
    /// ([`HARD_LIMIT_MARGIN`] below its size) is the point.
    Off,
}

/// The compaction setting and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionSetting {
    pub compaction: Compaction,
    /// `Claude Code's default`, `CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60`,
    /// `autoCompactEnabled false in ~/.claude/settings.json`, …
    pub source: String,
    /// The auto-compact window (`CLAUDE_CODE_AUTO_COMPACT_WINDOW`, else
    /// `autoCompactWindow` in the settings): Claude Code 2.1.328 computes
    /// its compaction point from min(window, this) instead of the window.
    /// It does not move the hard limit.
    pub window_cap: Option<Sourced>,
    /// `CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE`: the hard limit itself, in
    /// tokens, instead of window − [`HARD_LIMIT_MARGIN`].
    pub hard_limit: Option<Sourced>,
}

impl Default for CompactionSetting {
    fn default() -> Self {
        CompactionSetting {
            compaction: Compaction::Default,
            source: "Claude Code's default".into(),
            window_cap: None,
            hard_limit: None,
        }
    }
}

impl CompactionSetting {
    /// The point for a window of `size` tokens and how it was derived.
    pub fn point(&self, size: u64) -> (u64, String) {
        // What Claude Code computes the point from: the window, or the
        // auto-compact window when that is smaller.
        let (window, window_is) = match &self.window_cap {
            Some(cap) if cap.tokens < size => {
                (cap.tokens, format!("{} ({})", cap.tokens, cap.source))
            }
            Some(cap) => (
                size,
                format!("the window (≤ {}, {})", cap.tokens, cap.source),
            ),
            None => (size, "window".to_string()),
        };
        let default = compaction_point(window);
        let with_cap = |text: String| match &self.window_cap {
            Some(cap) => format!("{text}; auto-compact window {}", cap.source),
            None => text,
        };
        match self.compaction {
            Compaction::Default => (
                default,
                with_cap(format!(
                    "{window_is} − {COMPACTION_MARGIN} (Claude Code 2.1.328's default; {})",
                    self.source
                )),
            ),
            Compaction::Percent(p) => {
                let moved = (window.saturating_sub(OUTPUT_RESERVE) as f64 * p / 100.0).floor();
                let moved = to_u64(moved).min(default);
                (
                    moved,
                    with_cap(format!(
                        "{}: min({p} % of ({window_is} − {OUTPUT_RESERVE}), {window_is} − {COMPACTION_MARGIN})",
                        self.source
                    )),
                )
            }
            Compaction::Off => match &self.hard_limit {
                Some(limit) => (
                    limit.tokens,
                    format!(
                        "{}: no auto-compaction; the window's hard limit {} ({}; Claude Code refuses to send past it)",
                        self.source, limit.tokens, limit.source
                    ),
                ),
                None => (
                    size.saturating_sub(HARD_LIMIT_MARGIN),
                    format!(
                        "{}: no auto-compaction; the window's hard limit, window − {HARD_LIMIT_MARGIN} (Claude Code refuses to send past it)",
                        self.source
                    ),
                ),
            },
        }
    }

    /// The setting that moved the point, as a person would write it
    /// (`CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=60`, `autoCompactEnabled false in
    /// …`, `CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000`); None for Claude
    /// Code's default. An auto-compact window at or above the model's
    /// `size` moves nothing, nor does one when Claude Code does not
    /// auto-compact: neither is named.
    pub fn named(&self, size: u64) -> Option<String> {
        let cap = self
            .window_cap
            .as_ref()
            .filter(|c| c.tokens < size && self.compaction != Compaction::Off)
            .map(|c| c.source.clone());
        match (&self.compaction, cap) {
            (Compaction::Default, cap) => cap,
            (_, None) => Some(self.source.clone()),
            (_, Some(cap)) => Some(format!("{}, {cap}", self.source)),
        }
    }

    /// Whether Claude Code compacts on its own.
    pub fn auto(&self) -> bool {
        self.compaction != Compaction::Off
    }
}

/// A number of tokens and where it came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sourced {
    pub tokens: u64,
    pub source: String,
}

/// When advice is due (config `advise_at_percent`, `advise_min_free_percent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advise {
    /// 0 turns advice off.
    pub at_percent: u8,
    pub min_free_percent: u8,
}

/// Room the last advice band leaves before the compaction point: one
/// long reply.
pub(crate) const LAST_BAND_ROOM: u64 = 20_000;

impl Advise {
    /// The band a fill level is in, measured against Claude Code's
    /// compaction point `point` (not the window: on a 200k window Claude
    /// Code compacts at ≈ 167k): `at_percent`, then 80, then the last
    /// band — 90, or lower where 90 % would leave less than
    /// [`LAST_BAND_ROOM`] (88 on a 200k window) — those above
    /// `at_percent`; None below the first band or when off.
    pub fn band(self, percent_of_point: f64, point: u64) -> Option<u8> {
        if self.at_percent == 0 {
            return None;
        }
        let last = if point > LAST_BAND_ROOM {
            (100 * (point - LAST_BAND_ROOM) / point).min(90) as u8
        } else {
            self.at_percent
        };
        [self.at_percent, 80.min(last), last]
            .into_iter()
            .filter(|b| *b >= self.at_percent && f64::from(*b) <= percent_of_point)
            .max()
    }
}

/// Everything the account is computed from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The API's count for the last reply, if the tail had one.
    pub used: Option<Usage>,
    /// Why there is none (shown when falling back).
    pub missing: Option<String>,
    /// Formula estimate of what the current window holds (conversation and
    /// residue; Claude Code's per-start attachments are in the overhead).
    pub window_estimate: u64,
    /// Formula estimate of the conversation a rebuild carries.
    pub carried_estimate: u64,
    pub size: Size,
    pub overhead: Sourced,
    pub advise: Advise,
    /// Where Claude Code compacts (its setting).
    pub compaction: CompactionSetting,
}

/// Where the used tokens come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsedSource {
    /// The API's count for the last reply.
    Usage,
    /// No reply records usage: the formula's estimate.
    Estimate,
}

/// What `window` reports (`ktr dirty --json`, the MCP tools, the hooks).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Window {
    pub used_tokens: u64,
    /// `usage` (the API's count) or `estimate`.
    pub used_source: UsedSource,
    /// When the API counted it.
    pub used_at: Option<String>,
    pub used_percent: f64,
    pub size_tokens: u64,
    pub size_source: String,
    /// The size is assumed from the model id, not known.
    #[serde(default)]
    pub size_assumed: bool,
    pub carried_tokens: u64,
    pub carried_estimate_tokens: u64,
    /// Tokens the API counts per formula-estimated token.
    pub calibration: f64,
    pub calibration_source: String,
    pub overhead_tokens: u64,
    pub overhead_source: String,
    pub after_rebuild_tokens: u64,
    pub after_rebuild_percent: f64,
    pub compaction_point_tokens: u64,
    /// How the compaction point was derived (the setting Claude Code uses).
    #[serde(default)]
    pub compaction_point_source: String,
    /// The setting that moved the point from Claude Code's default, as a
    /// person writes it (`CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000`); None
    /// for the default.
    #[serde(default)]
    pub point_moved_by: Option<String>,
    /// False when Claude Code does not auto-compact: the point is then the
    /// window's hard limit.
    #[serde(default = "yes")]
    pub auto_compaction: bool,
    /// `used_tokens` as a share of `compaction_point_tokens`: what the
    /// advice bands measure.
    #[serde(default)]
    pub point_percent: f64,
    /// The most a rebuilt window may start at: `advise_at_percent` % of
    /// the compaction point (all of it with advice off). A rebuild that
    /// starts higher leaves no room — the next replies reach the point
    /// again — so it "does not fit": the plan refuses it, the guard lets
    /// Claude Code compact, the statusline shows no rebuild figure.
    #[serde(default)]
    pub rebuild_limit_tokens: u64,
    pub frees_percent: f64,
    /// Whether the fit under the compaction point was checked (only with
    /// the API's own count: uncalibrated estimates err high).
    pub fit_checked: bool,
    /// `rebuild`, `none` or `cannot_fit`.
    pub advice: String,
    /// The window begins after a compaction: the turns before its boundary,
    /// which Claude Code now holds only in its summary and a rebuild
    /// carries word for word (0 without a boundary, or when the turns it
    /// summarised are not in the file). Set by the caller: the plan's count
    /// for `ktr plan`/`dirty`, the hooks' running account for the hooks.
    #[serde(default)]
    pub summarised_turns: u64,
    /// Claude Code dropped context from this window without compacting
    /// (the newest such finding since the last boundary). Set by the
    /// hooks from their running account for the statusline; the reports
    /// carry the whole finding beside the window (`cleared`).
    #[serde(skip)]
    pub cleared: Option<super::cleared::Kind>,
    /// One line per derived number.
    pub derivation: Vec<String>,
}

impl Window {
    /// Whether the rebuilt window would leave room under the compaction
    /// point (starts at most at [`Window::rebuild_limit`]).
    pub fn fits(&self) -> bool {
        self.after_rebuild_tokens <= self.rebuild_limit()
    }

    /// The most a rebuilt window may start at (`rebuild_limit_tokens`; the
    /// compaction point itself for an account written before it existed).
    pub(crate) fn rebuild_limit(&self) -> u64 {
        if self.rebuild_limit_tokens == 0 {
            self.compaction_point_tokens
        } else {
            self.rebuild_limit_tokens
        }
    }

    /// A `carry_max_tokens` (formula units, what the cap counts) whose
    /// rebuild fits under the compaction point. Never more than the room
    /// itself: a formula that overestimates (calibration
    /// below 1) would otherwise suggest a cap larger than the window, which
    /// the next plan refuses again when the cap and the estimate count a
    /// little differently (the last turn is always kept).
    pub(crate) fn carry_cap_that_fits(&self) -> u64 {
        let room = self.rebuild_limit().saturating_sub(self.overhead_tokens);
        // Rounded down to a thousand so the suggestion is readable.
        (to_u64(room as f64 / self.calibration.max(1.0)) / 1000) * 1000
    }

    /// The advice band the window is in, when advice is due.
    pub fn band(&self, advise: Advise) -> Option<u8> {
        (self.advice == "rebuild")
            .then(|| advise.band(self.point_percent, self.compaction_point_tokens))
            .flatten()
    }
}

fn yes() -> bool {
    true
}

/// Derive the account.
pub fn derive(inp: &Inputs) -> Window {
    let overhead = inp.overhead.tokens;
    let mut derivation = Vec::new();
    let (used, used_source, used_at) = if let Some(u) = &inp.used {
        derivation.push(format!(
            "used {} = input + cache creation + cache read tokens of the last reply{}",
            u.tokens,
            u.at.as_deref()
                .map(|t| format!(" ({t})"))
                .unwrap_or_default()
        ));
        (u.tokens, UsedSource::Usage, u.at.clone())
    } else {
        let used = overhead + inp.window_estimate;
        derivation.push(format!(
            "used ≈ {used} = overhead {overhead} + window estimate {} ({})",
            inp.window_estimate,
            inp.missing.as_deref().unwrap_or("no usage recorded")
        ));
        (used, UsedSource::Estimate, None)
    };
    let (calibration, calibration_source) = calibrate(inp, used);
    derivation.push(format!(
        "calibration {calibration:.3}: {calibration_source}"
    ));
    let carried = to_u64(inp.carried_estimate as f64 * calibration);
    derivation.push(format!(
        "carried ≈ {carried} = conversation estimate {} × {calibration:.3}",
        inp.carried_estimate
    ));
    derivation.push(format!("overhead {overhead}: {}", inp.overhead.source));
    let after = carried + overhead;
    derivation.push(format!(
        "after a rebuild ≈ {after} = carried {carried} + overhead {overhead}"
    ));
    let size = inp.size.tokens.max(1);
    let (point, point_source) = inp.compaction.point(inp.size.tokens);
    derivation.push(if inp.compaction.auto() {
        format!(
            "Claude Code compacts at {point} = {point_source}; window {} ({})",
            inp.size.tokens, inp.size.source
        )
    } else {
        format!(
            "Claude Code does not compact: {point_source}; window {} ({})",
            inp.size.tokens, inp.size.source
        )
    });
    let frees = if used == 0 {
        0.0
    } else {
        percent(used.saturating_sub(after), used)
    };
    let used_percent = percent(used, size);
    let point_percent = percent(used, point.max(1));
    let limit_percent = match inp.advise.at_percent {
        0 => 100,
        p => u64::from(p.min(100)),
    };
    let rebuild_limit = point * limit_percent / 100;
    derivation.push(format!(
        "a rebuild leaves room when it starts at ≤ {rebuild_limit} = {limit_percent} % of the point (advise_at_percent)"
    ));
    let mut window = Window {
        used_tokens: used,
        used_source,
        used_at,
        used_percent,
        size_tokens: inp.size.tokens,
        size_source: inp.size.source.clone(),
        size_assumed: inp.size.assumed,
        carried_tokens: carried,
        carried_estimate_tokens: inp.carried_estimate,
        calibration,
        calibration_source,
        overhead_tokens: overhead,
        overhead_source: inp.overhead.source.clone(),
        after_rebuild_tokens: after,
        after_rebuild_percent: percent(after, size),
        compaction_point_tokens: point,
        compaction_point_source: point_source,
        point_moved_by: inp.compaction.named(size),
        auto_compaction: inp.compaction.auto(),
        point_percent,
        rebuild_limit_tokens: rebuild_limit,
        frees_percent: frees,
        fit_checked: inp.used.is_some(),
        advice: "none".to_string(),
        derivation,
        summarised_turns: 0,
        cleared: None,
    };
    window.advice = if window.fit_checked && !window.fits() {
        "cannot_fit"
    } else if inp.advise.band(point_percent, point).is_some()
        && frees >= f64::from(inp.advise.min_free_percent)
    {
        "rebuild"
    } else {
        "none"
    }
    .to_string();
    window
}

fn calibrate(inp: &Inputs, used: u64) -> (f64, String) {
    let uncalibrated = |why: &str| {
        (
            1.0,
            format!("formula estimate as is (CJK ×1.1, others ÷1.5 chars; errs high): {why}"),
        )
    };
    if inp.used.is_none() {
        return uncalibrated("no usage to calibrate with");
    }
    let content = used.saturating_sub(inp.overhead.tokens);
    if inp.window_estimate == 0 || content == 0 {
        return uncalibrated("nothing in the window to calibrate with");
    }
    let factor = content as f64 / inp.window_estimate as f64;
    if !(FACTOR_RANGE.0..=FACTOR_RANGE.1).contains(&factor) {
        return uncalibrated(&format!("measured factor {factor:.3} is implausible"));
    }
    (
        (factor * 1000.0).round() / 1000.0,
        format!(
            "(used {used} − overhead {}) / window estimate {}",
            inp.overhead.tokens, inp.window_estimate
        ),
    )
}

/// `part / whole` in percent, one decimal.
pub fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        return 0.0;
    }
    (part as f64 * 1000.0 / whole as f64).round() / 10.0
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_u64(x: f64) -> u64 {
    if x.is_finite() && x > 0.0 {
        x.round() as u64
    } else {
        0
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Inputs of a 1M window with 12k overhead (also used by the window's own tests).
    pub(crate) fn inputs(used: Option<u64>, window_estimate: u64, carried_estimate: u64) -> Inputs {
        Inputs {
            used: used.map(|tokens| Usage {
                tokens,
                at: Some("2026-11-30T14:02:00Z".into()),
                model: None,
            }),
            missing: None,
            window_estimate,
            carried_estimate,
            size: Size {
                tokens: 1_000_000,
                source: "test".into(),
                assumed: false,
            },
            overhead: Sourced {
                tokens: 12_000,
                source: "test".into(),
            },
            advise: Advise {
                at_percent: 70,
                min_free_percent: 50,
            },
            compaction: CompactionSetting::default(),
        }
    }

    #[test]
    fn after_rebuild_is_calibrated_carried_plus_overhead() {
        // 612k used: 600k of content estimated at 1.2M formula tokens → factor 0.5.
        let w = derive(&inputs(Some(612_000), 1_200_000, 58_000));
        assert_eq!(w.used_source, UsedSource::Usage);
        assert!((w.calibration - 0.5).abs() < 1e-9);
        assert_eq!(w.carried_tokens, 29_000);
        assert_eq!(w.after_rebuild_tokens, 41_000);
        assert!((w.frees_percent - 93.3).abs() < 1e-9, "{}", w.frees_percent);
        assert!((w.used_percent - 61.2).abs() < 1e-9);
        assert_eq!(w.advice, "none", "61 % is below the first band");
        assert!(
            w.derivation
                .iter()
                .any(|d| d.contains("41000 = carried 29000 + overhead 12000"))
        );
    }

    #[test]
    fn advice_bands_and_min_free() {
        let w = derive(&inputs(Some(780_000), 1_536_000, 58_000));
        assert_eq!(w.advice, "rebuild");
        let advise = Advise {
            at_percent: 70,
            min_free_percent: 50,
        };
        // 780k of a 1M window is 81 % of its compaction point (967k).
        assert_eq!(w.compaction_point_tokens, 967_000);
        assert!((w.point_percent - 80.7).abs() < 1e-9, "{}", w.point_percent);
        assert_eq!(w.band(advise), Some(80));
        let (big, small) = (967_000, 167_000);
        assert_eq!(advise.band(81.0, big), Some(80));
        assert_eq!(advise.band(99.9, big), Some(90));
        assert_eq!(advise.band(69.9, big), None);
        // On a 200k window the last band leaves one long reply (20k): 88 %.
        assert_eq!(advise.band(87.9, small), Some(80));
        assert_eq!(advise.band(88.0, small), Some(88));
        assert_eq!(advise.band(99.0, small), Some(88));
        assert!(small - small * 88 / 100 >= LAST_BAND_ROOM);
        assert_eq!(
            Advise {
                at_percent: 85,
                ..advise
            }
            .band(88.0, big),
            Some(85)
        );
        assert_eq!(
            Advise {
                at_percent: 0,
                ..advise
            }
            .band(99.0, big),
            None
        );
        // Mostly conversation: a rebuild would not free half → no advice.
        let w = derive(&inputs(Some(780_000), 1_536_000, 1_000_000));
        assert!(w.fits());
        assert_eq!(w.advice, "none");
    }

    #[test]
    fn right_after_a_rebuild_nothing_is_freed() {
        // The window is the carried conversation plus the overhead.
        let w = derive(&inputs(Some(212_000), 400_000, 400_000));
        assert_eq!(w.after_rebuild_tokens, 212_000);
        assert!(w.frees_percent.abs() < 1e-9);
        assert_eq!(w.advice, "none");
    }

    #[test]
    fn the_point_follows_the_setting() {
        let set = |compaction| CompactionSetting {
            compaction,
            source: "test".into(),
            ..CompactionSetting::default()
        };
        // Measured on 2.1.328: 60 % of (window − 20,000).
        assert_eq!(set(Compaction::Percent(60.0)).point(1_000_000).0, 588_000);
        assert_eq!(set(Compaction::Percent(60.0)).point(200_000).0, 108_000);
        // Never later than the default.
        assert_eq!(set(Compaction::Percent(99.0)).point(1_000_000).0, 967_000);
        assert_eq!(set(Compaction::Default).point(200_000).0, 167_000);
        // Off: the hard limit, and the account says so.
        let (point, source) = set(Compaction::Off).point(1_000_000);
        assert_eq!(point, 977_000);
        assert!(source.contains("no auto-compaction"), "{source}");
        let mut inp = inputs(Some(900_000), 1_000_000, 20_000);
        inp.compaction = set(Compaction::Off);
        let w = derive(&inp);
        assert!(!w.auto_compaction);
        assert_eq!(w.compaction_point_tokens, 977_000);
        assert!(
            w.derivation
                .iter()
                .any(|d| d.starts_with("Claude Code does not compact"))
        );
        // Refused past the hard limit, and the refusal names it.
        let mut inp = inputs(Some(990_000), 1_956_000, 1_950_000);
        inp.compaction = set(Compaction::Off);
        let refusal = super::super::refusal(&derive(&inp)).unwrap();
        assert!(
            refusal.contains("over 683900 for the window's hard limit 977000"),
            "{refusal}"
        );
    }

    #[test]
    fn the_auto_compact_window_moves_the_point_but_not_the_hard_limit() {
        let capped = |compaction, tokens| CompactionSetting {
            compaction,
            source: "test".into(),
            window_cap: Some(Sourced {
                tokens,
                source: format!("CLAUDE_CODE_AUTO_COMPACT_WINDOW={tokens}"),
            }),
            hard_limit: None,
        };
        // Measured on 2.1.328 (200k window): 150,000 → compacted after a
        // reply at 118,570; 100,000 → after 70,000: min(window, value) − 33,000.
        assert_eq!(
            capped(Compaction::Default, 150_000).point(200_000).0,
            117_000
        );
        assert_eq!(
            capped(Compaction::Default, 100_000).point(200_000).0,
            67_000
        );
        let (point, source) = capped(Compaction::Default, 150_000).point(200_000);
        assert_eq!(point, 117_000);
        assert!(
            source.contains("CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000"),
            "{source}"
        );
        // Above the window it changes nothing.
        assert_eq!(
            capped(Compaction::Default, 400_000).point(200_000).0,
            167_000
        );
        // With the percent override: p % of (min(window, value) − 20,000).
        assert_eq!(
            capped(Compaction::Percent(60.0), 400_000)
                .point(1_000_000)
                .0,
            228_000
        );
        // Off: the hard limit is the model's window's.
        assert_eq!(capped(Compaction::Off, 150_000).point(200_000).0, 177_000);
        let mut limited = capped(Compaction::Off, 150_000);
        limited.hard_limit = Some(Sourced {
            tokens: 120_000,
            source: "CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE=120000".into(),
        });
        assert_eq!(limited.point(200_000).0, 120_000);
        assert_eq!(
            capped(Compaction::Default, 150_000)
                .named(200_000)
                .as_deref(),
            Some("CLAUDE_CODE_AUTO_COMPACT_WINDOW=150000")
        );
        // Above the window, or with auto-compaction off, it moves nothing.
        assert_eq!(capped(Compaction::Default, 300_000).named(200_000), None);
        assert_eq!(
            capped(Compaction::Default, 300_000).point(200_000).0,
            167_000
        );
        assert_eq!(
            capped(Compaction::Off, 150_000).named(200_000).as_deref(),
            Some("test")
        );
        assert_eq!(CompactionSetting::default().named(200_000), None);
    }

    #[test]
    fn a_rebuild_that_cannot_fit_names_a_cap() {
        let w = derive(&inputs(Some(990_000), 1_956_000, 1_950_000));
        assert_eq!(w.advice, "cannot_fit");
        assert!(!w.fits());
        // The room is 70 % of 967,000 − 12,000 = 664,900; the formula
        // counts twice what the API does (calibration 0.5), but the cap
        // suggested is never more than the room: never more than the window.
        assert_eq!(w.compaction_point_tokens, 967_000);
        assert_eq!(w.rebuild_limit(), 676_900);
        assert_eq!(w.carry_cap_that_fits(), 664_000);
        assert!(w.carry_cap_that_fits() <= w.size_tokens);
    }

    #[test]
    fn a_rebuild_that_leaves_no_room_does_not_fit() {
        // 200k window: the point is 167,000, a rebuild must start at most at
        // 70 % of it (116,900). Planned at 166,647 it would reach the point
        // again with the next reply.
        let mut inp = inputs(Some(190_000), 360_000, 310_000);
        inp.size = Size {
            tokens: 200_000,
            source: "test".into(),
            assumed: false,
        };
        let w = derive(&inp);
        assert_eq!(w.compaction_point_tokens, 167_000);
        assert_eq!(w.rebuild_limit(), 116_900);
        assert!(w.after_rebuild_tokens < w.compaction_point_tokens, "{w:?}");
        assert!(w.after_rebuild_tokens > w.rebuild_limit(), "{w:?}");
        assert!(!w.fits());
        assert_eq!(w.advice, "cannot_fit");
        let why = super::super::refusal(&w).unwrap();
        assert!(why.contains("would leave no room"), "{why}");
        // Advice off: the point itself is the limit.
        inp.advise.at_percent = 0;
        assert!(derive(&inp).fits());
    }

    #[test]
    fn without_usage_the_estimate_is_used_and_said() {
        let mut inp = inputs(None, 50_000, 30_000);
        inp.missing = Some("no reply records usage".into());
        let w = derive(&inp);
        assert_eq!(w.used_source, UsedSource::Estimate);
        assert_eq!(w.used_tokens, 62_000);
        assert!((w.calibration - 1.0).abs() < 1e-9);
        assert_eq!(w.after_rebuild_tokens, 42_000);
        assert!(!w.fit_checked);
        assert!(w.derivation[0].contains("no reply records usage"));
        // Implausible factors are not used.
        let w = derive(&inputs(Some(20_000), 1_000_000, 10));
        assert!((w.calibration - 1.0).abs() < 1e-9);
        assert!(w.calibration_source.contains("implausible"));
    }
}
