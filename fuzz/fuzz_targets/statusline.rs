//! Fuzz the statusline's stdin (it runs on every render of Claude Code's
//! screen): any bytes give one line, never a panic, a hang or a control
//! character (no color asked for), and never change the pending operation.
#![no_main]

#[path = "sandbox.rs"]
mod sandbox;

use ktr_pipeline::operation::{Status, Store};
use ktr_pipeline::stages::statusline::{Style, line};
use libfuzzer_sys::fuzz_target;
use sandbox::sandbox;

fuzz_target!(|data: &[u8]| {
    let (config, state, id) = sandbox();
    for segment_only in [false, true] {
        let shown = line(
            Some(config),
            data,
            Style {
                segment_only,
                color: false,
            },
        );
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
    }
    let op = Store::at(state).load(id).unwrap();
    assert_eq!(op.status, Status::Pending, "statusline input changed the operation");
});
