//! The binary finds its built-in task pages wherever it runs: they are embedded in it, so
//! `cargo install --path .` works from any folder, without the source checkout.

use std::process::Command;

/// `guirl run` of a built-in task with its oracle, from an empty folder, GUIRL_ROOT unset.
/// Where the machine allows a private mount namespace (`unshare -m`, root), the
/// checkout's `environments/` is also hidden under an empty tmpfs, as after the checkout
/// was moved or deleted.
fn run_builtin_elsewhere(hide_checkout: bool) -> std::process::Output {
    let cwd = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_guirl");
    let args = ["run", "--task", "builtin/counter", "--policy", "oracle", "--episodes", "1"];
    let mut cmd = if hide_checkout {
        let environments = concat!(env!("CARGO_MANIFEST_DIR"), "/environments");
        let mut c = Command::new("unshare");
        c.args([
            "-m",
            "sh",
            "-c",
            "mount -t tmpfs none \"$1\" && shift && exec \"$@\"",
            "sh",
            environments,
            bin,
        ]);
        c.args(args);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(args);
        c
    };
    cmd.current_dir(cwd.path()).env_remove("GUIRL_ROOT").output().unwrap()
}

fn can_hide_checkout() -> bool {
    Command::new("unshare")
        .args(["-m", "sh", "-c", "mount -t tmpfs none /mnt"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn builtin_tasks_run_from_any_folder_without_guirl_root() {
    let mut ways = vec![false];
    if can_hide_checkout() {
        ways.push(true);
    } else {
        eprintln!("no private mount namespace here: the checkout stays visible");
    }
    for hide in ways {
        let out = run_builtin_elsewhere(hide);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "hidden checkout {hide}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.ends_with("episodes=1 success_rate=1.000 mean_reward=1.000\n"), "{text}");
    }
}

#[test]
fn guirl_root_overrides_the_embedded_pages() {
    // An override without the pages: the task page is looked for there, and is missing.
    let root = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "builtin/counter", "--policy", "oracle", "--episodes", "1"])
        .env("GUIRL_ROOT", root.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("/builtin/counter/index.html") && err.contains("did not load"), "{err}");
}
