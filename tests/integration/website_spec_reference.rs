//! The website spec key table in docs/tasks.md against the code. The keys a spec accepts
//! come from serde's own message for an unknown key (`expected one of ...`), for the spec
//! and for each of its tables. The test fails when a key the code accepts is not on the
//! page, a row names a key the code rejects, or a default written as a TOML value (one code
//! span) changes the parsed spec when written into it.

use guirl::tasks::website::WebsiteSpec;

const PAGE: &str = "docs/tasks.md";
const HEADING: &str = "## Website spec keys";
/// The smallest spec that parses. A default in words (no code span) belongs to a key whose
/// value, left out, is resolved later (the judge's settings, `reward_threshold`).
const MINIMAL: &str = "start_url = \"/x.html\"\ninstruction = \"do it\"\n[success]\njs = \"true\"\n";
/// The spec's keys that are tables, each with a spec fragment that opens it and the keys
/// it needs to parse.
const TABLES: [(&str, &str); 3] = [
    ("viewport", "[viewport]\nwidth = 320\nheight = 240\n"),
    ("success", "[success]\njs = \"true\"\n"),
    ("judge", "[judge]\n"),
];

/// The rows of the table: key, default cell.
fn rows() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE)).unwrap();
    let start = text.find(HEADING).unwrap_or_else(|| panic!("{PAGE} has no {HEADING:?} section"));
    let section = &text[start + HEADING.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            (cells[0].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

/// The keys serde lists when `spec` has an unknown one.
fn accepted(spec: &str) -> Vec<String> {
    let e = WebsiteSpec::parse(spec).expect_err("a spec with an unknown key parsed").to_string();
    let at = e.find("expected").unwrap_or_else(|| panic!("no key list in: {e}"));
    e[at..].split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Every key the code accepts, dotted below its table (`success.js`), `variables.NAME` for
/// the variables' map.
fn code_keys() -> Vec<String> {
    let mut keys = Vec::new();
    for k in accepted(&format!("zzz_unknown = 1\n{MINIMAL}")) {
        match k.as_str() {
            "variables" => keys.push("variables.NAME".to_string()),
            t if TABLES.iter().any(|(name, _)| *name == t) => {}
            _ => keys.push(k),
        }
    }
    for (table, open) in TABLES {
        let base = MINIMAL.replace("[success]\njs = \"true\"\n", "");
        let spec = format!("reward = \"judge:m@http://127.0.0.1:9/v1\"\n{base}{open}zzz_unknown = 1\n");
        keys.extend(accepted(&spec).into_iter().map(|k| format!("{table}.{k}")));
    }
    keys
}

#[test]
fn the_spec_table_matches_the_code() {
    let rows = rows();
    let code = code_keys();
    let mut problems = Vec::new();
    for k in &code {
        if !rows.iter().any(|(r, _)| r == k) {
            problems.push(format!("`{k}` is accepted by the code but has no row"));
        }
    }
    for (r, default) in &rows {
        if !code.contains(r) {
            problems.push(format!("`{r}` has a row but the code rejects it"));
            continue;
        }
        // A default written as one TOML value must leave the parsed spec as it was.
        let Some(lit) =
            default.strip_prefix('`').and_then(|d| d.strip_suffix('`')).filter(|d| !d.contains('`'))
        else {
            continue;
        };
        let (table, key) = r.split_once('.').unwrap_or(("", r));
        // MINIMAL ends in [success], so a success key lands in its table.
        let judge = "reward = \"judge:m@http://127.0.0.1:9/v1\"\n";
        let (with, without) = match table {
            "" => (format!("{key} = {lit}\n{MINIMAL}"), MINIMAL.to_string()),
            "success" => (format!("{MINIMAL}{key} = {lit}\n"), MINIMAL.to_string()),
            "viewport" => {
                let other = if key == "width" { "height = 240" } else { "width = 320" };
                (format!("{MINIMAL}[viewport]\n{other}\n{key} = {lit}\n"), MINIMAL.to_string())
            }
            _ => (
                format!("{judge}{MINIMAL}[{table}]\n{key} = {lit}\n"),
                format!("{judge}{MINIMAL}[{table}]\n"),
            ),
        };
        match (WebsiteSpec::parse(&with), WebsiteSpec::parse(&without)) {
            (Ok(a), Ok(b)) if format!("{a:?}") == format!("{b:?}") => {}
            (Ok(_), Ok(_)) => problems.push(format!("`{r}`: default `{lit}` on the page is not the code's")),
            (Err(e), _) | (_, Err(e)) => problems.push(format!("`{r}`: default `{lit}` does not parse: {e}")),
        }
    }
    assert!(problems.is_empty(), "{} problem(s) with {PAGE}:\n{}", problems.len(), problems.join("\n"));
}
