//! Unit tests of website specs (`website.rs`).

use super::*;

#[test]
fn file_urls_name_their_page_or_the_folder_above_a_variable() {
    use std::path::PathBuf;
    let site = |u: &str| local_site(u).map(|s| (s.folder, s.page));
    let page = |f: &str, p: &str| Some((PathBuf::from(f), Some(PathBuf::from(p))));
    let under = |f: &str| Some((PathBuf::from(f), None));
    assert_eq!(site("file:///a/b/page.html"), page("/a/b", "/a/b/page.html"));
    assert_eq!(site("file:///a/b/{page}.html"), under("/a/b"));
    assert_eq!(site("file:///a/b-{page}.html"), under("/a"));
    assert_eq!(site("file:///a/{site}/index.html"), under("/a"));
    assert_eq!(site("file:///a/b/{{page}}.html"), under("/a/b"));
    // A variable after the path leaves the page fixed.
    assert_eq!(site("file:///a/b/page.html?level={level}"), page("/a/b", "/a/b/page.html"));
    assert_eq!(site("file:///a/b/page.html#{part}"), page("/a/b", "/a/b/page.html"));
    assert_eq!(site("http://localhost/x"), None);
    assert_eq!(site("/fixtures/pages/x.html"), None);
}

const OK: &str = r#"
start_url = "/fixtures/pages/signup.html"
instruction = "Sign up as {name}"
[variables]
name = ["ann", "bo"]
[success]
url_pattern = "done"
"#;

#[test]
fn valid_spec_parses_and_draws_deterministically() {
    let s = WebsiteSpec::parse(OK).unwrap();
    assert_eq!(s.draw(3), s.draw(3));
    assert_eq!(s.max_steps, 20);
}

#[test]
fn fresh_state_is_on_unless_turned_off() {
    assert!(WebsiteSpec::parse(OK).unwrap().fresh_state);
    assert!(!WebsiteSpec::parse(&format!("fresh_state = false\n{OK}")).unwrap().fresh_state);
    let e = WebsiteSpec::parse(&format!("fresh_state = \"no\"\n{OK}")).unwrap_err();
    assert!(format!("{e:#}").contains("fresh_state"), "{e:#}");
}

#[test]
fn unknown_key_is_named() {
    let e = WebsiteSpec::parse(&OK.replace("[success]", "max_stepz = 3\n[success]")).unwrap_err();
    assert!(format!("{e:#}").contains("max_stepz"), "{e:#}");
}

#[test]
fn bad_values_are_named() {
    let e = WebsiteSpec::parse(&format!("max_steps = 0\n{OK}")).unwrap_err();
    assert!(e.to_string().contains("max_steps"), "{e}");
    let e = WebsiteSpec::parse(&OK.replace("\"done\"", "\"(\"")).unwrap_err();
    assert!(e.to_string().contains("success.url_pattern"), "{e}");
    let e = WebsiteSpec::parse(&OK.replace("{name}", "{nmae}")).unwrap_err();
    assert!(e.to_string().contains("instruction uses {nmae}"), "{e}");
    let e = WebsiteSpec::parse(&OK.replace("url_pattern = \"done\"", "")).unwrap_err();
    assert!(e.to_string().contains("success has no check"), "{e}");
    let e = WebsiteSpec::parse(
        &OK.replace("max_steps", "").replace("instruction =", "max_steps = \"x\"\ninstruction ="),
    )
    .unwrap_err();
    assert!(format!("{e:#}").contains("max_steps"), "{e:#}");
}

#[test]
fn a_reward_model_may_replace_the_success_checks() {
    let no_check = OK.replace("[success]\nurl_pattern = \"done\"\n", "");
    let e = WebsiteSpec::parse(&no_check).unwrap_err();
    assert!(e.to_string().contains("no [success] table") && e.to_string().contains("model:PATH"), "{e}");
    let s =
        WebsiteSpec::parse(&format!("reward = \"model:rm\"\nreward_threshold = 0.7\n{no_check}")).unwrap();
    assert!(s.success.is_none());
    assert_eq!(s.reward_threshold, Some(0.7));
    for (bad, needle) in [
        ("reward = \"rm\"", "give \"model:PATH\""),
        ("reward = \"model:\"", "give \"model:PATH\""),
        ("reward = \"model:rm\"\nreward_threshold = 1.5", "reward_threshold = 1.5 is out of range"),
        ("reward_threshold = 0.5", "reward is not"),
    ] {
        let e = WebsiteSpec::parse(&format!("{bad}\n{OK}")).unwrap_err();
        assert!(e.to_string().contains(needle), "{bad}: {e}");
    }
    // The folder must hold a model; its path is read from the spec's folder.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("t.toml");
    std::fs::write(&spec, format!("reward = \"model:rm\"\n{no_check}")).unwrap();
    let e = WebsiteTask::load(&spec).unwrap_err();
    assert!(format!("{e:#}").contains("is not a reward model folder"), "{e:#}");
    std::fs::create_dir(dir.path().join("rm")).unwrap();
    std::fs::write(dir.path().join("rm/reward_model.json"), "{}").unwrap();
    let t = WebsiteTask::load(&spec).unwrap();
    let l = t.learned_reward().unwrap();
    assert_eq!(
        (l.model().unwrap().to_path_buf(), l.threshold, l.decides),
        (dir.path().join("rm"), 0.5, true)
    );
}

#[test]
fn variables_expand_once_and_their_expansion_is_bounded() {
    let spec = WebsiteSpec::parse(
        "start_url = \"/x.html\"\ninstruction = \"{a} and {a}, {n}\"\n[variables]\na = [\"{n}{n}\", \"xy\"]\nn = { min = -50, max = 7 }\n[success]\nurl_pattern = \"done\"\n",
    )
    .unwrap();
    let vars: BTreeMap<String, String> = [("a".into(), "{n}{n}".into()), ("n".into(), "-5".into())].into();
    // A value is not expanded again: `{n}` inside `a`'s value stays as written.
    assert_eq!(fill("{a} and {a}, {n} {b} {", &vars), "{n}{n} and {n}{n}, -5 {b} {");
    // Two uses of `a` (6 characters at most) and one of `n` (3: "-50").
    assert_eq!(spec.expanded_chars(&spec.instruction), "{a} and {a}, {n}".len() + 2 * (6 - 3)); // {n}: 3 digits at most, as long as its template
    for seed in 0..20 {
        let drawn = spec.draw(seed);
        assert!(fill(&spec.instruction, &drawn).chars().count() <= spec.expanded_chars(&spec.instruction));
    }
}

#[test]
fn a_spec_is_one_task_however_its_path_is_written() {
    for written in ["specs/x.toml", "./specs/x.toml", "specs/./x.toml", "specs//x.toml"] {
        assert_eq!(spec_id(Path::new(written)), "specs/x.toml", "{written}");
    }
    assert_eq!(spec_id(Path::new("/abs/./x.toml")), "/abs/x.toml");
    assert_eq!(spec_id(Path::new("../up/x.toml")), "../up/x.toml");
    // `x/..` cancels where `x` is a folder, not where it is a link or nothing
    let tmp = tempfile::tempdir().unwrap();
    let at = |p: &str| tmp.path().join(p).display().to_string();
    std::fs::create_dir_all(tmp.path().join("specs")).unwrap();
    std::fs::create_dir_all(tmp.path().join("deep/er")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("deep/er"), tmp.path().join("link")).unwrap();
    assert_eq!(spec_id(Path::new(&at("specs/../specs/x.toml"))), at("specs/x.toml"));
    assert_eq!(spec_id(Path::new(&at("deep/er/../../specs/x.toml"))), at("specs/x.toml"));
    assert_eq!(spec_id(Path::new(&at("link/../specs/x.toml"))), at("link/../specs/x.toml"));
    assert_eq!(spec_id(Path::new(&at("none/../specs/x.toml"))), at("none/../specs/x.toml"));
    assert_eq!(spec_id(Path::new("/../x.toml")), "/../x.toml");
}
