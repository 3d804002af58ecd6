"""GuirlTRLEnv as TRL's GRPOTrainer uses it, and the OpenAI-message helper."""

from __future__ import annotations

import base64
import inspect
import io
import re

import numpy as np
import pytest
from PIL import Image

from guirl_client import GuirlEnv, GuirlTRLEnv, to_openai_messages
from guirl_client.actions import VERBS

from conftest import TASK, target_center


def tool_methods(env) -> dict:
    """The tools TRL would expose: public bound methods but reset and get_reward
    (trl/trainer/grpo_trainer.py)."""
    return {
        name: m
        for name, m in inspect.getmembers(env, predicate=inspect.ismethod)
        if name not in ("reset", "get_reward") and not name.startswith("_")
    }


def test_one_tool_per_verb_with_documented_args():
    tools = tool_methods(GuirlTRLEnv())
    expected = {"type_text" if v == "type" else v for v in VERBS}
    assert set(tools) == expected
    for name, method in tools.items():
        doc = inspect.getdoc(method)
        params = [p for p in inspect.signature(method).parameters.values()]
        assert doc and doc.splitlines()[0], name
        for p in params:
            # transformers' get_json_schema needs a type hint and an Args: entry per argument.
            assert p.annotation is not inspect.Parameter.empty, (name, p.name)
            assert re.search(rf"^\s+{p.name}: \S", doc.split("Args:", 1)[-1], re.M), (name, p.name)


def test_reset_is_lazy_and_needs_a_task(monkeypatch):
    monkeypatch.setenv("GUIRL_SERVER_URL", "http://127.0.0.1:9")  # nothing listens there
    env = GuirlTRLEnv()  # must not connect
    assert env.reward == 0.0
    with pytest.raises(ValueError, match="needs a task"):
        env.reset(prompt=[{"role": "user", "content": "hi"}])


def test_episode_from_a_dataset_row(live, monkeypatch):
    monkeypatch.setenv("GUIRL_SERVER_URL", live.url)
    env = GuirlTRLEnv()
    try:
        row = {"prompt": [{"role": "user", "content": "Do the task."}], "task": TASK, "seed": 12}
        instruction = env.reset(**row)
        assert isinstance(instruction, str) and '"' in instruction

        # An action outside the screen: a normal step, reported in the text.
        out = env.click(5000, 5000)
        assert out[0]["type"] == "image" and isinstance(out[0]["image"], Image.Image)
        assert out[1]["type"] == "text" and "invalid_action" in out[1]["text"]
        assert env.get_reward() == 0.0 and not env.episode_over

        x, y = target_center(instruction, env.observation["elements"])
        out = env.click(x, y)
        assert "success" in out[1]["text"] and "over" in out[1]["text"]
        assert env.get_reward() > 0 and env.reward == env.get_reward() and env.episode_over
        with pytest.raises(RuntimeError, match="episode is over"):
            env.done()

        # TRL reuses instances: the next row resets the same session.
        sid = env._session.id
        assert env.reset(task=TASK, seed=12) == instruction
        assert env._session.id == sid and env.reward == 0.0
        # Seeds can also come from extra_info, as in guirl's exported parquet.
        assert env.reset(extra_info={"task_id": TASK, "seed": 12}) == instruction
        out = env.type_text("hello")  # nothing focused: not executable
        assert out[1]["text"].startswith('type("hello")')
    finally:
        env._close()


def test_reset_with_screenshot(live, monkeypatch):
    monkeypatch.setenv("GUIRL_SERVER_URL", live.url)

    class WithScreen(GuirlTRLEnv):
        reset_with_screenshot = True

    env = WithScreen()
    try:
        blocks = env.reset(task=TASK, seed=0)
        assert [b["type"] for b in blocks] == ["image", "text"]
        assert isinstance(blocks[0]["image"], Image.Image)
    finally:
        env._close()


def test_to_openai_messages_both_observation_forms(live):
    with GuirlEnv(TASK, base_url=live.url) as env:
        obs, _ = env.reset(seed=2)
        raw = env.last_observation
    for o in (obs, raw):
        msgs = to_openai_messages(o)
        assert [m["role"] for m in msgs] == ["system", "user"]
        parts = msgs[1]["content"]
        assert parts[0] == {"type": "text", "text": f"Instruction: {obs['instruction']}"}
        url = parts[1]["image_url"]["url"]
        assert url.startswith("data:image/png;base64,")
        img = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
        np.testing.assert_array_equal(img, obs["screenshot"])
    assert [m["role"] for m in to_openai_messages(obs, system_prompt=None)] == ["user"]
