//! Fuzz the record walk against `serde_json` (issue 25): on any text the
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
    let ours = ktr_engine::jsonskip::value(b, start)
        .is_some_and(|end| ktr_engine::jsonskip::ws(b, end) == b.len());
    let theirs = serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok();
    assert_eq!(ours, theirs, "skipping {text:?}");
});
