//! Fuzz the hook inputs: any bytes on the Stop or SessionStart hook's stdin
//! give one reply, never a panic, and never schedule or change anything
//! (the pending operation stays pending: it is bound to a session the
//! fuzzer does not name, and no stage executable can be found).
#![no_main]

#[path = "sandbox.rs"]
mod sandbox;

use ktr_pipeline::hook::{Invocation, Reply};
use ktr_pipeline::operation::{Status, Store};
use ktr_pipeline::stages::{ack, stop};
use libfuzzer_sys::fuzz_target;
use sandbox::sandbox;

fuzz_target!(|data: &[u8]| {
    let (config, state, id) = sandbox();
    for hook in [stop::stop as fn(Invocation) -> Reply, ack::ack] {
        let reply = hook(Invocation {
            config: Some(config.clone()),
            flags: Vec::new(),
            input: Some(data.to_vec()),
        });
        assert!(!reply.to_json().contains('\n'));
    }
    let op = Store::at(state).load(id).unwrap();
    assert_eq!(op.status, Status::Pending, "hook input changed the operation");
});
