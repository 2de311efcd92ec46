//! Fuzz the record walk against `serde_json`: on any text the
//! walk reads the record `serde_json` reads, or leaves the line to it;
//! and skipping a value accepts exactly what `serde_json` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = ktr_engine::transcript::walk_check(text) {
        panic!("{e}");
    }
    let b = text.as_bytes();
    let start = ktr_engine::jsonskip::ws(b, 0);
    let mut seen = ktr_engine::jsonskip::Seen::default();
    let ours = ktr_engine::jsonskip::value(b, start, &mut seen)
        .is_some_and(|end| ktr_engine::jsonskip::ws(b, end) == b.len());
    let theirs = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
    assert_eq!(ours, theirs, "skipping {text:?}");
    // A line the walk says holds no surrogate escape holds none.
    if ours && !seen.surrogate_escape {
        assert_eq!(ktr_engine::lone::survey(b).lone, 0, "{text:?}");
    }
});
