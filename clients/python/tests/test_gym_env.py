"""GuirlEnv against a live ``guirl serve``: gymnasium's own checker, and a solved episode."""

from __future__ import annotations

import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import guirl_client
from guirl_client import GuirlEnv, GuirlServerError, actions

from conftest import TASK, target_center


def test_check_env_passes(live):
    # Through gymnasium.make, so that check_env also builds the env from its spec for the
    # render-mode and double-close checks, and holds resets to determinism.
    env = gym.make(guirl_client.ENV_ID, task=TASK, base_url=live.url, render_mode="rgb_array")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        # gymnasium reports near-misses (e.g. "observations are not equal although similar")
        # as warnings; exact determinism is what GRPO groups rely on.
        messages = [str(w.message) for w in caught if "not equal although similar" in str(w.message)]
        assert not messages, messages
    finally:
        env.close()


def test_spaces_follow_the_session(live):
    with GuirlEnv(TASK, base_url=live.url) as env:
        shot = env.observation_space["screenshot"]
        assert shot.shape == (env.height, env.width, 3) and shot.dtype == np.uint8
        assert env.action_space.contains("click(10, 20)")
        assert env.action_space.contains('type("Hello, world!")')
        obs, info = env.reset(seed=3)
        assert obs in env.observation_space
        assert info["status"] == "running" and info["seed"] == 3 and info["elements"]
        assert env.last_timings is not None and "timings" not in info
        _, _, _, _, info = env.step("wait(1)")
        assert set(env.last_timings) >= {"action_ms", "settle_ms", "screenshot_ms", "total_ms", "serve_ms"}
        assert "timings" not in info and "episode_id" not in info


def test_same_seed_same_start(live):
    with GuirlEnv(TASK, base_url=live.url) as a, GuirlEnv(TASK, base_url=live.url) as b:
        oa, _ = a.reset(seed=11)
        ob, _ = b.reset(seed=11)
        assert oa["instruction"] == ob["instruction"]
        np.testing.assert_array_equal(oa["screenshot"], ob["screenshot"])
        # equal seeds give equal infos, whether the reset started the browser or not
        _, first = a.reset(seed=12)
        _, again = a.reset(seed=12)
        assert first == again
        assert a.last_browser == {"started": False}


def test_scripted_episode_reaches_success(live):
    env = GuirlEnv(TASK, base_url=live.url, render_mode="rgb_array")
    try:
        solved = 0
        for seed in (0, 1):
            obs, info = env.reset(seed=seed)
            np.testing.assert_array_equal(env.render(), obs["screenshot"])
            x, y = target_center(obs["instruction"], info["elements"])
            obs, reward, terminated, truncated, info = env.step(actions.click(x, y))
            assert info["status"] == "success", info
            assert terminated and not truncated and reward > 0
            assert info["valid_action"] is True and info["step"] == 1
            solved += 1
        assert solved == 2
        # Stepping a finished episode is the server's 409.
        with pytest.raises(GuirlServerError, match="no_episode"):
            env.step("click(1, 1)")
    finally:
        env.close()
    env.close()  # twice is fine
    with pytest.raises(gym.error.ClosedEnvironmentError):
        env.reset(seed=0)


def test_max_steps_truncates(live):
    with GuirlEnv(TASK, base_url=live.url, max_steps=2) as env:
        env.reset(seed=4)
        _, _, terminated, truncated, info = env.step("wait(1)")
        assert not terminated and not truncated
        _, _, terminated, truncated, info = env.step("wait(1)")
        assert truncated and not terminated and info["status"] == "truncated", info


def test_an_action_that_is_not_text_is_refused(live):
    with GuirlEnv(TASK, base_url=live.url) as env:
        env.reset(seed=0)
        with pytest.raises(TypeError, match="action text"):
            env.step(5)


def test_unknown_reset_option_is_an_error(live):
    with GuirlEnv(TASK, base_url=live.url) as env:
        with pytest.raises(ValueError, match="unknown reset option"):
            env.reset(seed=0, options={"sead": 1})


def test_without_screenshots_render_asks_the_server(live):
    with GuirlEnv(TASK, base_url=live.url, screenshot="none", render_mode="rgb_array") as env:
        obs, _ = env.reset(seed=6)
        assert obs in env.observation_space and not obs["screenshot"].any()
        frame = env.render()
        assert frame.shape == (env.height, env.width, 3) and frame.any()


def test_a_reaped_session_is_replaced_at_reset():
    from conftest import start_server, stop_server

    server = start_server("--idle-timeout", "1", max_sessions=2)
    try:
        with GuirlEnv(TASK, base_url=server.url) as env:
            env.reset(seed=8)
            first = env.session.id
            # Poll /health, which touches no session (a session request would keep it alive).
            c = guirl_client.GuirlClient(server.url)
            deadline = time.monotonic() + 10
            while c.health()["sessions"] and time.monotonic() < deadline:
                time.sleep(0.25)
            assert c.health()["sessions"] == 0, "the idle reaper did not run"
            obs, info = env.reset(seed=8)
            assert env.session.id != first and info["status"] == "running"
    finally:
        stop_server(server)
