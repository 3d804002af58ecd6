//! The audit's rows: every MiniWoB++ task's reward class and success rule, looked up by name.

use super::{binary, scored, SuccessRule, TaskAudit};

/// Every audited MiniWoB++ task, binary ones first.
pub fn miniwob_audit() -> impl Iterator<Item = &'static TaskAudit> {
    binary::ROWS.iter().chain(scored::ROWS.iter())
}

/// The audit row of MiniWoB++ task `name`, if it has one.
pub fn miniwob_row(name: &str) -> Option<&'static TaskAudit> {
    miniwob_audit().find(|r| r.task == name)
}

/// The success rule of MiniWoB++ task `name`: its row's, or full credit for a task the
/// audit does not know.
pub fn miniwob_rule(name: &str) -> SuccessRule {
    miniwob_row(name).map_or(SuccessRule::FullCredit, |r| r.rule)
}
