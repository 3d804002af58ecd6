//! `guirl export`: a real recorded set in every layout and format, read back (parquet
//! with the parquet crate, JSON lines with serde); returns and advantages by hand on a
//! hand-made set; and the errors a user can cause.

use crate::common;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, UInt64Type};
use arrow_array::{Array, RecordBatch, StructArray};

use base64::Engine;
use common::{fails_with, guirl};
use guirl::env::{EnvConfig, EpisodeStatus};
use guirl::export::{export, ExportOptions, Format, Layout};
use guirl::policy::oracle::OraclePolicy;
use guirl::policy::random::RandomPolicy;
use guirl::rollout::{
    Collector, Job, Outcome, Recorded, TrajStep, Trajectory, TrajectorySet, TrajectoryWriter,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::path::{Path, PathBuf};

fn read_parquet(path: &Path) -> Vec<RecordBatch> {
    let f = std::fs::File::open(path).unwrap();
    ParquetRecordBatchReaderBuilder::try_new(f).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
}

fn rows(batches: &[RecordBatch]) -> usize {
    batches.iter().map(|b| b.num_rows()).sum()
}

fn decode(png: &[u8]) -> (u32, u32) {
    let img = image::load_from_memory(png).expect("a PNG that decodes");
    (img.width(), img.height())
}

/// The `content` strings of a `list<struct{role, content}>` row.
fn contents(messages: &dyn Array, row: usize) -> Vec<String> {
    let list = messages.as_list::<i32>().value(row);
    let s: &StructArray = list.as_struct();
    let c = s.column_by_name("content").unwrap().as_string::<i32>();
    (0..c.len()).map(|i| c.value(i).to_string()).collect()
}

/// The PNG bytes of a `list<struct{bytes}>` row.
fn image_list(images: &dyn Array, row: usize) -> Vec<Vec<u8>> {
    let list = images.as_list::<i32>().value(row);
    let b = list.as_struct().column_by_name("bytes").unwrap().as_binary::<i32>();
    (0..b.len()).map(|i| b.value(i).to_vec()).collect()
}

/// Every row: one `<image>` per image, and every image a PNG.
fn check_parquet_images(batches: &[RecordBatch], text_col: &str) {
    for b in batches {
        let (msgs, imgs) = (b.column_by_name(text_col).unwrap(), b.column_by_name("images").unwrap());
        for row in 0..b.num_rows() {
            let placeholders: usize = contents(msgs, row).iter().map(|c| c.matches("<image>").count()).sum();
            let images = image_list(imgs, row);
            assert!(!images.is_empty());
            assert_eq!(placeholders, images.len(), "row {row}: <image> count == image count");
            for png in &images {
                decode(png);
            }
        }
    }
}

/// The same check on JSON lines (images are base64 strings).
fn check_jsonl_images(path: &Path, text_col: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for (i, r) in rows.iter().enumerate() {
        let placeholders: usize = r[text_col]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().matches("<image>").count())
            .sum();
        let images = r["images"].as_array().unwrap();
        assert_eq!(placeholders, images.len(), "line {i}");
        for im in images {
            let b64 = im["bytes"].as_str().unwrap();
            decode(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap());
        }
    }
    rows
}

fn opts(format: Format, layout: Layout, out: PathBuf) -> ExportOptions {
    ExportOptions { format, layout, out: Some(out), ..Default::default() }
}

/// Record a real set: two GRPO groups of `builtin/counter` (4-step episodes) with the
/// oracle, two rollouts each, plus one random-policy rollout in the first group (so that
/// group's rewards differ), and two ungrouped oracle episodes.
async fn record_real_set(dir: &Path) {
    let task = guirl::tasks::load_task("builtin/counter").unwrap();
    let mut collector = Collector::new(2, EnvConfig { max_steps: Some(6), ..Default::default() });
    collector.keep_frames = true;
    let mut writer = TrajectoryWriter::open(dir).unwrap();
    let mut jobs = Job::groups(&[(task.clone(), 3), (task.clone(), 4)], 2, 10);
    jobs.extend((5..7).map(|seed| Job { task: task.clone(), seed, group: None, prefix: None, stream: None }));
    let (recs, _) = collector.collect(&mut OraclePolicy, jobs, |_, _| {}).await.unwrap();
    let random_job = vec![Job { task: task.clone(), seed: 3, group: Some(10), prefix: None, stream: None }];
    let (random, _) = collector.collect(&mut RandomPolicy::new(1), random_job, |_, _| {}).await.unwrap();
    collector.close().await;
    for r in recs.iter().chain(&random) {
        writer.append(r).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_set_exports_in_every_layout_and_format() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("set");
    record_real_set(&dir).await;
    let set = TrajectorySet::read(&dir).unwrap();
    let episodes = set.trajectories.len();
    assert_eq!(episodes, 7);
    let steps: usize = set.trajectories.iter().map(|t| t.trajectory.steps.len()).sum();
    assert!(set.trajectories.iter().all(|t| !t.trajectory.outcome.status.is_infrastructure_failure()));

    // rl: one row per episode, one image each, veRL's columns.
    let out = tmp.path().join("rl.parquet");
    let r = export(&set, &opts(Format::Parquet, Layout::Rl, out.clone())).unwrap();
    assert_eq!((r.rows, r.episodes), (episodes, episodes));
    let b = read_parquet(&out);
    assert_eq!(rows(&b), episodes);
    check_parquet_images(&b, "prompt");
    let first = &b[0];
    assert_eq!(
        first.column_by_name("data_source").unwrap().as_string::<i32>().value(0),
        "guirl/builtin/counter"
    );
    assert_eq!(first.column_by_name("ability").unwrap().as_string::<i32>().value(0), "gui");
    let prompt = contents(first.column_by_name("prompt").unwrap(), 0);
    let instruction = &set.trajectories[0].trajectory.instruction;
    assert!(prompt[0].starts_with(&format!("<image>{instruction}")), "{prompt:?}");
    assert!(prompt[0].contains("click(x, y)") && prompt[0].contains("pixels"), "{prompt:?}");
    let rm = first.column_by_name("reward_model").unwrap().as_struct();
    assert_eq!(rm.column_by_name("style").unwrap().as_string::<i32>().value(0), "rule");
    let info = first.column_by_name("extra_info").unwrap().as_struct();
    let idx = info.column_by_name("index").unwrap().as_primitive::<Int64Type>();
    assert_eq!(idx.values().to_vec(), (0..episodes as i64).collect::<Vec<_>>());
    let ep = info.column_by_name("episode").unwrap().as_primitive::<Int64Type>();
    assert_eq!(ep.value(0), 1, "episode is the 1-based line");
    assert_eq!(info.column_by_name("split").unwrap().as_string::<i32>().value(0), "train");
    assert_eq!(info.column_by_name("seed").unwrap().as_primitive::<UInt64Type>().value(0), 3);
    // The image is the frame before step 0, byte for byte.
    let frame0 = set.trajectories[0].trajectory.steps[0].frame.as_deref().unwrap();
    assert_eq!(
        image_list(first.column_by_name("images").unwrap(), 0)[0],
        std::fs::read(set.frame_path(frame0)).unwrap()
    );

    // sft: one row per episode, a user/assistant pair and an image per step.
    let out = tmp.path().join("sft.parquet");
    let r = export(&set, &opts(Format::Parquet, Layout::Sft, out.clone())).unwrap();
    assert_eq!(r.rows, episodes);
    let b = read_parquet(&out);
    check_parquet_images(&b, "messages");
    let mut n_images = 0;
    for batch in &b {
        for row in 0..batch.num_rows() {
            n_images += image_list(batch.column_by_name("images").unwrap(), row).len();
            let msgs = batch.column_by_name("messages").unwrap().as_list::<i32>().value(row);
            let roles = msgs.as_struct().column_by_name("role").unwrap().as_string::<i32>().clone();
            assert!((0..roles.len()).all(|i| roles.value(i) == if i % 2 == 0 { "user" } else { "assistant" }));
            assert_eq!(batch.column_by_name("tools").unwrap().as_list::<i32>().value(row).len(), 0);
        }
    }
    assert_eq!(n_images, steps);
    let sft0 = contents(b[0].column_by_name("messages").unwrap(), 0);
    assert_eq!(sft0[1], set.trajectories[0].trajectory.steps[0].action);
    assert_eq!(sft0[2], "<image>");

    // steps: one row per step; advantages only in groups; the group with a random
    // rollout has nonzero ones.
    let out = tmp.path().join("steps.parquet");
    let r = export(&set, &opts(Format::Parquet, Layout::Steps, out.clone())).unwrap();
    assert_eq!((r.rows, r.episodes), (steps, episodes));
    let b = read_parquet(&out);
    assert_eq!(rows(&b), steps);
    let mut by_episode: std::collections::BTreeMap<i64, (Option<u64>, Option<f64>, f64)> = Default::default();
    for batch in &b {
        let col = |n: &str| batch.column_by_name(n).unwrap().clone();
        let (episode, group) = (col("episode"), col("group"));
        let (adv, ret, img) = (col("advantage"), col("return"), col("image"));
        for row in 0..batch.num_rows() {
            let e = episode.as_primitive::<Int64Type>().value(row);
            let g = group.is_valid(row).then(|| group.as_primitive::<UInt64Type>().value(row));
            let a = adv.is_valid(row).then(|| adv.as_primitive::<Float64Type>().value(row));
            let bytes =
                img.as_struct().column_by_name("bytes").unwrap().as_binary::<i32>().value(row).to_vec();
            decode(&bytes);
            let ret0 = ret.as_primitive::<Float64Type>().value(row);
            by_episode.entry(e).or_insert((g, a, ret0));
        }
    }
    for st in &set.trajectories {
        let t = &st.trajectory;
        let (g, a, ret0) = by_episode[&(st.line as i64)];
        assert_eq!(g, t.group);
        // γ = 1: the return from step 0 is the episode's reward.
        assert!((ret0 - t.outcome.reward).abs() < 1e-9, "line {}: {ret0} vs {}", st.line, t.outcome.reward);
        // (R − mean_g R) / (std_g R + 1e-6), population std, by hand from the recorded rewards.
        let expected = t.group.map(|g| {
            let r: Vec<f64> = set
                .trajectories
                .iter()
                .filter(|o| o.trajectory.group == Some(g))
                .map(|o| o.trajectory.outcome.reward)
                .collect();
            let mean = r.iter().sum::<f64>() / r.len() as f64;
            let std = (r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / r.len() as f64).sqrt();
            (t.outcome.reward - mean) / (std + 1e-6)
        });
        match (a, expected) {
            (Some(a), Some(e)) => assert!((a - e).abs() < 1e-9, "line {}: {a} vs {e}", st.line),
            (None, None) => {}
            other => panic!("line {}: advantage {other:?}", st.line),
        }
    }

    // JSON lines: the same rows, images base64.
    for (layout, col, n) in [(Layout::Rl, "prompt", episodes), (Layout::Sft, "messages", episodes)] {
        let out = tmp.path().join(format!("{}.jsonl", layout.name()));
        export(&set, &opts(Format::Jsonl, layout, out.clone())).unwrap();
        assert_eq!(check_jsonl_images(&out, col).len(), n);
    }
    let out = tmp.path().join("steps.jsonl");
    export(&set, &opts(Format::Jsonl, Layout::Steps, out.clone())).unwrap();
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), steps);
    let png = base64::engine::general_purpose::STANDARD
        .decode(lines[0]["image"]["bytes"].as_str().unwrap())
        .unwrap();
    decode(&png);
    assert!(lines[0]["return"].is_f64() && lines[0].get("advantage").is_some());

    // The CLI's default output goes into the set's folder.
    let out = guirl(&["export", dir.to_str().unwrap(), "--layout", "steps", "--format", "jsonl"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout)
        .contains(&format!("wrote {steps} rows from {episodes} episodes")));
    assert!(dir.join("export-steps.jsonl").is_file());
}

/// A hand-made set: 2×2 screenshots, known rewards.
fn hand_set(dir: &Path) {
    let mut w = TrajectoryWriter::open(dir).unwrap();
    let step = |r: f64, s: EpisodeStatus| TrajStep::new("click(1, 1)", r, s);
    let mut add = |steps: Vec<TrajStep>, reward: f64, status: EpisodeStatus, group: Option<u64>| {
        let n = steps.len() as u32;
        let mut t =
            Trajectory::new("builtin/hand", 7, steps, Outcome { reward, status, steps: n, error: None });
        t.instruction = "Click <image> twice.".into();
        t.group = group;
        // A different colour per frame, so no two consecutive frames are stored once.
        let frames = (0..=n)
            .map(|i| image::RgbImage::from_pixel(2, 2, image::Rgb([i as u8 * 40, 0, 0])).into())
            .collect();
        w.append(&Recorded { trajectory: t, frames }).unwrap();
    };
    use EpisodeStatus::{EnvError, Fail, Running, Success};
    // Group 1: rewards {1, 0} (the env_error rollout is left out).
    add(vec![step(0.0, Running), step(0.0, Running), step(1.0, Success)], 1.0, Success, Some(1));
    // Its first answer held no action: kept (its reward counts), and said.
    let mut unread = TrajStep::new("4, 66)", 0.0, Running);
    unread.action_error = Some("no action found in the answer \"4, 66)\"".into());
    add(vec![unread, step(0.0, Fail)], 0.0, Fail, Some(1));
    add(vec![step(0.0, EnvError)], 0.0, EnvError, Some(1));
    // Ungrouped, and a step reward that does not sum to the episode's (the last step carries the rest).
    add(vec![step(0.25, Running), step(0.0, Success)], 0.5, Success, None);
}

#[test]
fn returns_and_advantages_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    hand_set(tmp.path());
    let set = TrajectorySet::read(tmp.path()).unwrap();
    let out = tmp.path().join("s.jsonl");
    let o = ExportOptions { gamma: 0.5, ..opts(Format::Jsonl, Layout::Steps, out.clone()) };
    let r = export(&set, &o).unwrap();
    assert_eq!((r.rows, r.episodes, r.skipped_infrastructure), (3 + 2 + 2, 3, 1));
    let rows: Vec<serde_json::Value> =
        std::fs::read_to_string(&out).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let col = |k: &str| rows.iter().map(|r| r[k].clone()).collect::<Vec<_>>();
    // γ = 0.5. Episode 1, r = (0, 0, 1): G = (0.25, 0.5, 1). Episode 2, r = (0, 0): G = 0.
    // Episode 4, r = (0.25, 0.25) (last step carries 0.5 − 0.25): G = (0.25 + 0.5·0.25, 0.25).
    let returns: Vec<f64> = col("return").iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(returns, vec![0.25, 0.5, 1.0, 0.0, 0.0, 0.375, 0.25]);
    let rewards: Vec<f64> = col("reward").iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(rewards, vec![0.0, 0.0, 1.0, 0.0, 0.0, 0.25, 0.25]);
    // Group 1, R = {1, 0}: mean 0.5, population std 0.5 → ±0.5 / (0.5 + 1e-6).
    let a = 0.5 / (0.5 + 1e-6);
    let adv: Vec<Option<f64>> = col("advantage").iter().map(|v| v.as_f64()).collect();
    assert_eq!(adv, vec![Some(a), Some(a), Some(a), Some(-a), Some(-a), None, None]);
    let episodes: Vec<i64> = col("episode").iter().map(|v| v.as_i64().unwrap()).collect();
    assert_eq!(episodes, vec![1, 1, 1, 2, 2, 4, 4]);
    assert_eq!(col("status")[2], "success");
    assert_eq!(col("episode_status")[3], "fail");
    // The steps layout defuses placeholders too: a reader that writes `<image>` + prompt
    // must not find a second one inside the instruction.
    assert_eq!(col("prompt")[0], "Click < image> twice.");
    // A step whose answer held no action says why, so it can be left out of imitation.
    let errors: Vec<Option<&str>> = rows.iter().map(|r| r["action_error"].as_str()).collect();
    assert_eq!(errors[3], Some("no action found in the answer \"4, 66)\""));
    assert_eq!(errors.iter().filter(|e| e.is_some()).count(), 1, "{errors:?}");

    // sft leaves the env_error episode out; rl keeps it (a prompt is still a task instance).
    let sft = export(&set, &opts(Format::Jsonl, Layout::Sft, tmp.path().join("sft.jsonl"))).unwrap();
    assert_eq!((sft.rows, sft.skipped_infrastructure), (3, 1));
    let rl = export(&set, &opts(Format::Parquet, Layout::Rl, tmp.path().join("rl.parquet"))).unwrap();
    assert_eq!((rl.rows, rl.skipped_infrastructure), (4, 0));
    // An `<image>` inside the instruction is defused: the count still matches.
    let rows = check_jsonl_images(&tmp.path().join("sft.jsonl"), "messages");
    assert!(rows[0]["messages"][0]["content"].as_str().unwrap().contains("Click < image> twice."));
    let invalid: Vec<u64> = rows.iter().map(|r| r["extra_info"]["invalid_steps"].as_u64().unwrap()).collect();
    assert_eq!(invalid, vec![0, 1, 0]);
    check_parquet_images(&read_parquet(&tmp.path().join("rl.parquet")), "prompt");
}

#[test]
fn a_missing_frame_is_named_or_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    hand_set(tmp.path());
    let set = TrajectorySet::read(tmp.path()).unwrap();
    let gone = set.trajectories[1].trajectory.steps[1].frame.clone().unwrap();
    std::fs::remove_file(set.frame_path(&gone)).unwrap();
    let out = tmp.path().join("x.parquet");
    let err = export(&set, &opts(Format::Parquet, Layout::Sft, out.clone())).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains(&gone) && msg.contains("line 2, step 1") && msg.contains("--skip-missing-frames"),
        "{msg}"
    );
    assert!(!out.exists(), "nothing is left behind on failure");
    assert!(std::fs::read_dir(tmp.path()).unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .starts_with(".export-")));
    let o = ExportOptions { skip_missing_frames: true, ..opts(Format::Parquet, Layout::Sft, out.clone()) };
    let r = export(&set, &o).unwrap();
    assert_eq!((r.rows, r.skipped_missing_frames, r.skipped_infrastructure), (2, 1, 1));
    // A frame that is not a PNG is named too, and one cut short (it passed when only the
    // header was read, and no reader could open the exported image).
    std::fs::write(set.frame_path(&gone), b"not a png").unwrap();
    let o = ExportOptions { force: true, ..opts(Format::Jsonl, Layout::Steps, out) };
    let err = export(&set, &o).unwrap_err();
    assert!(format!("{err:#}").contains("is not a PNG"), "{err:#}");
    let whole =
        std::fs::read(set.frame_path(&set.trajectories[0].trajectory.steps[0].frame.clone().unwrap()))
            .unwrap();
    std::fs::write(set.frame_path(&gone), &whole[..whole.len() / 2]).unwrap();
    let err = export(&set, &o).unwrap_err();
    assert!(format!("{err:#}").contains("is cut short"), "{err:#}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let p = |x: &Path| x.to_str().unwrap().to_string();
    let missing = tmp.path().join("nope");
    fails_with(&guirl(&["export", &p(&missing)]), &["nope does not exist"]);
    fails_with(&guirl(&["export", &p(tmp.path())]), &["is not a trajectory set", "trajectories.jsonl"]);
    fails_with(
        &guirl(&["export", &p(tmp.path()), "--format", "csv"]),
        &["invalid value 'csv'", "parquet", "jsonl"],
    );
    fails_with(
        &guirl(&["export", &p(tmp.path()), "--layout", "dpo"]),
        &["invalid value 'dpo'", "rl", "sft", "steps"],
    );
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(empty.join("frames")).unwrap();
    std::fs::write(empty.join("trajectories.jsonl"), "").unwrap();
    fails_with(&guirl(&["export", &p(&empty)]), &["has no trajectories: nothing to export"]);

    let set = tmp.path().join("set");
    hand_set(&set);
    let ok = guirl(&["export", &p(&set)]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(set.join("export-rl.parquet").is_file());
    fails_with(&guirl(&["export", &p(&set)]), &["export-rl.parquet exists", "--force"]);
    assert!(guirl(&["export", &p(&set), "--force"]).status.success());
    // Not even --force writes over the set it reads, and a folder is no output file.
    let own = set.join("trajectories.jsonl");
    let before = std::fs::read(&own).unwrap();
    fails_with(
        &guirl(&["export", &p(&set), "--format", "jsonl", "--out", &p(&own), "--force"]),
        &["is a file of the trajectory set being exported"],
    );
    assert_eq!(std::fs::read(&own).unwrap(), before, "the set is untouched");
    fails_with(
        &guirl(&["export", &p(&set), "--out", &p(tmp.path()), "--force"]),
        &["is a folder: give a file path"],
    );
    fails_with(
        &guirl(&["export", &p(&set), "--layout", "steps", "--gamma", "1.5"]),
        &["--gamma must be in [0, 1]"],
    );
    // Every episode an env_error: nothing left for sft.
    let crashed = tmp.path().join("crashed");
    let mut w = TrajectoryWriter::open(&crashed).unwrap();
    let t = Trajectory::new(
        "builtin/hand",
        1,
        vec![TrajStep::new("click(1, 1)", 0.0, EpisodeStatus::EnvError)],
        Outcome { reward: 0.0, status: EpisodeStatus::EnvError, steps: 1, error: None },
    );
    let frames = vec![image::RgbImage::new(2, 2).into(); 2];
    w.append(&Recorded { trajectory: t, frames }).unwrap();
    fails_with(
        &guirl(&["export", &p(&crashed), "--layout", "sft"]),
        &["no episode", "left to export", "1 env_error/policy_error"],
    );
}
