"""examples/verl against a live ``guirl serve``, without veRL (it needs GPUs).

The agent loop runs on stand-ins for the pieces of veRL it touches, shaped after veRL's
signatures (``AgentLoopBase.apply_chat_template(messages, images=, remove_system_prompt=)``,
``AsyncLLMServerManager.generate(request_id, *, prompt_ids, sampling_params, image_data)``
returning ``token_ids`` / ``log_probs``): a character-level "tokenizer" and a scripted
"model". What is checked is guirl's side: the REST calls, the masks, the images.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import sys
import time
import types
from types import SimpleNamespace

import pytest
import requests

from guirl_client import GuirlEnv

from conftest import REPO, TASK, kill_session_browser, target_center, wait_no_sessions

EXAMPLE = REPO / "examples" / "verl"


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- stand-ins for veRL --------------------------------------------------------------


class AgentLoopOutput:  # a pydantic model in veRL
    def __init__(self, **fields):
        self.__dict__.update(fields)


class AgentLoopBase:
    def __init__(self, trainer_config, server_manager, tokenizer, processor, **kwargs):
        self.config = trainer_config.config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor

    async def apply_chat_template(self, messages, tools=None, images=None, videos=None, remove_system_prompt=False):
        text = ""
        for m in messages:
            content = m["content"]
            if isinstance(content, str):
                text += f"<{m['role']}>{content}"
            else:
                text += f"<{m['role']}>" + "".join(
                    "<image>" if p["type"] == "image" else p["text"] for p in content
                )
        # A VL processor fails when placeholders and images disagree.
        assert text.count("<image>") == len(images or []), (text, len(images or []))
        return [ord(c) for c in text]


class CharTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i) for i in ids)


class ScriptedModel:
    """``server_manager``: answers with the next scripted reply; ``before`` hooks run
    before a given turn's reply (to break the browser, say)."""

    def __init__(self, replies, before=None):
        self.replies = list(replies)
        self.before = before or {}
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
        turn = len(self.calls)
        self.calls.append({"request_id": request_id, "prompt_len": len(prompt_ids), "images": len(image_data or [])})
        if turn in self.before:
            self.before[turn]()
        text = self.replies[turn]
        return SimpleNamespace(token_ids=[ord(c) for c in text], log_probs=[-0.25] * len(text), num_preempted=None)


@contextlib.contextmanager
def simple_timer(name, timing):
    t = time.perf_counter()
    yield
    timing[name] = timing.get(name, 0.0) + time.perf_counter() - t


@pytest.fixture
def example_with_stand_ins(monkeypatch):
    registry = {}

    def register(name):
        def deco(cls):
            registry[name] = cls
            return cls

        return deco

    agent_loop = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    agent_loop.AgentLoopBase, agent_loop.AgentLoopOutput, agent_loop.register = AgentLoopBase, AgentLoopOutput, register
    profiler = types.ModuleType("verl.utils.profiler")
    profiler.simple_timer = simple_timer
    for name in ("verl", "verl.experimental", "verl.experimental.agent_loop", "verl.utils"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "verl.experimental.agent_loop.agent_loop", agent_loop)
    monkeypatch.setitem(sys.modules, "verl.utils.profiler", profiler)
    module = load_example("guirl_agent_loop")
    assert registry["guirl_agent"] is module.GuirlAgentLoop
    return module


def make_loop(module, model, base_url, max_turns=5):
    rollout = SimpleNamespace(response_length=4000, multi_turn=SimpleNamespace(max_assistant_turns=max_turns))
    trainer_config = SimpleNamespace(config=SimpleNamespace(actor_rollout_ref=SimpleNamespace(rollout=rollout)))
    return module.GuirlAgentLoop(
        trainer_config, model, CharTokenizer(), None, base_url=base_url, name="guirl_agent", dataset_cls=None
    )


# -- tests ----------------------------------------------------------------------------


def test_imports_without_verl():
    module = load_example("guirl_agent_loop")
    assert module.GuirlAgentLoop is None and isinstance(module.VERL_IMPORT_ERROR, ImportError)
    assert module.row_task_and_seed({"extra_info": {"task_id": TASK, "seed": 4}}) == (TASK, 4)
    assert module.row_task_and_seed({"task": TASK}) == (TASK, 0)
    with pytest.raises(ValueError, match="names no task"):
        module.row_task_and_seed({"extra_info": {}})


def test_agent_loop_episode(live, example_with_stand_ins):
    seed = 31
    with GuirlEnv(TASK, base_url=live.url) as env:  # the same seed gives the same start
        obs, info = env.reset(seed=seed)
        x, y = target_center(obs["instruction"], info["elements"])
    replies = ["Looking first. <action>hover(1, 1)</action>", f"<action>click({x}, {y})</action>"]
    model = ScriptedModel(replies)
    loop = make_loop(example_with_stand_ins, model, live.url)
    row = {"raw_prompt": [], "extra_info": {"task_id": TASK, "seed": seed, "index": 0}, "agent_name": "guirl_agent"}
    out = asyncio.run(loop.run({"temperature": 1.0}, **row))

    assert out.reward_score == 1.0 and out.extra_fields["won"] and not out.extra_fields["env_error"]
    assert out.num_turns == 5 and len(out.multi_modal_data["images"]) == 2
    r1, r2 = (len(r) for r in replies)
    n_env = len(out.response_ids) - r1 - r2
    assert n_env > 0
    assert out.response_mask == [1] * r1 + [0] * n_env + [1] * r2
    assert len(out.response_logprobs) == len(out.response_ids)
    assert out.response_logprobs[r1 : r1 + n_env] == [0.0] * n_env
    env_turn = "".join(chr(i) for i in out.response_ids[r1 : r1 + n_env])
    assert "hover(1, 1) -> running" in env_turn and env_turn.count("<image>") == 1
    prompt = "".join(chr(i) for i in out.prompt_ids)
    assert obs["instruction"] in prompt and prompt.count("<image>") == 1
    # One sticky request id; the images grow with the context.
    assert len({c["request_id"] for c in model.calls}) == 1
    assert [c["images"] for c in model.calls] == [1, 2]
    assert wait_no_sessions(live.url) == []


def test_agent_loop_masks_a_broken_browser(live, example_with_stand_ins):
    def kill():
        (state,) = requests.get(live.url + "/v1/sessions", timeout=10).json()["sessions"]
        assert kill_session_browser(live.url, state["session_id"], live)

    model = ScriptedModel(["<action>hover(2, 2)</action>", "<action>click(5, 5)</action>"], before={1: kill})
    loop = make_loop(example_with_stand_ins, model, live.url)
    out = asyncio.run(loop.run({}, raw_prompt=[], extra_info={"task_id": TASK, "seed": 2}))
    assert out.extra_fields["env_error"] and not out.extra_fields["won"] and out.reward_score == 0.0
    assert out.response_ids and set(out.response_mask) == {0}
    assert wait_no_sessions(live.url) == []


def test_make_dataset(tmp_path, live, capsys):
    import datasets
    module = load_example("make_dataset")
    # a typo fails here, with the closest id, when a server is named
    with pytest.raises(SystemExit):
        module.main(["--tasks", "miniwob/click-lnk", "--server", live.url, "--out", str(tmp_path)])
    assert "closest: miniwob/click-link" in capsys.readouterr().err
    assert not (tmp_path / "train.parquet").exists()
    module.main(["--tasks", f"{TASK},miniwob/click-link", "--train", "6", "--val", "2", "--out", str(tmp_path),
                 "--server", live.url])
    train = datasets.load_dataset("parquet", data_files=str(tmp_path / "train.parquet"), split="train")
    val = datasets.load_dataset("parquet", data_files=str(tmp_path / "val.parquet"), split="train")
    assert len(train) == 6 and len(val) == 2
    assert set(train.column_names) >= {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}
    row = train[3]
    assert row["extra_info"]["task_id"] == "miniwob/click-link" and row["extra_info"]["seed"] == 1
    assert row["data_source"] == "guirl/miniwob/click-link" and row["agent_name"] == "guirl_agent"
    # No images in the rows, so no <image> placeholders either (veRL asserts they match).
    assert all("<image>" not in m["content"] for r in train for m in r["prompt"])
    assert min(r["extra_info"]["seed"] for r in val) >= 2**16
