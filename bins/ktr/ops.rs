//! `ktr ops`: every operation, newest first, with the session it rebuilt.

use std::time::SystemTime;

use ktr_admin::report::{OpsRow, age, human_age, ops};
use ktr_base::Error;

use crate::cli::OpsArgs;
use crate::{out, state};

pub fn run(args: &OpsArgs) -> Result<u8, Error> {
    let (_, store) = state::open(args.common.config.as_deref())?;
    let rows = ops(&store.list()?);
    if args.common.json {
        out::json(&rows);
    } else if rows.is_empty() {
        out::print("no operations yet\n");
    } else {
        out::print(&table(&rows));
    }
    Ok(0)
}

fn table(rows: &[OpsRow]) -> String {
    let now = SystemTime::now();
    let mut s = format!(
        "{:<36}  {:<36}  {:<18}  {:>8}  {:>3}  {:>15}  {}\n",
        "OPERATION", "SESSION", "STATUS", "CREATED", "TRY", "TOKENS est/real", "REASON / ERROR"
    );
    for r in rows {
        let created = age(&r.created_at, now).map_or("?".into(), |a| human_age(a) + " ago");
        let tokens = format!(
            "{}/{}",
            r.estimated_tokens.map_or("-".into(), |t| t.to_string()),
            r.context_tokens.map_or("-".into(), |t| t.to_string())
        );
        let mut note = match &r.error {
            Some(e) => format!("error: {e}"),
            None => r.reasons.join("; "),
        };
        if r.needs_attention {
            note = format!("NEEDS ATTENTION; {note}");
        }
        s.push_str(&format!(
            "{:<36}  {:<36}  {:<18}  {:>8}  {:>3}  {:>15}  {}\n",
            r.id,
            r.session_id.as_deref().unwrap_or("-"),
            r.status.as_str(),
            created,
            r.attempts,
            tokens,
            note
        ));
    }
    s
}
