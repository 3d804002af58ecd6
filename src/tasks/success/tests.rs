//! The audit table against the installed MiniWoB++ pages and docs/success-audit.md.

use super::*;
use crate::tasks::miniwob::task_names;
use crate::tasks::TaskStatus;

const PAGE: &str = "docs/success-audit.md";
const BEGIN: &str = "<!-- BEGIN table: generated from src/tasks/success/, do not edit by hand -->";
const END: &str = "<!-- END table -->";
const REGENERATE: &str = "GUIRL_BLESS=1 cargo test --release --lib tasks::success";

#[test]
fn rules_read_the_raw_reward() {
    let full = SuccessRule::FullCredit;
    assert!(full.is_success(1.0) && full.is_success(1.0 - 1e-9));
    for partial in [0.999, 0.9, 0.6, 0.1, 0.0, -0.5, -1.0] {
        assert!(!full.is_success(partial), "{partial}");
    }
    let graded = SuccessRule::AtLeast(0.9);
    assert!(graded.is_success(0.9) && graded.is_success(0.95) && graded.is_success(1.0));
    assert!(!graded.is_success(0.8999) && !graded.is_success(0.5) && !graded.is_success(-1.0));
    // Float sums of the pages' terms land a hair under the value they stand for.
    let sixths = (0..6).fold(0.0, |s, _| s + 1.0 / 6.0);
    assert!(sixths < 1.0 && full.is_success(sixths));
    let nine_circles = (0..9).fold(-1.0, |s, _| s + 0.2);
    assert!(SuccessRule::AtLeast(0.8).is_success(nine_circles) && !graded.is_success(nine_circles));
    // A status without a flag of its own (a built-in task) is a success at full credit only.
    let status = |raw_reward, success| TaskStatus { done: true, raw_reward, success, ..Default::default() };
    assert!(status(1.0, None).is_success() && !status(0.5, None).is_success());
    assert!(!status(-1.0, None).is_success() && status(0.5, Some(true)).is_success());
    assert!(!status(1.0, Some(false)).is_success());
}

#[test]
fn unknown_tasks_get_full_credit_and_the_env_uses_the_table() {
    assert_eq!(miniwob_rule("no-such-task"), SuccessRule::FullCredit);
    assert_eq!(miniwob_rule("find-greatest"), SuccessRule::FullCredit);
    assert_eq!(miniwob_rule("circle-center"), SuccessRule::AtLeast(0.9));
    let task = crate::tasks::miniwob::MiniwobTask::new("circle-center").unwrap().unwrap();
    assert_eq!(task.success_rule(), SuccessRule::AtLeast(0.9));
}

#[test]
fn every_installed_page_has_a_row_and_every_row_a_page() {
    let pages = task_names();
    assert!(pages.len() >= 100, "MiniWoB++ pages not installed (run scripts/setup.sh): {}", pages.len());
    let missing: Vec<&String> = pages.iter().filter(|p| miniwob_row(p).is_none()).collect();
    assert!(
        missing.is_empty(),
        "pages with no row in src/tasks/success/: {missing:?}; read their endEpisode calls"
    );
    let stale: Vec<&str> =
        miniwob_audit().map(|r| r.task).filter(|t| !pages.iter().any(|p| p == t)).collect();
    assert!(stale.is_empty(), "rows for pages that are not installed: {stale:?}");
}

#[test]
fn rows_are_unique_sorted_and_consistent() {
    for rows in [binary::ROWS, scored::ROWS] {
        assert!(rows.windows(2).all(|w| w[0].task < w[1].task), "rows in task-name order, each once");
    }
    let all: Vec<&TaskAudit> = miniwob_audit().collect();
    for (i, r) in all.iter().enumerate() {
        assert!(all[..i].iter().all(|o| o.task != r.task), "{} twice", r.task);
        assert!(!r.pays.is_empty() && !r.evidence.is_empty(), "{}", r.task);
        assert_eq!(r.class == RewardClass::Binary, binary::ROWS.contains(r), "{}", r.task);
        if r.class != RewardClass::Binary {
            assert!(!r.why.is_empty(), "{}: a non-binary rule says why", r.task);
        }
        if let SuccessRule::AtLeast(t) = r.rule {
            assert!(
                r.class == RewardClass::Graded && t > 0.0 && t < 1.0,
                "{}: a threshold is for graded tasks",
                r.task
            );
        }
    }
}

#[test]
fn the_old_rule_counted_each_false_success_and_the_new_one_does_not() {
    let changed: Vec<&TaskAudit> = miniwob_audit().filter(|r| r.false_success.is_some()).collect();
    for r in &changed {
        let v = r.false_success.unwrap();
        assert!(v > 0.0 && !r.rule.is_success(v), "{}: {v} was a success by raw > 0 and is none now", r.task);
        assert_ne!(r.class, RewardClass::Binary, "{}", r.task);
    }
    assert_eq!(changed.len(), 21, "{:?}", changed.iter().map(|r| r.task).collect::<Vec<_>>());
    // Shaped rewards that stay negative for a wrong answer were never counted.
    assert!(miniwob_row("tic-tac-toe").unwrap().false_success.is_none());
}

/// The first argument of every `core.endEpisode(` call in `text` that is a number.
fn literal_rewards(text: &str) -> Vec<f64> {
    text.match_indices("endEpisode(")
        .filter_map(|(i, m)| {
            let arg = text[i + m.len()..].split([',', ')']).next()?;
            arg.trim().parse::<f64>().ok()
        })
        .collect()
}

#[test]
fn the_pages_pay_no_literal_but_plus_minus_one_outside_audited_rows() {
    let dir = crate::tasks::server::miniwob_dir().join("miniwob");
    let mut odd = Vec::new();
    for name in task_names() {
        let text = std::fs::read_to_string(dir.join(format!("{name}.html"))).unwrap();
        let row = miniwob_row(&name).expect("a row (checked above)");
        for v in literal_rewards(&text) {
            if v != 1.0 && v != -1.0 && row.class == RewardClass::Binary {
                odd.push(format!("{name}: endEpisode({v})"));
            }
        }
    }
    assert!(odd.is_empty(), "binary rows whose page pays other amounts: {odd:?}");
    let greatest = std::fs::read_to_string(dir.join("find-greatest.html")).unwrap();
    assert!(literal_rewards(&greatest).contains(&0.1), "the audit's evidence for find-greatest");
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn number(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The generated part of the docs page: counts per class, then one row per task.
fn audit_markdown() -> String {
    let rows: Vec<&TaskAudit> = miniwob_audit().collect();
    let mut out = format!("{BEGIN}\n\n");
    out.push_str(
        "| class | MiniWoB++ tasks | success changed from `raw_reward > 0` |\n| --- | --- | --- |\n",
    );
    for class in RewardClass::ALL {
        let of: Vec<&&TaskAudit> = rows.iter().filter(|r| r.class == class).collect();
        let changed = of.iter().filter(|r| r.false_success.is_some()).count();
        out.push_str(&format!("| {} | {} | {} |\n", class.name(), of.len(), changed));
    }
    let changed = rows.iter().filter(|r| r.false_success.is_some()).count();
    out.push_str(&format!("| **all** | **{}** | **{changed}** |\n\n", rows.len()));
    out.push_str(
        "| task | class | success rule | what the page pays | evidence (`endEpisode`) | \
         old rule's false success |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    let mut sorted = rows.clone();
    sorted.sort_by_key(|r| r.task);
    for r in sorted {
        let rule =
            if r.why.is_empty() { r.rule.describe() } else { format!("{}: {}", r.rule.describe(), r.why) };
        let old = r.false_success.map_or("—".to_string(), |v| format!("{} counted", number(v)));
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | `{}` | {} |\n",
            r.task,
            r.class.name(),
            cell(&rule),
            cell(r.pays),
            cell(r.evidence),
            old
        ));
    }
    out.push_str(&format!("\n{END}"));
    out
}

#[test]
fn the_docs_page_shows_the_table() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
    let text = std::fs::read_to_string(&path).unwrap();
    let (Some(b), Some(e)) = (text.find(BEGIN), text.find(END)) else {
        panic!("{PAGE} lacks the markers {BEGIN:?} … {END:?}");
    };
    let (current, want) = (&text[b..e + END.len()], audit_markdown());
    if current == want {
        return;
    }
    if std::env::var_os("GUIRL_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, format!("{}{want}{}", &text[..b], &text[e + END.len()..])).unwrap();
        return;
    }
    panic!("{PAGE}'s table differs from src/tasks/success/; regenerate it with `{REGENERATE}`");
}
