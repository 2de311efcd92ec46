//! Opening the operation store the way every state-touching command must:
//! config first, then the state dir, then recovery of dead workers so a
//! crashed stage never blocks the next command (SPEC §9).

use std::path::Path;

use ktr_base::Error;
use ktr_base::config::Config;
use ktr_pipeline::operation::Store;

/// The validated config (the one serving the session of the directory this
/// runs in) and its store, after failing any operation whose
/// worker died (each one is reported on stderr).
pub fn open(config: Option<&Path>) -> Result<(Config, Store), Error> {
    let mut config = Config::here(config)?;
    // An unset tmux_target: the pane of the Claude Code (or shell) that ran
    // this command.
    ktr_pipeline::targets::discover::settle(
        &mut config,
        ktr_pipeline::process::runner_of(std::process::id()),
    );
    let store = Store::for_config(&config)?;
    for op in store.recover_stale()? {
        eprintln!(
            "ktr: operation {} {}: {}",
            op.id,
            op.status,
            op.error.as_deref().unwrap_or("worker died")
        );
    }
    for d in store.scan()?.damaged {
        eprintln!(
            "ktr: DAMAGED: {}; `ktr repair` sets it aside (nothing is deleted)",
            d.why
        );
    }
    Ok((config, store))
}
