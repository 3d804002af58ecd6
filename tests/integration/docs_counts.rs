//! The task counts the docs state are the registry's: a task or an oracle added or removed
//! without its page changing fails here, not in a reader's hands.

use guirl::policy::oracle;
use guirl::tasks::{all_task_ids, builtin_specs::BUILTIN_TASKS};

fn page(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Each `(page, text)`: the page says the text (written with the registry's counts).
fn says(claims: &[(&str, String)]) {
    let missing: Vec<String> = claims
        .iter()
        .filter(|(name, text)| {
            !page(name).split_whitespace().collect::<Vec<_>>().join(" ").contains(text.as_str())
        })
        .map(|(name, text)| format!("docs/{name} should say {text:?}"))
        .collect();
    assert!(missing.is_empty(), "the docs' task counts are out of date:\n{}", missing.join("\n"));
}

#[test]
fn the_docs_count_the_tasks_the_registry_has() {
    let builtin = BUILTIN_TASKS.len();
    let multi = BUILTIN_TASKS.iter().filter(|s| s.multi_page).count();
    let miniwob = all_task_ids(Some("miniwob")).len();
    let miniwob_oracles = oracle::tasks("miniwob").len();
    assert_eq!(oracle::tasks("builtin").len(), builtin, "every built-in task has an oracle");
    says(&[
        ("tasks.md", format!("Scripted oracles exist for {miniwob_oracles} of them")),
        ("tasks.md", format!("{builtin} seeded tasks, {multi} of them over several pages")),
        ("success-audit.md", format!("All {builtin} built-in tasks")),
        ("reference-scores.md", format!("MiniWoB++ ({miniwob} tasks)")),
        ("reference-scores.md", format!("built-in ({builtin} tasks)")),
    ]);
}
