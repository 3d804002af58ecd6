"""`guirl export` output loads in the Python stack: pyarrow and Hugging Face `datasets`.

Self-contained: records three oracle episodes of a built-in task with the `guirl` binary
($GUIRL_BIN, else <repo>/target/release/guirl; needs Chromium and chromedriver, as every
guirl test does), exports the three layouts as parquet (and JSON lines), and checks what
veRL asserts: in every row the number of `<image>` placeholders equals the number of
images, and every image is a PNG that PIL decodes.
"""

import base64
import io
import json
import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from datasets import load_dataset
from PIL import Image

REPO = Path(__file__).resolve().parents[3]
TASK = "builtin/counter"
EPISODES = 3


def guirl_bin() -> str:
    path = os.environ.get("GUIRL_BIN") or str(REPO / "target" / "release" / "guirl")
    if not Path(path).is_file():
        pytest.fail(f"no guirl binary at {path}: run `cargo build --release` or set GUIRL_BIN")
    return path


def guirl(*args: str) -> str:
    out = subprocess.run([guirl_bin(), *map(str, args)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"guirl {' '.join(map(str, args))} failed:\n{out.stderr}"
    return out.stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    rec = tmp_path_factory.mktemp("export") / "rec"
    guirl("run", "--task", TASK, "--policy", "oracle", "--episodes", EPISODES, "--record", rec)
    lines = (rec / "trajectories.jsonl").read_text().splitlines()
    assert len(lines) == EPISODES
    return rec


def export(rec: Path, layout: str, fmt: str = "parquet") -> Path:
    out = rec / f"{layout}.{fmt}"
    guirl("export", rec, "--layout", layout, "--format", fmt, "--out", out, "--force")
    return out


def trajectories(rec: Path) -> list:
    return [json.loads(l) for l in (rec / "trajectories.jsonl").read_text().splitlines()]


def decode(png: bytes) -> Image.Image:
    img = Image.open(io.BytesIO(png))
    img.load()
    assert img.format == "PNG" and img.width > 0 and img.height > 0
    return img


def placeholders(messages: list) -> int:
    return sum(m["content"].count("<image>") for m in messages)


def test_rl_layout_is_a_verl_prompt_per_episode(recorded):
    path = export(recorded, "rl")
    table = pq.read_table(path)
    assert table.num_rows == EPISODES
    assert {"data_source", "prompt", "images", "ability", "reward_model", "extra_info"} <= set(table.column_names)
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        assert row["data_source"] == f"guirl/{TASK}"
        assert row["ability"] == "gui"
        assert row["reward_model"] == {"style": "rule", "ground_truth": ""}
        assert [m["role"] for m in row["prompt"]] == ["user"]
        assert placeholders(row["prompt"]) == len(row["images"]) == 1
        decode(row["images"][0]["bytes"])
        assert row["extra_info"]["index"] == i and row["extra_info"]["split"] == "train"
    ds = load_dataset("parquet", data_files={"train": str(path)})["train"]
    assert len(ds) == EPISODES
    for row in ds:
        assert placeholders(row["prompt"]) == len(row["images"])
        for im in row["images"]:
            decode(im["bytes"])


def test_sft_layout_is_a_chat_per_episode(recorded):
    path = export(recorded, "sft")
    steps = [len(t["steps"]) for t in trajectories(recorded)]
    ds = load_dataset("parquet", data_files=str(path), split="train")
    assert len(ds) == EPISODES
    for row, n in zip(ds, steps):
        assert len(row["images"]) == n
        assert placeholders(row["messages"]) == len(row["images"])
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"] * n
        assert row["tools"] == []
        for im in row["images"]:
            decode(im["bytes"])
    table = pq.read_table(path)
    for row in table.to_pylist():
        assert placeholders(row["messages"]) == len(row["images"])


def test_steps_layout_is_a_row_per_step(recorded):
    path = export(recorded, "steps")
    trajs = trajectories(recorded)
    table = pq.read_table(path)
    assert table.num_rows == sum(len(t["steps"]) for t in trajs)
    rows = table.to_pylist()
    for row in rows:
        decode(row["image"]["bytes"])
        assert row["advantage"] is None  # `guirl run` records no GRPO groups
    # Return with gamma 1: the reward still to come, so step 0 carries the episode's reward.
    firsts = [r for r in rows if r["step"] == 0]
    assert [r["return"] for r in firsts] == pytest.approx([t["outcome"]["reward"] for t in trajs])
    ds = load_dataset("parquet", data_files=str(path), split="train")
    assert len(ds) == table.num_rows
    decode(ds[0]["image"]["bytes"])


@pytest.mark.parametrize("layout,key", [("rl", "prompt"), ("sft", "messages")])
def test_jsonl_has_base64_images(recorded, layout, key):
    path = export(recorded, layout, "jsonl")
    rows = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(rows) == EPISODES
    for row in rows:
        assert placeholders(row[key]) == len(row["images"])
        for im in row["images"]:
            decode(base64.b64decode(im["bytes"]))
    ds = load_dataset("json", data_files=str(path), split="train")
    assert len(ds) == EPISODES
