//! The README's shell blocks (and those of docs/getting-started.md) cannot rot: every command
//! in a ```bash block is checked in a cheap form. `guirl SUB ...` must be a subcommand whose
//! `--help` lists every flag the line uses; a `--task` must be a task `guirl tasks` lists (or
//! a spec file that exists); every repository path a line names must exist; `cargo run
//! --release -- ARGS` is checked as `guirl ARGS`; `scripts/setup.sh` must parse (`bash -n`);
//! and `.ci/run` must run exactly the README's test command.
//!
//! A block that cannot be checked this way is marked on the line before its fence with
//! `<!-- readme-test: skip REASON -->`; a marker without a reason is an error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const SKIP: &str = "<!-- readme-test: skip";

/// A shell block: its first line number, its lines, and the skip reason if it is marked.
#[derive(Debug)]
struct Block {
    line: usize,
    lines: Vec<String>,
    skip: Option<String>,
}

/// The ```bash / ```sh / ```shell blocks of a Markdown text.
fn shell_blocks(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let t = lines[i].trim_start();
        if let Some(lang) = t.strip_prefix("```") {
            let shell = matches!(lang.trim(), "bash" | "sh" | "shell");
            let start = i + 1;
            let mut end = start;
            while end < lines.len() && !lines[end].trim_start().starts_with("```") {
                end += 1;
            }
            if shell {
                let before = lines[..i].iter().rev().find(|l| !l.trim().is_empty());
                let skip = match before.map(|l| l.trim()) {
                    Some(m) if m.starts_with(SKIP) => {
                        let reason = m[SKIP.len()..].trim_end_matches("-->").trim();
                        if reason.is_empty() {
                            return Err(format!("line {i}: `{m}` gives no reason"));
                        }
                        Some(reason.to_string())
                    }
                    _ => None,
                };
                blocks.push(Block {
                    line: start + 1,
                    lines: lines[start..end].iter().map(|s| s.to_string()).collect(),
                    skip,
                });
            }
            i = end + 1;
        } else {
            i += 1;
        }
    }
    Ok(blocks)
}

/// The commands of a block: continuation lines joined, comments cut, split at `&&`, `||`,
/// `;` and `|`; each command as its words (quotes removed).
fn commands(block: &[String]) -> Vec<Vec<String>> {
    let joined = block.join("\n").replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let mut words: Vec<String> = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        let flush = |words: &mut Vec<String>, word: &mut String, in_word: &mut bool| {
            if *in_word {
                words.push(std::mem::take(word));
                *in_word = false;
            }
        };
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '"' | '\'') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, '#') if !in_word => break,
                // `a|b` inside a word is usage syntax (one of a or b), not a pipe.
                (None, '|') if in_word => word.push('|'),
                (None, c) if c.is_whitespace() => flush(&mut words, &mut word, &mut in_word),
                (None, '&' | '|' | ';') => {
                    flush(&mut words, &mut word, &mut in_word);
                    if chars.peek() == Some(&c) {
                        chars.next();
                    }
                    if !words.is_empty() {
                        out.push(std::mem::take(&mut words));
                    }
                }
                (None, c) => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        flush(&mut words, &mut word, &mut in_word);
        if !words.is_empty() {
            out.push(words);
        }
    }
    out
}

/// Checks commands against the real `guirl` binary and the repository.
struct Checker {
    helps: HashMap<String, Result<String, String>>,
    tasks: HashMap<String, Result<Vec<String>, String>>,
}

impl Checker {
    fn new() -> Self {
        Checker { helps: HashMap::new(), tasks: HashMap::new() }
    }

    fn guirl(args: &[&str]) -> Result<String, String> {
        let out = Command::new(env!("CARGO_BIN_EXE_guirl")).args(args).output().unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    fn help(&mut self, sub: &str) -> &Result<String, String> {
        self.helps.entry(sub.to_string()).or_insert_with(|| Self::guirl(&[sub, "--help"]))
    }

    /// Problems with one command, or a note of what could not be checked here.
    fn check(&mut self, words: &[String], problems: &mut Vec<String>, notes: &mut Vec<String>) {
        let words: Vec<&str> = words
            .iter()
            .map(|w| w.as_str())
            .skip_while(|w| w.contains('=') && !w.starts_with('-')) // VAR=value prefixes
            .collect();
        match words.as_slice() {
            ["scripts/setup.sh", ..] => {
                let ok = Command::new("bash")
                    .arg("-n")
                    .arg(root().join("scripts/setup.sh"))
                    .status()
                    .is_ok_and(|s| s.success());
                if !ok {
                    problems.push("scripts/setup.sh does not parse (bash -n)".into());
                }
            }
            ["cargo", "test", ..] => {}
            ["cargo", "run", rest @ ..] => match rest.iter().position(|w| *w == "--") {
                Some(p) => self.check_guirl(&rest[p + 1..], problems, notes),
                None => problems.push("`cargo run` without `-- ARGS`".into()),
            },
            ["guirl", rest @ ..] => self.check_guirl(rest, problems, notes),
            other => problems.push(format!(
                "`{}`: no check knows this command; add one to tests/integration/readme_commands.rs \
                 or mark the block `{SKIP} REASON -->`",
                other.join(" ")
            )),
        }
    }

    fn check_guirl(&mut self, args: &[&str], problems: &mut Vec<String>, notes: &mut Vec<String>) {
        let Some(sub) = args.first() else {
            return problems.push("`guirl` with no subcommand".into());
        };
        let help = match self.help(sub) {
            Ok(h) => h.clone(),
            Err(e) => return problems.push(format!("`guirl {sub} --help` failed: {e}")),
        };
        for (k, raw) in args.iter().enumerate().skip(1) {
            let word = raw.trim_matches(|c| c == '[' || c == ']' || c == ',');
            if let Some(flag) = word.strip_prefix("--") {
                let flag = format!("--{}", flag.split('=').next().unwrap());
                if !has_flag(&help, &flag) {
                    problems.push(format!("`guirl {sub}` has no flag {flag} (see `guirl {sub} --help`)"));
                }
                if flag == "--task" {
                    if let Some(task) = args.get(k + 1) {
                        self.check_task(task, problems, notes);
                    }
                }
            } else if !word.contains('|') {
                check_path(word, problems);
            }
        }
    }

    fn check_task(&mut self, task: &str, problems: &mut Vec<String>, notes: &mut Vec<String>) {
        if task.ends_with(".toml") {
            return check_path(task, problems);
        }
        let suite = task.split('/').next().unwrap_or("");
        let listed = self.tasks.entry(suite.to_string()).or_insert_with(|| {
            Self::guirl(&["tasks", "--suite", suite]).map(|s| s.lines().map(str::to_string).collect())
        });
        match listed {
            Ok(ids) if ids.iter().any(|t| t == task) => {}
            Ok(_) => problems.push(format!("task {task} is not in `guirl tasks --suite {suite}`")),
            Err(e) => {
                notes.push(format!("task {task} not checked: `guirl tasks --suite {suite}`: {}", e.trim()))
            }
        }
    }
}

/// `help` lists `flag` as a whole word (`--seed` is not `--seeds`).
fn has_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(i, _)| {
        let after = help[i + flag.len()..].chars().next();
        let before = help[..i].chars().last();
        !matches!(after, Some(c) if c.is_alphanumeric() || c == '-' || c == '_')
            && !matches!(before, Some(c) if c.is_alphanumeric() || c == '-')
    })
}

/// A word naming a path under one of the repository's folders (not `runs/`, which commands
/// write) must exist.
fn check_path(word: &str, problems: &mut Vec<String>) {
    let Some((first, _)) = word.split_once('/') else { return };
    if first == "runs" || first.is_empty() || first.starts_with('$') || first.contains(':') {
        return;
    }
    if root().join(first).is_dir() && !root().join(word).exists() {
        problems.push(format!("path {word} does not exist"));
    }
}

fn check_file(path: &Path, checker: &mut Checker) -> (usize, Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.strip_prefix(root()).unwrap().display().to_string();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let mut checked = 0;
    for block in shell_blocks(&text).unwrap_or_else(|e| panic!("{name}: {e}")) {
        if let Some(reason) = &block.skip {
            notes.push(format!("{name}:{}: block skipped: {reason}", block.line));
            continue;
        }
        for words in commands(&block.lines) {
            let mut p = Vec::new();
            checker.check(&words, &mut p, &mut notes);
            checked += 1;
            problems.extend(p.into_iter().map(|p| format!("{name}:{}: {p}", block.line)));
        }
    }
    problems.dedup(); // a --task path is checked as a task and as a path
    (checked, problems, notes)
}

#[test]
fn parsing_blocks_and_commands() {
    let text = "a\n```bash\nX=1 guirl run --task t \\\n  --seed 0   # c\nfoo && bar | baz\n```\n\
                <!-- readme-test: skip needs a GPU -->\n\n```bash\nnvidia-smi\n```\n```\nnot shell\n```\n";
    let blocks = shell_blocks(text).unwrap();
    assert_eq!(blocks.len(), 2);
    assert_eq!(blocks[0].skip, None);
    assert_eq!(blocks[1].skip.as_deref(), Some("needs a GPU"));
    let cmds = commands(&blocks[0].lines);
    assert_eq!(
        cmds,
        [vec!["X=1", "guirl", "run", "--task", "t", "--seed", "0"], vec!["foo"], vec!["bar"], vec!["baz"]]
    );
    assert!(shell_blocks("<!-- readme-test: skip -->\n```bash\nx\n```\n").is_err());
    assert_eq!(commands(&["guirl tasks [--suite a|b]".into()]), [vec!["guirl", "tasks", "[--suite", "a|b]"]]);
    assert!(has_flag("  --seed <SEED>\n  --seeds <N>", "--seeds"));
    assert!(!has_flag("  --seeds <N>", "--seed"));
}

#[test]
fn the_checker_catches_rot() {
    let mut checker = Checker::new();
    let mut problems = Vec::new();
    let mut notes = Vec::new();
    let bad = [
        "guirl run --task builtin/counter --no-such-flag",
        "guirl no-such-subcommand",
        "guirl run --task builtin/no-such-task",
        "guirl train configs/no-such-config.toml",
        "curl http://example.org",
    ];
    for line in bad {
        let before = problems.len();
        for words in commands(&[line.to_string()]) {
            checker.check(&words, &mut problems, &mut notes);
        }
        assert!(problems.len() > before, "`{line}` passed the check");
    }
    let good = "RAYON_NUM_THREADS=1 cargo run --release -- train configs/click-test.toml";
    let before = problems.len();
    for words in commands(&[good.to_string()]) {
        checker.check(&words, &mut problems, &mut notes);
    }
    assert_eq!(problems.len(), before, "{problems:#?}");
}

#[test]
fn readme_commands_are_real() {
    let mut checker = Checker::new();
    let mut all = Vec::new();
    for file in ["README.md", "docs/getting-started.md"] {
        let (checked, problems, notes) = check_file(&root().join(file), &mut checker);
        assert!(checked > 3, "{file}: only {checked} commands found");
        for n in notes {
            println!("{n}");
        }
        all.extend(problems);
    }
    assert!(all.is_empty(), "{} problem(s):\n{}", all.len(), all.join("\n"));
}

#[test]
fn ci_runs_exactly_the_readme_test_command() {
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = ci.lines().rev().find(|l| !l.trim().is_empty() && !l.starts_with('#')).unwrap().trim();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let blocks = shell_blocks(&readme).unwrap();
    assert!(
        blocks.iter().any(|b| b.lines.len() == 1 && b.lines[0].trim() == command),
        ".ci/run runs `{command}`, which is not one of the README's command blocks"
    );
    // and the lints first, each failing on a warning
    let lines: Vec<&str> = ci.lines().map(str::trim).collect();
    let at = |needle: &str| lines.iter().position(|l| l.contains(needle));
    let test = at(command).unwrap();
    for lint in [
        "cargo fmt --check",
        "cargo clippy --release --all-targets -- -D warnings",
        "RUSTDOCFLAGS=\"-D warnings\" cargo doc",
    ] {
        let i = at(lint).unwrap_or_else(|| panic!(".ci/run does not run `{lint}`"));
        assert!(i < test, ".ci/run runs `{lint}` after the tests");
    }
}
