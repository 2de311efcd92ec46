//! Fuzz the transcript reader and the selector: any bytes must give a
//! plan or a clean error, never a panic, and a candidate whose every line
//! is a plain user/assistant text record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let config = ktr_base::config::Config::from_toml(
        "project_dir = \"/nonexistent\"\nstamp_turns = true\nmax_event_chars = 500\non_malformed_line = \"skip\"",
    )
    .unwrap();
    let Ok(plan) = ktr_engine::plan::build_from_bytes(
        &config,
        Path::new("fuzz.jsonl"),
        data,
        Some(&ktr_base::ids::SessionId::parse("00000000-0000-4000-8000-000000000000").unwrap()),
    ) else {
        return;
    };
    for line in &plan.candidate.lines {
        let v: serde_json::Value = serde_json::from_str(line).expect("candidate line is JSON");
        assert!(v["type"] == "user" || v["type"] == "assistant");
    }
});
