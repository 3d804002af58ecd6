//! `guirl train`'s TensorBoard event files: a tiny run on real browsers writes one whose
//! every record's checksums hold, whose scalars are metrics.jsonl's values and which holds
//! screenshots; a resume adds a second file; `[run] tensorboard = false` writes none.
//! (clients/python/tests/test_tensorboard.py reads such a file with TensorBoard's own reader.)

use crate::common;
use crate::common::trainer::train;

use common::repo;
use guirl::train::tensorboard::{Event, EventKind, ValueKind, FILE_VERSION, TENSORBOARD_DIR};
use guirl::train::trainer::Trainer;
use guirl::train::TrainConfig;
use prost::Message;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn config(iterations: u64, extra: &str) -> TrainConfig {
    let task = repo("fixtures/tasks/two-buttons.toml");
    TrainConfig::parse(&format!(
        r#"
[run]
name = "tb"
iterations = {iterations}
{extra}
[tasks]
ids = ["{}"]
[model]
preset = "tiny"
[algo]
group_size = 2
batch_seeds = 2
epochs = 1
minibatch = 4
[rollout]
envs = 2
max_steps = 1
[eval]
interval = 1
episodes = 2
"#,
        task.display()
    ))
    .unwrap()
}

fn event_files(run: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(run.join(TENSORBOARD_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."))
        .collect();
    files.sort();
    files
}

/// TFRecord's masked CRC-32C, from its definition (TensorFlow's `crc32c.h`):
/// `((c >> 15) | (c << 17)) + 0xa282ead8`.
fn masked(data: &[u8]) -> u32 {
    crc32c::crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Every record of an event file, each checksum checked; no bytes left over.
fn events(path: &Path) -> Vec<Event> {
    let bytes = std::fs::read(path).unwrap();
    let mut at = 0;
    let mut out = Vec::new();
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
    while at < bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        assert_eq!(u32_at(at + 8), masked(len_bytes), "length checksum of the record at byte {at}");
        let data = &bytes[at + 12..at + 12 + len];
        assert_eq!(u32_at(at + 12 + len), masked(data), "data checksum of the record at byte {at}");
        out.push(Event::decode(data).unwrap());
        at += 12 + len + 4;
    }
    assert_eq!(at, bytes.len());
    out
}

/// (tag, step) -> scalar, over `events`.
fn scalars(events: &[Event]) -> HashMap<(String, i64), f32> {
    let mut out = HashMap::new();
    for e in events {
        if let Some(EventKind::Summary(s)) = &e.what {
            for v in &s.value {
                if let Some(ValueKind::SimpleValue(x)) = v.value {
                    out.insert((v.tag.clone(), e.step), x);
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn training_writes_checked_event_files_and_a_resume_adds_one() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("run");
    let cfg = config(2, "");
    assert!(cfg.run.tensorboard, "on by default: a config without the key writes event files");
    train(cfg, &run, false).await;

    let files = event_files(&run);
    assert_eq!(files.len(), 1, "{files:?}");
    let evs = events(&files[0]);
    assert_eq!(evs[0].what, Some(EventKind::FileVersion(FILE_VERSION.into())));
    let got = scalars(&evs);
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 3, "the starting policy's evaluation, then two iterations");
    let mut compared = 0;
    for row in &rows {
        let it = row["iteration"].as_i64().unwrap();
        for (k, v) in row.as_object().unwrap() {
            let Some(v) = v.as_f64().filter(|_| k != "iteration") else { continue };
            if it == 0 && !(k.starts_with("eval_") || k == "wall_secs") {
                continue; // iteration 0 is an evaluation only
            }
            let x = got.get(&(k.clone(), it)).unwrap_or_else(|| panic!("no scalar {k} at step {it}"));
            assert_eq!(*x, v as f32, "{k} at step {it}");
            compared += 1;
        }
        if let Some(s) = row["eval_success"].as_f64() {
            let steps = row["env_steps"].as_i64().unwrap();
            assert_eq!(got[&("by_env_steps/eval_success".to_string(), steps)], s as f32);
        }
    }
    assert!(compared > 2 * 40, "every numeric field of both iterations: {compared}");
    // The first iteration's first rollout, first and last screenshot, as PNGs.
    let images: Vec<_> = evs
        .iter()
        .filter_map(|e| match &e.what {
            Some(EventKind::Summary(s)) => Some((e.step, s)),
            _ => None,
        })
        .flat_map(|(step, s)| s.value.iter().map(move |v| (step, v)))
        .filter_map(|(step, v)| match &v.value {
            Some(ValueKind::Image(img)) => Some((step, v.tag.clone(), img.clone())),
            _ => None,
        })
        .collect();
    let tags: Vec<(i64, &str)> = images.iter().map(|(s, t, _)| (*s, t.as_str())).collect();
    assert!(tags.contains(&(1, "frames/start")) && tags.contains(&(1, "frames/end")), "{tags:?}");
    for (_, tag, img) in &images {
        let png = image::load_from_memory(&img.encoded_image_string).unwrap();
        assert_eq!((png.width() as i32, png.height() as i32), (img.width, img.height), "{tag}");
    }

    // A resume writes a new file beside the first, from the next iteration on.
    train(config(3, ""), &run, true).await;
    let files = event_files(&run);
    assert_eq!(files.len(), 2, "{files:?}");
    let more = scalars(&events(&files[1]));
    let steps: std::collections::BTreeSet<i64> =
        more.keys().filter(|(t, _)| !t.starts_with("by_env_steps/")).map(|(_, s)| *s).collect();
    assert_eq!(steps.into_iter().collect::<Vec<_>>(), vec![3]);
    assert_eq!(events(&files[0]).len(), evs.len(), "the first file is left as it was");

    // A resume with nothing left to train adds no empty file.
    train(config(3, ""), &run, true).await;
    assert_eq!(event_files(&run).len(), 2, "{:?}", event_files(&run));
}

#[test]
fn tensorboard_false_writes_no_event_file() {
    let root = tempfile::tempdir().unwrap();
    let cfg = config(1, "tensorboard = false");
    assert!(!cfg.run.tensorboard);
    let t = Trainer::new(cfg, root.path().to_path_buf(), false, false).unwrap();
    drop(t);
    assert!(!root.path().join(TENSORBOARD_DIR).exists());
    // And on: the folder exists as soon as the run is set up (an unwritable one fails
    // there); its file comes with the first line, so a run that logs nothing leaves none.
    let on = root.path().join("on");
    drop(Trainer::new(config(1, ""), on.clone(), false, false).unwrap());
    assert!(on.join(TENSORBOARD_DIR).is_dir());
    assert_eq!(event_files(&on).len(), 0);
}
