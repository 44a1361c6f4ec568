//! The words of a schedule's health, shared by studiod (which derives it) and the
//! cockpit (which filters and counts by it). The rule itself is studiod's
//! (`docs/SCHEDULER.md`, "Health").

/// Every health a schedule can have, worst first (the order the cockpit lists them).
pub const HEALTHS: &[&str] = &[
    "failing",
    "overdue",
    "no-evidence",
    "never-fired",
    "healthy",
    "disabled",
];
