//! Checkpoints on disk: saves survive SIGKILL at any moment, and every form a policy
//! checkpoint can be given in resolves to a loadable folder (real tiny policy, real files).

use candle_core::Device;
use guirl::policy::vlm::{VlmConfig, VlmPolicy};
use guirl::train::checkpoint::{self, resolve_policy_dir, TrainerState};
use guirl::train::{AdamW, AdamWConfig};
use rand::Rng;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::test_name;

/// Set in the child process of `saves_survive_sigkill`: the run folder to save into.
const CHILD_ENV: &str = "GUIRL_TEST_SAVE_LOOP";

fn tiny() -> (VlmPolicy, AdamW) {
    let p = VlmPolicy::new(VlmConfig::tiny(), &Device::Cpu, 1).unwrap();
    let opt = AdamW::new(guirl::policy::TrainablePolicy::trainable_vars(&p), AdamWConfig::default()).unwrap();
    (p, opt)
}

fn state(iteration: u64, env_steps: u64) -> TrainerState {
    TrainerState { iteration, env_steps, ..Default::default() }
}

/// The child: save checkpoints in a loop until killed, each iteration twice (the second
/// save replaces the folder), every third save also marked best. Continues from the
/// previous child's latest checkpoint.
fn save_loop(run: &Path) -> ! {
    let (policy, mut opt) = tiny();
    let mut n = match checkpoint::latest(run).unwrap() {
        Some(dir) => checkpoint::load_state(&dir, &mut opt).unwrap().env_steps + 1,
        None => 0,
    };
    loop {
        let dir = checkpoint::save(run, &policy, &opt, &state(n / 2, n)).unwrap();
        if n % 3 == 0 {
            checkpoint::mark_best(run, &dir).unwrap();
        }
        println!("saved {n}");
        n += 1;
    }
}

/// Every pointer of the run names a checkpoint the policy and the trainer can load.
fn check_loadable(run: &Path) -> u64 {
    let latest = checkpoint::latest(run).unwrap().expect("a checkpoint after the first save");
    VlmPolicy::load(&latest, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e:#}", latest.display()));
    let (_, mut opt) = tiny();
    let st = checkpoint::load_state(&latest, &mut opt).unwrap();
    for best in [checkpoint::best(run).unwrap().expect("the first save is marked best")]
        .into_iter()
        .chain([resolve_policy_dir(run).unwrap().dir])
    {
        VlmPolicy::load(&best, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e:#}", best.display()));
        checkpoint::load_state(&best, &mut opt).unwrap();
    }
    st.env_steps
}

fn leftovers(run: &Path) -> Vec<String> {
    let names = std::fs::read_dir(checkpoint::checkpoints_dir(run)).unwrap().flatten();
    names.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with('.')).collect()
}

#[test]
fn saves_survive_sigkill() {
    if let Ok(run) = std::env::var(CHILD_ENV) {
        save_loop(Path::new(&run));
    }
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let mut rng = rand::thread_rng();
    let (mut last, mut torn_saves) = (0, 0);
    for round in 0..8 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test_name(module_path!(), "saves_survive_sigkill")])
            .args(["--nocapture", "--test-threads", "1"])
            .env(CHILD_ENV, &run)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        // Kill at a random moment after the child's first save.
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("saved ") {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "the child exited before saving");
        }
        std::thread::sleep(Duration::from_millis(rng.gen_range(0..150)));
        child.kill().unwrap();
        child.wait().unwrap();
        torn_saves += usize::from(!leftovers(&run).is_empty());
        let steps = check_loadable(&run);
        assert!(round == 0 || steps > last, "round {round}: the child went on from the last checkpoint");
        last = steps;
    }
    // The children are gone: their temporary folders go at the next open.
    checkpoint::remove_leftovers(&run);
    assert_eq!(leftovers(&run), Vec::<String>::new());
    check_loadable(&run);
    eprintln!("8 kills, {torn_saves} of them mid-save; {last} saves in all");
}

/// A run with checkpoints 1, 2, 3 (2 the best), saved for real.
fn run_with_checkpoints(run: &Path, best: Option<u64>) -> Vec<PathBuf> {
    let (p, opt) = tiny();
    let dirs: Vec<PathBuf> =
        (1..=3).map(|i| checkpoint::save(run, &p, &opt, &state(i, i)).unwrap()).collect();
    if let Some(b) = best {
        checkpoint::mark_best(run, &dirs[b as usize - 1]).unwrap();
    }
    std::fs::write(run.join("config.toml"), "").unwrap();
    dirs
}

fn resolves_to(path: &Path, want: &Path) -> Option<String> {
    let got = resolve_policy_dir(path).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    assert_eq!(got.dir, want, "{}", path.display());
    VlmPolicy::load(&got.dir, &Device::Cpu).unwrap();
    got.note
}

#[test]
fn every_policy_form_resolves() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let d = run_with_checkpoints(&run, Some(2));
    assert_eq!(resolves_to(&d[0], &d[0]), None, "a checkpoint folder is itself");
    let note = resolves_to(&run, &d[1]).expect("a run folder says which checkpoint");
    assert!(note.contains("best checkpoint") && note.contains("iter-000002"), "{note}");
    assert_eq!(resolves_to(&run.join("checkpoints/latest"), &d[2]), None);
    assert_eq!(resolves_to(&run.join("checkpoints/best"), &d[1]), None);
    // The links are relative: a moved run folder still reads.
    let moved = root.path().join("moved");
    std::fs::rename(&run, &moved).unwrap();
    resolves_to(&moved.join("checkpoints/best"), &moved.join("checkpoints/iter-000002"));

    // No evaluation yet: the latest checkpoint, and the note says so.
    let fresh = root.path().join("fresh");
    let d = run_with_checkpoints(&fresh, None);
    let note = resolves_to(&fresh, &d[2]).unwrap();
    assert!(note.contains("latest checkpoint") && note.contains("no best"), "{note}");
}

#[test]
fn pointer_files_of_older_runs_still_read() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("old");
    let d = run_with_checkpoints(&run, None);
    // What guirl wrote before the links: `checkpoints/latest` holding the folder's name,
    // and `RUN/best` holding its path as given on the command line.
    let ckpts = checkpoint::checkpoints_dir(&run);
    std::fs::remove_file(ckpts.join("latest")).unwrap();
    std::fs::write(ckpts.join("latest"), "iter-000002").unwrap();
    std::fs::write(run.join("best"), "runs/old/checkpoints/iter-000001").unwrap();
    assert_eq!(checkpoint::latest(&run).unwrap(), Some(d[1].clone()));
    assert_eq!(checkpoint::best(&run).unwrap(), Some(d[0].clone()));
    resolves_to(&ckpts.join("latest"), &d[1]);
    resolves_to(&run.join("best"), &d[0]);
    resolves_to(&run, &d[0]);
    // The next save and mark replace them with links.
    let (p, opt) = tiny();
    let d4 = checkpoint::save(&run, &p, &opt, &state(4, 4)).unwrap();
    checkpoint::mark_best(&run, &d4).unwrap();
    assert!(std::fs::symlink_metadata(ckpts.join("latest")).unwrap().is_symlink());
    assert!(!run.join("best").exists(), "the old pointer file would name an older best");
    resolves_to(&run, &d4);
}

#[test]
fn what_is_not_a_policy_is_explained() {
    let root = tempfile::tempdir().unwrap();
    let msg = |p: &Path| format!("{:#}", resolve_policy_dir(p).unwrap_err());
    let forms = ["a checkpoint folder", "a run folder", "RUN/checkpoints/latest", "RUN/checkpoints/best"];
    let e = msg(root.path());
    assert!(e.contains("is not a policy checkpoint") && forms.iter().all(|f| e.contains(f)), "{e}");
    let e = msg(&root.path().join("nope"));
    assert!(e.contains("does not exist") && e.contains("a run folder"), "{e}");
    let empty_run = root.path().join("run");
    std::fs::create_dir_all(empty_run.join("checkpoints")).unwrap();
    let e = msg(&empty_run);
    assert!(e.contains("has no checkpoint yet"), "{e}");
    // A link to a checkpoint that was deleted says so.
    std::os::unix::fs::symlink("iter-000007", empty_run.join("checkpoints/latest")).unwrap();
    let e = format!("{:#}", checkpoint::latest(&empty_run).unwrap_err());
    assert!(e.contains("iter-000007, which does not exist") && e.contains("ln -sfn"), "{e}");
}

/// `guirl run --policy RUN` plays the run's best checkpoint in a real browser and says
/// which one on stderr.
#[test]
fn guirl_run_takes_a_run_folder() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    run_with_checkpoints(&run, Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_guirl"))
        .args(["run", "--task", "miniwob/click-test", "--episodes", "1", "--policy"])
        .arg(&run)
        .arg("--record")
        .arg(root.path().join("rec"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("using its best checkpoint") && err.contains("iter-000002"), "{err}");
    // the recording says which checkpoint acted, not only the policy's shape
    let set = guirl::rollout::TrajectorySet::read(&root.path().join("rec")).unwrap();
    let policy = &set.trajectories[0].trajectory.policy;
    assert!(
        policy.starts_with("vlm(") && policy.contains(" from ") && policy.contains("iter-000002"),
        "{policy}"
    );
}

/// `guirl bench --policy RUN` records the checkpoint the run folder meant. When the run's
/// best moves on, `--resume` goes on with the checkpoint the bench started with (one bench
/// must not mix two policies), says so, and the report names it.
#[test]
fn a_bench_of_a_run_folder_keeps_its_checkpoint() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let d = run_with_checkpoints(&run, Some(2));
    let out = root.path().join("bench");
    let bench = |episodes: &str, resume: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_guirl"));
        c.args(["bench", "--tasks", "miniwob/click-test", "--episodes-per-task", episodes, "--policy"]);
        c.arg(&run).arg("--out").arg(&out);
        if resume {
            c.arg("--resume");
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        err
    };
    let ran = std::fs::canonicalize(&d[1]).unwrap();
    bench("1", false);
    let manifest = guirl::bench::harness::read_manifest(&out).unwrap().unwrap();
    assert_eq!(manifest.checkpoint.as_deref(), Some(ran.as_path()));

    checkpoint::mark_best(&run, &d[2]).unwrap();
    let err = bench("2", true);
    assert!(err.contains("goes on with the checkpoint it ran") && err.contains("iter-000002"), "{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["reproducibility"]["checkpoint"], ran.display().to_string());
    assert_eq!(report["all"]["episodes"], 2);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains(&format!("(checkpoint `{}`)", ran.display())), "{md}");
}
