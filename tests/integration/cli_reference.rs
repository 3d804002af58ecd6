//! docs/reference/cli.md is the CLI as clap itself describes it: the page is the Markdown
//! that clap-markdown renders from `guirl::cli::Cli` (every subcommand, argument, default
//! and possible value, with the doc comments of src/cli/ as their help). The test fails when
//! the page and the code differ; `GUIRL_BLESS=1 cargo test --release --test integration cli_reference`
//! rewrites the page. A second test walks clap's `Command` tree on its own and checks that
//! every visible subcommand and flag has its place on the page, so a renderer that dropped
//! something would not go unnoticed.

use clap::CommandFactory;
use std::path::PathBuf;

const PAGE: &str = "docs/reference/cli.md";
const REGENERATE: &str = "GUIRL_BLESS=1 cargo test --release --test integration cli_reference";

fn page_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(PAGE)
}

/// The page as it should be: clap-markdown's rendering with our title and a paragraph that
/// says where it comes from.
fn rendered() -> String {
    let options = clap_markdown::MarkdownOptions::new().title("CLI reference".into()).show_footer(false);
    let md = clap_markdown::help_markdown_custom::<guirl::cli::Cli>(&options);
    let intro = format!(
        "Every `guirl` subcommand with its arguments, defaults and possible values, as `guirl \
         COMMAND --help` prints them. This page is generated from the CLI's code (src/cli/) by \
         tests/integration/cli_reference.rs, which fails when the two differ; regenerate it with \
         `{REGENERATE}`. Training configs are described in [Config keys](config.md)."
    );
    let md = md.replacen(
        "This document contains the help content for the `guirl` command-line program.",
        &intro,
        1,
    );
    // One blank line between blocks: the renderer leaves runs of them.
    let mut out = String::new();
    let mut blank = 0;
    for line in escape_angle_brackets(&md).lines() {
        let line = line.trim_end();
        blank = if line.is_empty() { blank + 1 } else { 0 };
        if blank <= 1 {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.trim_end().to_string() + "\n"
}

/// Help texts are plain text, but the renderer passes them on as Markdown, where a
/// `<layout>` outside a code span would be an HTML tag: escape `<` there.
fn escape_angle_brackets(md: &str) -> String {
    let mut out = String::with_capacity(md.len());
    let mut in_code = false;
    for c in md.chars() {
        match c {
            '`' => {
                in_code = !in_code;
                out.push(c);
            }
            '<' if !in_code => out.push_str("&lt;"),
            c => out.push(c),
        }
    }
    out
}

#[test]
fn the_cli_page_is_what_clap_renders() {
    let want = rendered();
    if std::env::var_os("GUIRL_BLESS").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(page_path().parent().unwrap()).unwrap();
        std::fs::write(page_path(), &want).unwrap();
        println!("wrote {PAGE}");
        return;
    }
    let have = std::fs::read_to_string(page_path()).unwrap_or_default();
    if have != want {
        let (n, (h, w)) = have
            .lines()
            .chain(std::iter::repeat(""))
            .zip(want.lines().chain(std::iter::repeat("")))
            .enumerate()
            .find(|(_, (h, w))| h != w)
            .unwrap();
        panic!(
            "{PAGE} does not match the CLI's clap definitions (src/cli/); regenerate it with\n    \
             {REGENERATE}\nand commit it. First difference, line {}:\n  page: {h:?}\n  code: {w:?}",
            n + 1
        );
    }
}

/// The `## \`guirl ...\`` sections of a page, by command path.
fn sections(page: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in page.lines() {
        if let Some(name) = line.strip_prefix("## `").and_then(|l| l.strip_suffix('`')) {
            out.push((name.to_string(), String::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    out
}

/// What a page must show for `cmd` (at `path`): each visible subcommand a section, in it
/// each visible flag as `` `--long `` or `` `-s ``, each positional as `` `<NAME>` ``.
fn missing_from(page: &str, cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    let sections = sections(page);
    let Some((_, body)) = sections.iter().find(|(name, _)| name == path) else {
        out.push(format!("no section for `{path}`"));
        return;
    };
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        let id = arg.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        let shown = match (arg.get_long(), arg.get_short(), arg.is_positional()) {
            (Some(long), _, _) => format!("`--{long}"),
            (None, Some(short), _) => format!("`-{short}"),
            (None, None, _) => {
                let name = arg.get_value_names().and_then(|v| v.first().cloned());
                format!("`<{}>", name.map(|n| n.to_string()).unwrap_or_else(|| id.to_uppercase()))
            }
        };
        if !body.contains(&shown) {
            out.push(format!("`{path}`: argument {shown}` not documented"));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        missing_from(page, sub, &format!("{path} {}", sub.get_name()), out);
    }
}

#[test]
fn every_subcommand_and_flag_is_on_the_page() {
    let cli = guirl::cli::Cli::command();
    let mut missing = Vec::new();
    missing_from(&rendered(), &cli, "guirl", &mut missing);
    assert!(missing.is_empty(), "the rendered CLI page leaves out:\n{}", missing.join("\n"));
    // The check can fail: a page without the train section, or without one flag, is caught.
    let page = rendered();
    let mut gaps = Vec::new();
    missing_from(&page.replace("## `guirl train`", "## `guirl trained`"), &cli, "guirl", &mut gaps);
    assert!(gaps.iter().any(|g| g.contains("no section for `guirl train`")), "{gaps:?}");
    let mut gaps = Vec::new();
    missing_from(&page.replace("`--resume`", "`--restart`"), &cli, "guirl", &mut gaps);
    assert!(gaps.iter().any(|g| g.contains("`guirl train`: argument `--resume`")), "{gaps:?}");
}
