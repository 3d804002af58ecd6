//! Errors a user can cause get a clear message and a non-zero exit code.

use crate::common;

use common::{fails_with, guirl, repo};
use std::process::Command;

#[test]
fn unknown_task_lists_the_closest_ids() {
    let out = guirl(&["run", "--task", "miniwob/click-tset", "--episodes", "1"]);
    fails_with(&out, &["unknown task \"miniwob/click-tset\"", "miniwob/click-test", "guirl tasks"]);
    // A name like none is not given five unrelated ones (the shared `miniwob/` made any
    // name look close).
    let out = guirl(&["run", "--task", "miniwob/nope", "--episodes", "1"]);
    fails_with(&out, &["unknown task \"miniwob/nope\"", "No task id is close to it", "guirl tasks"]);
    // A MiniWoB++ name under the built-in suite finds its MiniWoB++ task.
    let out = guirl(&["run", "--task", "builtin/click-test", "--episodes", "1"]);
    fails_with(&out, &["Closest task ids: miniwob/click-test"]);
}

#[test]
fn missing_chromedriver_names_the_apt_get_command() {
    let out = guirl(&[
        "run",
        "--task",
        "miniwob/click-test",
        "--episodes",
        "1",
        "--chromedriver",
        "/nonexistent/chromedriver",
    ]);
    fails_with(
        &out,
        &[
            "chromedriver not found at /nonexistent/chromedriver",
            "apt-get install -y chromium chromium-driver",
        ],
    );
}

#[test]
fn missing_chromium_names_the_apt_get_command() {
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--episodes", "1"])
        .env("GUIRL_CHROMIUM", "/nonexistent/chromium")
        .output()
        .unwrap();
    fails_with(&out, &["chromium not found", "apt-get install"]);
}

#[test]
fn page_that_does_not_load_names_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("dead.toml");
    std::fs::write(&spec, "start_url = \"http://127.0.0.1:9/nothing.html\"\ninstruction = \"x\"\n[success]\nurl_pattern = \"y\"\n").unwrap();
    let out = guirl(&["run", "--task", spec.to_str().unwrap(), "--episodes", "1"]);
    fails_with(&out, &["http://127.0.0.1:9/nothing.html", "did not load"]);

    let spec404 = dir.path().join("missing.toml");
    std::fs::write(&spec404, "start_url = \"/fixtures/pages/no-such-page.html\"\ninstruction = \"x\"\n[success]\nurl_pattern = \"y\"\n").unwrap();
    let out = guirl(&["run", "--task", spec404.to_str().unwrap(), "--episodes", "1"]);
    fails_with(&out, &["/fixtures/pages/no-such-page.html", "did not load"]);
}

#[test]
fn bad_task_specs_are_rejected_with_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("unknown.toml", "start_url = \"/x\"\ninstruction = \"x\"\nmax_stepz = 3\n[success]\nurl_pattern = \"y\"\n", "max_stepz"),
        ("syntax.toml", "start_url = \"/x\n", "syntax.toml"),
        ("range.toml", "start_url = \"/x\"\ninstruction = \"x\"\n[viewport]\nwidth = 5\nheight = 100\n[success]\nurl_pattern = \"y\"\n", "viewport.width"),
        ("type.toml", "start_url = \"/x\"\ninstruction = \"x\"\nmax_steps = \"ten\"\n[success]\nurl_pattern = \"y\"\n", "max_steps"),
        ("relative.toml", "start_url = \"site/form.html\"\ninstruction = \"x\"\n[success]\njs = \"true\"\n", "file:///absolute/path"),
        ("nofile.toml", "start_url = \"file:///no/such/form.html\"\ninstruction = \"x\"\n[success]\njs = \"true\"\n", "no such file /no/such/form.html"),
        ("variable.toml", "start_url = \"/x\"\ninstruction = \"x\"\n[variables]\na = \"Ann\"\n[success]\njs = \"true\"\n", "an array of strings"),
    ];
    for (name, text, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let out = guirl(&["run", "--task", p.to_str().unwrap(), "--episodes", "1"]);
        fails_with(&out, &[needle, "invalid task spec"]);
    }
    // a page given as the task
    let page = dir.path().join("form.html");
    std::fs::write(&page, "<button>x</button>").unwrap();
    let out = guirl(&["run", "--task", page.to_str().unwrap(), "--episodes", "1"]);
    fails_with(&out, &["is a page, not a task", "start_url", "docs/tasks.md"]);
}

#[test]
fn bad_arguments_are_explained() {
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--policy", "smart"]),
        &["unknown policy \"smart\""],
    );
    // A path is a checkpoint that is not there, not an unknown kind of policy.
    fails_with(
        &guirl(&["bench", "--tasks", "miniwob/click-test", "--policy", "/no/such/run", "--out", "/tmp/x"]),
        &["policy /no/such/run does not exist"],
    );
    fails_with(
        &guirl(&["bench", "--tasks", "miniwob/click-test,,builtin/counter", "--out", "/tmp/x"]),
        &["has an empty entry", "single commas"],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--envs", "0"]),
        &["--envs must be at least 1"],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--episodes", "0"]),
        &["--episodes must be at least 1"],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--seed", "18446744073709551615", "--episodes", "2"]),
        &["runs seeds past the largest", "use a smaller --seed"],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/terminal", "--policy", "oracle"]),
        &["no oracle for task miniwob/terminal"],
    );
    fails_with(&guirl(&["tasks", "--suite", "nope"]), &["invalid value 'nope'"]);
    // bench-env refuses counts that measure nothing before starting a browser
    fails_with(&guirl(&["bench-env", "--envs", "1,0"]), &["invalid value '0' for '--envs", "1..=64"]);
    fails_with(&guirl(&["bench-env", "--steps", "0"]), &["invalid value '0' for '--steps"]);
    fails_with(&guirl(&["bench-env", "--resets", "0"]), &["invalid value '0' for '--resets"]);
    fails_with(
        &guirl(&["bench-env", "--baseline", "--baseline-python", "/nonexistent/python"]),
        &["/nonexistent/python, which is not there", "benches/setup_baseline.sh"],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--temperature=-1"]),
        &["--temperature must be 0 (greedy) or positive"],
    );
    // A device is where a checkpoint runs: named wrong, asked of a policy with no model,
    // or a GPU that is not there (no GPU 99, whatever the build).
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--device", "gpu"]),
        &["\"cuda:N\"", "\"gpu\""],
    );
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--device", "cuda"]),
        &["--device cuda:0 is where a checkpoint policy runs", "\"random\" runs no model here"],
    );
    let ckpt = tempfile::tempdir().unwrap();
    let tiny = guirl::policy::vlm::VlmPolicy::new(
        guirl::policy::vlm::VlmConfig::tiny(),
        &candle_core::Device::Cpu,
        0,
    );
    guirl::policy::TrainablePolicy::save(&tiny.unwrap(), ckpt.path()).unwrap();
    let at = ckpt.path().to_str().unwrap();
    for cmd in [
        &["run", "--task", "miniwob/click-test", "--policy", at][..],
        &["serve-policy", at, "--bind", "127.0.0.1:0"],
    ] {
        let mut args = cmd.to_vec();
        args.extend(["--device", "cuda:99"]);
        fails_with(&guirl(&args), &["cuda:99: no such CUDA device", "--features cuda"]);
    }
    // Both servers refuse a connection cap too small to serve a client and a health check.
    for cmd in [&["serve", "--bind", "127.0.0.1:0"][..], &["serve-policy", at, "--bind", "127.0.0.1:0"]] {
        let mut args = cmd.to_vec();
        args.extend(["--max-connections", "2"]);
        fails_with(&guirl(&args), &["--max-connections must be at least 4"]);
    }
    // On the CPU it runs, and the score says what the checkpoint read.
    let out = guirl(&[
        "run",
        "--task",
        "miniwob/click-test",
        "--policy",
        at,
        "--device",
        "cpu",
        "--episodes",
        "1",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["observation"], &v["episodes"]), (&serde_json::json!("pixels"), &serde_json::json!(1)));
    // Values that would measure something else than asked, refused before a browser starts.
    let bench = |extra: &[&str]| {
        let mut args = vec!["bench", "--tasks", "builtin/counter", "--out", "/tmp/guirl-never-written"];
        args.extend_from_slice(extra);
        guirl(&args)
    };
    fails_with(
        &bench(&["--virtual-time-ms", "100", "--free-frames"]),
        &["--virtual-time-ms needs begin-frame", "--free-frames"],
    );
    fails_with(&bench(&["--wall-clock-ms", "0"]), &["--wall-clock-ms must be at least 1"]);
    fails_with(&bench(&["--command-timeout", "0"]), &["--command-timeout", "at least 1"]);
    fails_with(&bench(&["--episodes-per-task", "4294967295"]), &["at most 1000000 a task"]);
    fails_with(
        &bench(&["--seed", "18446744073709551615", "--episodes-per-task", "2"]),
        &["runs seeds past the largest"],
    );
    assert!(!std::path::Path::new("/tmp/guirl-never-written").exists(), "a refused bench writes no folder");
}

/// `--record` appends to a trajectory set; it refuses a folder of other files and a
/// bench's folders (whose sets its journal indexes), before any browser starts.
#[test]
fn record_refuses_a_folder_that_is_no_set_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let bench = dir.path().join("bench");
    std::fs::create_dir_all(bench.join("trajectories/miniwob/click-test")).unwrap();
    std::fs::write(bench.join("bench.json"), "{}").unwrap();
    let inside = bench.join("trajectories/miniwob/click-test");
    for cmd in ["run", "play"] {
        fails_with(
            &guirl(&[cmd, "--task", "miniwob/click-test", "--record", inside.to_str().unwrap()]),
            &["inside the bench folder", "a folder of your own"],
        );
    }
    let notes = dir.path().join("notes");
    std::fs::create_dir_all(&notes).unwrap();
    std::fs::write(notes.join("todo.txt"), "x").unwrap();
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--record", notes.to_str().unwrap()]),
        &["holds other files and no trajectory set", "new or empty folder"],
    );
    assert!(!notes.join("trajectories.jsonl").exists() && !inside.join("trajectories.jsonl").exists());
    // A set that does not read is not appended to.
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::write(broken.join("trajectories.jsonl"), "not json\nnot json\n").unwrap();
    fails_with(
        &guirl(&["run", "--task", "miniwob/click-test", "--record", broken.to_str().unwrap()]),
        &["does not read", "repair it, or record elsewhere"],
    );
}

#[test]
fn run_prints_episodes_and_summary_and_json() {
    let out = guirl(&[
        "run",
        "--task",
        "miniwob/click-test",
        "--policy",
        "oracle",
        "--episodes",
        "3",
        "--seed",
        "7",
        "--envs",
        "2",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(text.contains("seed=7 ") && text.contains("seed=9 "), "{text}");
    assert_eq!(
        lines[3..],
        [
            "observation: n/a (the oracle reads the page's state, not a model's input)",
            "episodes=3 success_rate=1.000 mean_reward=1.000"
        ]
    );

    let out = guirl(&[
        "run",
        "--task",
        repo("environments/websites/newsletter.toml").to_str().unwrap(),
        "--episodes",
        "2",
        "--json",
        "--max-steps",
        "2",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["episodes"], 2);
    assert_eq!(v["per_episode"][1]["seed"], 1);
    assert_eq!(v["per_episode"][0]["status"], "truncated");
    assert!(v["success_rate"].is_number() && v["mean_reward"].is_number());
}

#[test]
fn tasks_lists_both_suites() {
    let out = guirl(&["tasks", "--suite", "builtin"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().count() >= 8 && text.lines().all(|l| l.starts_with("builtin/")), "{text}");
    let out = guirl(&["tasks", "--suite", "miniwob"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().any(|l| l == "miniwob/click-test"), "{text}");
    assert!(text.lines().count() > 100);
}

#[test]
fn a_policy_path_that_is_no_checkpoint_lists_the_forms() {
    let dir = tempfile::tempdir().unwrap();
    let out = guirl(&["run", "--task", "miniwob/click-test", "--policy", dir.path().to_str().unwrap()]);
    fails_with(&out, &["is not a policy checkpoint", "a run folder", "RUN/checkpoints/latest"]);
}

#[test]
fn train_keeps_one_run_per_folder() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let write_config = |name: &str, lr: &str| {
        let p = root.path().join(name);
        let task = repo("fixtures/tasks/two-buttons.toml");
        let text = format!(
            "[run]\nname = \"x\"\niterations = 2\n[tasks]\nids = [\"{}\"]\n[model]\npreset = \"tiny\"\n[algo]\nlr = {lr}\n",
            task.display()
        );
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let (a, b) = (write_config("a.toml", "1e-3"), write_config("b.toml", "1e-2"));
    let out_dir = run.to_str().unwrap();
    // Metrics of an earlier run that never reached a checkpoint: not merged into a new one.
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "{\"iteration\": 0}\n").unwrap();
    fails_with(
        &guirl(&["train", &a, "--out", out_dir]),
        &["holds metrics.jsonl of an earlier run", "choose another --out"],
    );
    // A run with a checkpoint, resumed with another config: the differences are listed.
    let cfg = guirl::train::TrainConfig::load(std::path::Path::new(&a)).unwrap();
    let r2 = root.path().join("r2");
    guirl::train::run_folder::prepare(&r2, &cfg, false, false).unwrap();
    let policy = cfg.model.build(&candle_core::Device::Cpu, 0).unwrap();
    let opt = guirl::train::AdamW::new(policy.trainable_vars(), cfg.algo.adamw_config()).unwrap();
    guirl::train::checkpoint::save(&r2, policy.as_ref(), &opt, &Default::default()).unwrap();
    fails_with(
        &guirl(&["train", &b, "--out", r2.to_str().unwrap(), "--resume"]),
        &["differs from the one the run", "algo.lr: 0.001 → 0.01", "--force"],
    );
    fails_with(&guirl(&["train", &b, "--out", r2.to_str().unwrap(), "--force"]), &["--resume"]);
    // A config of the old [algo] form (as an older guirl saved into run folders): refused
    // with its new form printed; with --resume read as the new form, announced, and
    // compared so (the keys it drops did nothing under grpo: only lr differs).
    let old = root.path().join("old.toml");
    let old_text = std::fs::read_to_string(&b)
        .unwrap()
        .replace("[algo]\n", "[algo]\ngae_lambda = 0.95\ngigpo_omega = 1.0\nscale_std = true\n");
    std::fs::write(&old, old_text).unwrap();
    let old = old.to_str().unwrap();
    fails_with(
        &guirl(&["train", old, "--out", root.path().join("r3").to_str().unwrap()]),
        &[
            "[algo] is in the old form (keys gae_lambda, gigpo_omega, scale_std)",
            "Replace your [algo] table",
            "[algo]\nlr = 0.01",
        ],
    );
    let out = guirl(&["train", old, "--out", r2.to_str().unwrap(), "--resume"]);
    fails_with(
        &out,
        &[
            "the old [algo] form, read as the new form",
            "algo.gae_lambda = 0.95 dropped",
            "algo.lr: 0.001 → 0.01",
        ],
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("algo.gae_lambda: "), "no other difference");
    // --resume without a config reads the run folder's; it needs the folder
    fails_with(&guirl(&["train", "--resume"]), &["--resume without a config needs --out RUN_FOLDER"]);
    let nowhere = root.path().join("nowhere");
    fails_with(
        &guirl(&["train", "--resume", "--out", nowhere.to_str().unwrap()]),
        &[
            "--resume: ",
            "nowhere does not exist (a typo?); --resume continues a run folder that \
             `guirl train CONFIG --out DIR` made",
        ],
    );
    assert!(!nowhere.exists(), "a failed resume creates no folder");
    // a folder, but no run's: said to be none (it has no config.toml)
    let plain = root.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let out = guirl(&["train", "--resume", "--out", plain.to_str().unwrap()]);
    fails_with(&out, &[&format!("--resume: {} is not a run folder: it has no config.toml", plain.display())]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    // a finished run, resumed: nothing to train, and it says what would continue it
    let r4 = root.path().join("r4");
    guirl::train::run_folder::prepare(&r4, &cfg, false, false).unwrap();
    // (its best recorded with the path of the folder it was copied from)
    let best = Some((0.5, "/elsewhere/run/checkpoints/iter-000002".to_string()));
    // (trained on 2 ranks: a resume in one process is warned about)
    let done = guirl::train::checkpoint::TrainerState {
        iteration: 2,
        best_eval: best,
        world_size: 2,
        ..Default::default()
    };
    let saved = guirl::train::checkpoint::save(&r4, policy.as_ref(), &opt, &done).unwrap();
    guirl::train::checkpoint::mark_best(&r4, &saved).unwrap();
    let out = guirl(&["train", "--resume", "--out", r4.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("already at iteration 2 of run.iterations = 2") && err.contains("raise run.iterations"),
        "{err}"
    );
    assert!(
        err.contains("trained on 2 ranks, and now continues on 1 process: its results will differ")
            && err.contains(&format!("`guirl train --resume --nproc 2 --out {}`", r4.display())),
        "{err}"
    );
    // The summary names the folder's own best checkpoint, not the recorded path.
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains(&format!("best={}", saved.display())), "{summary}");
}

/// A data-parallel rank other than 0 marks its final error line as it marks its log
/// lines, so the ranks' errors can be told apart in one terminal.
#[test]
fn a_rank_s_error_line_carries_its_rank() {
    let root = tempfile::tempdir().unwrap();
    let cfg = root.path().join("c.toml");
    std::fs::write(&cfg, "[run]\nname = \"x\"\niterations = 1\n[tasks]\nids = [\"builtin/two-buttons\"]\n")
        .unwrap();
    let rank = |r: &str| {
        Command::new(env!("CARGO_BIN_EXE_guirl"))
            .args(["train", cfg.to_str().unwrap(), "--nproc", "2"])
            .env("WORLD_SIZE", "2")
            .env("RANK", r)
            .output()
            .unwrap()
    };
    let said = "error: --nproc 2 in a process that already is one rank of a run";
    fails_with(&rank("1"), &[&format!("[rank 1] {said}")]);
    let out = rank("0");
    fails_with(&out, &[said]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("[rank"), "rank 0 speaks for the run unmarked");
}

/// `guirl train --example-config` prints the documented example, which parses as a
/// config; `guirl train` with neither a config nor the flag says what it needs.
#[test]
fn train_prints_its_example_config() {
    let out = guirl(&["train", "--example-config"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[algo]") && text.contains("give_up_reward"), "{text}");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("example.toml");
    std::fs::write(&p, &text).unwrap();
    guirl::train::TrainConfig::load(&p).expect("the printed example is a valid config");
    assert!(text.contains("\n# [algo.ppo]\n# gae_lambda = 0.95"), "each kind's table, commented out");
    // One kind's example: its table written out, and it loads as that kind.
    let out = guirl(&["train", "--example-config", "--kind", "ppo"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\n[algo.ppo]") && text.contains("\ngae_lambda = 0.95"), "{text}");
    std::fs::write(&p, &text).unwrap();
    let c = guirl::train::TrainConfig::load(&p).expect("the printed PPO example is a valid config");
    assert_eq!(c.algo.kind(), guirl::train::config::AlgoKind::Ppo);
    fails_with(
        &guirl(&["train", "--example-config", "--kind", "a2c"]),
        &["invalid value 'a2c' for '--kind <KIND>'", "reinforce_pp, gigpo, ppo"],
    );
    // a kind in capitals is the same kind; a config beside --example-config is refused, not
    // ignored
    let out = guirl(&["train", "--example-config", "--kind", "PPO"]);
    assert!(String::from_utf8(out.stdout).unwrap().contains("\n[algo.ppo]"));
    fails_with(
        &guirl(&["train", "--example-config", "configs/click-test.toml"]),
        &["'--example-config' cannot be used with '[CONFIG]'"],
    );
    fails_with(
        &guirl(&["train", "configs/click-test.toml", "--kind", "ppo"]),
        &["--kind and --model-kind choose the example --example-config prints", "[algo] kind"],
    );
    // One policy kind's example: its [model] keys written out, and it loads as that kind
    // (with an algorithm's too).
    let out = guirl(&["train", "--example-config", "--model-kind", "qwen2_5_vl", "--kind", "ppo"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\nkind = \"qwen2_5_vl\"") && text.contains("\nlora_rank = 16"), "{text}");
    std::fs::write(&p, &text).unwrap();
    let c = guirl::train::TrainConfig::load(&p).expect("the printed Qwen2.5-VL example is a valid config");
    assert_eq!(
        (c.model.kind(), c.algo.kind()),
        (guirl::train::config::ModelKind::Qwen25Vl, guirl::train::config::AlgoKind::Ppo)
    );
    fails_with(
        &guirl(&["train", "--example-config", "--model-kind", "llava"]),
        &[
            "invalid value 'llava' for '--model-kind <KIND>'",
            "[possible values: small, qwen3_vl, qwen2_5_vl]",
        ],
    );
    fails_with(&guirl(&["train"]), &["<CONFIG>"]);
}

/// A run whose every episode failed for infrastructure (here an endpoint nobody listens
/// on) measured nothing: it says so and exits non-zero, in text and in JSON. Its warnings
/// reach a pipe without colour codes.
#[test]
fn an_infrastructure_only_run_measured_nothing() {
    // A port that was free a moment ago: connections to it are refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let policy = format!("openai:m@http://127.0.0.1:{port}/v1");
    let args =
        ["run", "--task", "miniwob/click-test", "--policy", &policy, "--episodes", "2", "--api-retries", "0"];
    let out = guirl(&args);
    fails_with(&out, &["nothing was measured", "all 2 episodes ended in infrastructure errors"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("success_rate=none"), "{text}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot list the models"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "colour codes in piped output: {stderr:?}");

    let out = guirl(&[&args[..], &["--json"]].concat());
    assert!(!out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["success_rate"].is_null() && v["mean_reward"].is_null(), "{v}");
    assert_eq!(v["infrastructure_errors"], 2);
}

/// A backbone that does not load stops `guirl train` before it makes the run folder, so
/// the next try does not meet an empty run in its way.
#[test]
fn a_checkpoint_that_does_not_load_leaves_no_run_folder() {
    let root = tempfile::tempdir().unwrap();
    let empty = root.path().join("not-a-checkpoint");
    std::fs::create_dir_all(&empty).unwrap();
    let cfg = root.path().join("q.toml");
    std::fs::write(
        &cfg,
        format!(
            "[run]\nname = \"q\"\niterations = 1\n[tasks]\nids = [\"miniwob/click-test\"]\n\
             [model]\nkind = \"qwen3_vl\"\npath = \"{}\"\n",
            empty.display()
        ),
    )
    .unwrap();
    let run = root.path().join("run");
    fails_with(&guirl(&["train", cfg.to_str().unwrap(), "--out", run.to_str().unwrap()]), &["config.json"]);
    assert!(!run.exists(), "a failed load left {}", run.display());
}

#[test]
fn a_log_filter_comes_from_guirl_log_else_rust_log_and_a_bad_one_is_said() {
    let tasks = |vars: &[(&str, &str)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_guirl"));
        cmd.args(["tasks", "--suite", "builtin"]).env_remove("GUIRL_LOG").env_remove("RUST_LOG");
        for (k, v) in vars {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // RUST_LOG is read when GUIRL_LOG is not set: a filter that does not parse is said.
    let err = tasks(&[("RUST_LOG", "guirl=loudest")]);
    assert!(err.contains("RUST_LOG=\"guirl=loudest\" is not a log filter"), "{err}");
    // GUIRL_LOG comes first: RUST_LOG is then not read at all.
    let err = tasks(&[("GUIRL_LOG", "warn"), ("RUST_LOG", "guirl=loudest")]);
    assert!(!err.contains("not a log filter"), "{err}");
    let err = tasks(&[("GUIRL_LOG", "guirl=loudest")]);
    assert!(
        err.contains("GUIRL_LOG=\"guirl=loudest\" is not a log filter") && err.contains("GUIRL_LOG=debug"),
        "{err}"
    );
}
