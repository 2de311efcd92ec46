//! `ktr doctor`: check the installation and explain each item.

use ktr::Error;
use ktr::admin::doctor;

use crate::cli::DoctorArgs;
use crate::out;

pub fn run(args: &DoctorArgs) -> Result<u8, Error> {
    let report = doctor::check(args.common.config.as_deref());
    if args.common.json {
        out::json(&report);
    } else {
        out::print(&human(&report));
    }
    Ok(u8::from(!report.ok))
}

pub fn human(report: &doctor::Report) -> String {
    let mut s = String::new();
    for c in &report.checks {
        s.push_str(&format!(
            "{} {:<22}{}\n",
            if c.ok { "ok  " } else { "FAIL" },
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            s.push_str(&format!("     {:<22}fix: {fix}\n", ""));
        }
    }
    s.push_str(if report.ok {
        "all checks passed\n"
    } else {
        "some checks failed\n"
    });
    s
}
