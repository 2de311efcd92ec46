//! Fuzz the compaction guard's stdin (PreCompact): any bytes give one
//! JSON reply line, never a panic; a prompt that does not name the session
//! the pending operation is bound to never blocks Claude Code or changes
//! the operation.
#![no_main]

#[path = "sandbox.rs"]
mod sandbox;

use ktr_pipeline::hook::{Invocation, Reply};
use ktr_pipeline::operation::{Status, Store};
use ktr_pipeline::stages::precompact::precompact;
use libfuzzer_sys::fuzz_target;
use sandbox::sandbox;

fuzz_target!(|data: &[u8]| {
    let (config, state, id) = sandbox();
    let reply = precompact(Invocation {
        config: Some(config.clone()),
        flags: Vec::new(),
        input: Some(data.to_vec()),
    });
    assert!(!reply.to_json().contains('\n'));
    assert!(!matches!(reply, Reply::Block(_)) || data.windows(15).any(|w| w == b"bound-elsewhere"));
    let op = Store::at(state).load(id).unwrap();
    assert!(
        op.status == Status::Pending || data.windows(15).any(|w| w == b"bound-elsewhere"),
        "guard input changed the operation"
    );
});
