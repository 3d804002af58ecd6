"""`guirl train` writes TensorBoard event files that TensorBoard's own reader loads.

Self-contained: trains the tiny policy for two iterations on a fixture task with the
`guirl` binary ($GUIRL_BIN, else <repo>/target/release/guirl; real browsers), then reads
RUN/tensorboard/ with `EventAccumulator` and checks every scalar against metrics.jsonl
(TensorBoard keeps scalars as 32-bit floats) and that the screenshots are there as PNGs.
"""

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import IMAGES, SCALARS, EventAccumulator

REPO = Path(__file__).resolve().parents[3]

CONFIG = """
[run]
name = "tb"
iterations = 2
[tasks]
ids = ["{task}"]
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
"""


def guirl_bin() -> str:
    path = os.environ.get("GUIRL_BIN") or str(REPO / "target" / "release" / "guirl")
    if not Path(path).is_file():
        pytest.fail(f"no guirl binary at {path}: run `cargo build --release` or set GUIRL_BIN")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("tensorboard")
    cfg = tmp / "tb.toml"
    cfg.write_text(CONFIG.format(task=REPO / "fixtures" / "tasks" / "two-buttons.toml"))
    out = tmp / "run"
    proc = subprocess.run(
        [guirl_bin(), "train", str(cfg), "--out", str(out)], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"guirl train failed:\n{proc.stderr}"
    return out


def accumulator(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={SCALARS: 0, IMAGES: 0})
    acc.Reload()
    return acc


def test_scalars_equal_metrics_jsonl(run):
    acc = accumulator(run)
    tags = set(acc.Tags()["scalars"])
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    compared = 0
    for row in rows:
        it = row["iteration"]
        for key, value in row.items():
            if key == "iteration" or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if it == 0 and not (key.startswith("eval_") or key == "wall_secs"):
                continue  # iteration 0 is the starting policy's evaluation only
            assert key in tags, f"no scalar {key}"
            at = {e.step: e.value for e in acc.Scalars(key)}
            assert at.get(it) == float(np.float32(value)), f"{key} at step {it}: {at.get(it)} vs {value}"
            compared += 1
    assert compared > 80
    # The evaluations again, at their env-step counts.
    by_steps = {e.step: e.value for e in acc.Scalars("by_env_steps/eval_success")}
    for row in rows:
        assert by_steps[row["env_steps"]] == float(np.float32(row["eval_success"]))


def test_screenshots_are_images(run):
    acc = accumulator(run)
    assert {"frames/start", "frames/end"} <= set(acc.Tags()["images"])
    for tag in ("frames/start", "frames/end"):
        images = acc.Images(tag)
        assert [i.step for i in images] == [1, 2], tag
        for img in images:
            assert img.encoded_image_string.startswith(b"\x89PNG\r\n\x1a\n")
            assert img.width > 0 and img.height > 0
