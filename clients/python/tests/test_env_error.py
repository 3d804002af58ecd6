"""A browser killed under an episode: the client sees GuirlEnvError, and the next reset works."""

from __future__ import annotations

import pytest

from guirl_client import GuirlEnv, GuirlEnvError, GuirlTRLEnv, actions

from conftest import TASK, kill_session_browser, target_center


def test_killed_browser_is_an_env_error_then_reset_recovers(live):
    env = GuirlEnv(TASK, base_url=live.url)
    try:
        obs, info = env.reset(seed=21)
        assert env.last_browser == {"started": True}
        env.step("wait(1)")
        killed = kill_session_browser(live.url, env.session.id, live)
        assert killed, "found no browser process to kill"

        with pytest.raises(GuirlEnvError) as e:
            env.step("click(10, 10)")
        assert e.value.info["status"] == "env_error" and e.value.info["env_error"]
        assert e.value.session_id == env.session.id

        # The same session goes on with a fresh browser, from the same start.
        obs2, info2 = env.reset(seed=21)
        assert info2["status"] == "running" and env.last_browser["started"] is True
        assert env.last_browser["replaced_after"], "why the browser was replaced"
        assert obs2["instruction"] == obs["instruction"]
        x, y = target_center(obs2["instruction"], info2["elements"])
        _, reward, terminated, _, info3 = env.step(actions.click(x, y))
        assert terminated and reward > 0 and info3["status"] == "success"
    finally:
        env.close()


def test_trl_tool_raises_on_env_error(live, monkeypatch):
    monkeypatch.setenv("GUIRL_SERVER_URL", live.url)
    env = GuirlTRLEnv()
    try:
        env.reset(task=TASK, seed=3)
        kill_session_browser(live.url, env._session.id, live)
        # TRL turns a tool's exception into error text for the model; the flag lets a
        # reward function leave the rollout out.
        with pytest.raises(GuirlEnvError):
            env.click(10, 10)
        assert env.env_error and env.episode_over and env.get_reward() == 0.0
        assert isinstance(env.reset(task=TASK, seed=3), str) and not env.env_error
    finally:
        env._close()
