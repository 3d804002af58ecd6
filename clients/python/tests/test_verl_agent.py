"""verl-agent's environment-manager pattern on Ray CPU actors against a live ``guirl serve``:
8 sessions = 4 seeds x group_n 2, stepped in lock step by a scripted policy."""

from __future__ import annotations

import numpy as np
import pytest

import ray  # noqa: E402  (installed by the [test] extra; a missing one must fail, not skip)

from guirl_client import GuirlClient  # noqa: E402
from guirl_client.verl_agent import (  # noqa: E402
    GuirlEnvironmentManager,
    GuirlMultiEnv,
    guirl_projection,
    make_envs,
)

from conftest import TASK, target_center, wait_no_sessions  # noqa: E402


@pytest.fixture(scope="module")
def ray_cpu():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def test_projection():
    actions, valids = guirl_projection(["<action>click(1, 2)</action>", "I give up", "Action: key(Enter)"])
    assert actions == ["click(1, 2)", "I give up", "key(Enter)"]
    assert valids == [True, False, True]


def test_groups_start_alike_and_rewards_come_back(live, ray_cpu):
    env_num, group_n = 4, 2
    envs = GuirlMultiEnv(TASK, env_num=env_num, group_n=group_n, base_url=live.url, seed=0)
    manager = GuirlEnvironmentManager(envs)
    try:
        obs, infos = manager.reset({"seeds": [101, 102, 103, 104]})
        n = env_num * group_n
        assert len(obs["text"]) == len(obs["image"]) == len(obs["anchor"]) == len(infos) == n
        assert envs.seeds == [101, 101, 102, 102, 103, 103, 104, 104]
        for g in range(env_num):
            a, b = 2 * g, 2 * g + 1
            assert infos[a]["seed"] == infos[b]["seed"]
            assert obs["text"][a] == obs["text"][b] and "<image>" in obs["text"][a]
            np.testing.assert_array_equal(obs["image"][a], obs["image"][b])
            assert obs["anchor"][a] == obs["anchor"][b]
        assert obs["image"][0].ndim == 3 and obs["image"][0].dtype == np.uint8

        # Scripted policy: the first of each pair clicks the named button, the second
        # answers with no action at all.
        texts = []
        for i, info in enumerate(infos):
            if i % 2 == 0:
                instruction = obs["text"][i].split("Task: ", 1)[1].split("\n", 1)[0]
                x, y = target_center(instruction, info["elements"])
                texts.append(f"The button is at ({x}, {y}). <action>click({x}, {y})</action>")
            else:
                texts.append("I am not sure what to do.")
        obs, rewards, dones, infos = manager.step(texts)
        assert rewards.dtype == np.float32 and dones.dtype == bool and len(infos) == n
        for i, info in enumerate(infos):
            if i % 2 == 0:
                assert info["won"] is True and rewards[i] > 0 and dones[i], info
                assert bool(info["is_action_valid"]) is True
            else:
                assert info["won"] is False and rewards[i] == 0 and not dones[i]
                assert bool(info["is_action_valid"]) is False
                assert info["status"] == "invalid_action"
                assert "Last action: I am not sure" in obs["text"][i]

        # Lock step goes on: finished envs answer done with reward 0, no server call.
        obs, rewards, dones, infos = manager.step(["done()"] * n)
        assert all(dones) and all(rewards[::2] == 0)
        success = manager.success_evaluator(
            total_infos=[[info] for info in infos], total_batch_list=[[{"active_masks": True}]] * n
        )["success_rate"]
        assert success.tolist() == [1.0, 0.0] * env_num
    finally:
        manager.close()
    assert wait_no_sessions(live.url) == []
    assert GuirlClient(live.url).health()["sessions"] == 0


def test_make_envs_from_a_config(live, ray_cpu):
    config = {
        "env": {"seed": 3, "max_steps": 4, "rollout": {"n": 2}, "guirl": {"task": TASK, "base_url": live.url}},
        "data": {"train_batch_size": 1, "val_batch_size": 1},
    }
    train, val = make_envs(config)
    try:
        assert train.envs.num_processes == 2 and val.envs.num_processes == 1
        assert train.envs.draw_seeds().max() < 2**16 and val.envs.draw_seeds().min() >= 2**16
    finally:
        train.close()
        val.close()
