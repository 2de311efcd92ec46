//! `ktr-stop`: the Claude Code Stop hook (SPEC §10).
//!
//! Runs after every finished reply, so it must be fast and must never fail
//! Claude: it always exits 0. With nothing pending it reads one small file
//! (`<state_dir>/active`) and prints `{"suppressOutput":true}`. With a
//! pending operation it binds it to this session, marks it `scheduled` and
//! starts `ktr-prepare` detached (`ktr-rollback` for `rollback_pending`).
//! An operation whose worker died is failed here ([`Store::recover_stale`]),
//! so a killed stage never blocks the next request.
//!
//! Usage: `ktr-stop [--config PATH]` with the hook JSON on stdin. The logic
//! is [`ktr_pipeline::stages::stop`].

fn main() {
    ktr_pipeline::hook::main(
        "ktr-stop",
        ktr_pipeline::stages::stop::HELP,
        ktr_pipeline::stages::stop::stop,
    )
}
