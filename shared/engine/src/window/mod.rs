//! Window accounting: how full Claude Code's context window is
//! (the API's own count, from the transcript's tail), how large it is, and
//! what a rebuild would leave, every number with its derivation.
//!
//! Read-only: it reads transcripts and writes nothing. What is remembered
//! between calls (what the statusline reported, the measured overhead, the
//! hooks' running account) is kept by the pipeline's window caches
//! (`ktr_pipeline::window_cache`), which hand it in.

pub mod account;
pub mod cleared;
pub mod overhead;
pub mod running;
pub mod size;
pub mod usage;

pub use account::{
    Advise, Compaction, CompactionSetting, Inputs, Sourced, UsedSource, Window, compaction_point,
    derive, percent,
};

use crate::ledger::Tally;

/// Formula estimate of what a window's tally holds: the conversation's own
/// estimate (CJK-aware) plus residue at the formula's rate for ASCII (raw
/// JSON is mostly ASCII). Claude Code's per-start attachments are part of
/// the overhead, not of this, and residue it never sends
/// ([`Tally::unsent_bytes`]) is left out: counted, it made a window of
/// tool outputs Claude Code saved to files look ten times fuller than the
/// API measured, the calibration fell outside its bounds, and the guard
/// refused a rebuild that fitted.
pub fn window_estimate(t: &Tally) -> u64 {
    t.conversation_estimate + t.total().saturating_sub(t.unsent_bytes) * 2 / 3
}

/// Why a plan whose rebuilt window would not fit is refused (None when it
/// fits, or the fit could not be checked).
pub fn refusal(w: &Window) -> Option<String> {
    if !w.fit_checked || w.fits() {
        return None;
    }
    let cap = w.carry_cap_that_fits();
    let fix = if cap >= 5000 {
        format!(
            "set carry_max_tokens = {cap} (with carry_overflow = \"drop_oldest\") to carry the newest turns that fit"
        )
    } else {
        "no carry_max_tokens fits: the overhead alone nearly fills the window".to_string()
    };
    let over_point = w.after_rebuild_tokens > w.compaction_point_tokens;
    Some(format!(
        "a rebuild would start at ≈ {} tokens (conversation {} + overhead {}), over {} for {} {} of this {}-token window ({}; {}): {}; {fix}",
        w.after_rebuild_tokens,
        w.carried_tokens,
        w.overhead_tokens,
        w.rebuild_limit(),
        if w.auto_compaction {
            "Claude Code's auto-compaction point"
        } else {
            "the window's hard limit"
        },
        w.compaction_point_tokens,
        w.size_tokens,
        w.size_source,
        w.compaction_point_source,
        match (over_point, w.auto_compaction) {
            (true, true) => "Claude Code would compact the rebuilt window at once",
            (true, false) => "the rebuilt window would not hold it",
            (false, _) =>
                "the rebuilt window would leave no room (over advise_at_percent of the point)",
        },
    ))
}

/// The ledger's reason to rebuild, when the window advises one.
pub fn reason(w: &Window) -> Option<String> {
    (w.advice == "rebuild").then(|| {
        format!(
            "window {:.0} % full ({}/{}); a rebuild would bring it to ≈ {} (frees {:.0} %)",
            w.used_percent,
            short(w.used_tokens),
            short(w.size_tokens),
            short(w.after_rebuild_tokens),
            w.frees_percent
        )
    })
}

/// `11 turns from before Claude Code's last compaction are only in its
/// summary now` (None when the window does not begin after a compaction
/// that summarised turns of this file).
pub fn summarised(w: &Window) -> Option<String> {
    match w.summarised_turns {
        0 => None,
        1 => Some(
            "1 turn from before Claude Code's last compaction is only in its summary now".into(),
        ),
        n => Some(format!(
            "{n} turns from before Claude Code's last compaction are only in its summary now"
        )),
    }
}

/// The offer after a compaction (None when the window does not begin
/// after one that summarised turns of this file): how many turns are only
/// in Claude Code's summary now and that a rebuild restores them word for
/// word at ≈ N tokens — `ask` says how to ask for it — when that fits
/// under the compaction point with room ([`Window::fits`]); else that
/// `ktr recall` still finds them word for word.
pub fn offer(w: &Window, ask: &str) -> Option<String> {
    let what = summarised(w)?;
    let them = if w.summarised_turns == 1 {
        "it"
    } else {
        "them"
    };
    Some(if w.fits() {
        format!(
            "{what}; a rebuild restores {them} word for word at ≈ {} tokens — {ask}",
            short(w.after_rebuild_tokens)
        )
    } else {
        format!(
            "{what}; a rebuild carrying {them} would start at ≈ {}, over the {} that leaves room under the compaction point ({}), but `ktr recall` still finds {them} word for word",
            short(w.after_rebuild_tokens),
            short(w.rebuild_limit()),
            short(w.compaction_point_tokens)
        )
    })
}

/// "612k", "1M", "41k", "980".
pub fn short(tokens: u64) -> String {
    if tokens >= 1_000_000 && tokens.is_multiple_of(1_000_000) {
        format!("{}M", tokens / 1_000_000)
    } else if tokens >= 1_000_000 {
        format!("{:.2}M", tokens as f64 / 1_000_000.0)
    } else if tokens >= 1000 {
        format!("{}k", (tokens + 500) / 1000)
    } else {
        tokens.to_string()
    }
}

/// The human one-liner that leads `ktr dirty`.
pub fn one_line(w: &Window) -> String {
    let measured = match (w.used_source, &w.used_at) {
        (UsedSource::Usage, Some(at)) => format!("measured by the API {}", clock(at)),
        (UsedSource::Usage, None) => "measured by the API".to_string(),
        (UsedSource::Estimate, _) => "estimated: no usage recorded".to_string(),
    };
    let mut s = format!(
        "window {} / {} ({:.0} %, {measured}) · a rebuild would start at ≈ {} (conversation {} + overhead {})",
        short(w.used_tokens),
        short(w.size_tokens),
        w.used_percent,
        short(w.after_rebuild_tokens),
        short(w.carried_tokens),
        short(w.overhead_tokens),
    );
    if !w.fit_checked || w.fits() {
        s.push_str(&format!(" · frees {:.0} %", w.frees_percent));
    } else {
        s.push_str(&format!(
            " · would NOT fit: Claude Code compacts at {}",
            short(w.compaction_point_tokens)
        ));
    }
    s
}

/// `HH:MM` of an RFC 3339 timestamp (UTC as written), else the text.
fn clock(at: &str) -> String {
    at.get(11..16).unwrap_or(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_numbers() {
        assert_eq!(short(1_000_000), "1M");
        assert_eq!(short(612_400), "612k");
        assert_eq!(short(980), "980");
        assert_eq!(short(1_250_000), "1.25M");
    }

    #[test]
    fn after_a_compaction_the_offer_says_what_a_rebuild_restores_or_where_recall_finds_it() {
        let mut w = derive(&super::account::tests::inputs(
            Some(612_000),
            1_200_000,
            58_000,
        ));
        assert_eq!(offer(&w, "say REBUILD"), None, "no compaction, no offer");
        w.summarised_turns = 11;
        assert_eq!(
            offer(&w, "say REBUILD to ask for it").as_deref(),
            Some(
                "11 turns from before Claude Code's last compaction are only in its summary now; a rebuild restores them word for word at ≈ 41k tokens — say REBUILD to ask for it"
            )
        );
        // Over the room under the point: recall instead.
        w.after_rebuild_tokens = w.rebuild_limit() + 1;
        w.summarised_turns = 1;
        assert_eq!(
            offer(&w, "say REBUILD").as_deref(),
            Some(
                "1 turn from before Claude Code's last compaction is only in its summary now; a rebuild carrying it would start at ≈ 677k, over the 677k that leaves room under the compaction point (967k), but `ktr recall` still finds it word for word"
            )
        );
    }

    #[test]
    fn the_one_liner_reads_like_the_issue() {
        let w = derive(&super::account::tests::inputs(
            Some(612_000),
            1_200_000,
            58_000,
        ));
        assert_eq!(
            one_line(&w),
            "window 612k / 1M (61 %, measured by the API 14:02) · a rebuild would start at ≈ 41k (conversation 29k + overhead 12k) · frees 93 %"
        );
    }
}
