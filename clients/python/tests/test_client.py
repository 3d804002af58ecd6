"""The REST client against a live ``guirl serve``: routes, error shapes, 503 retries, tokens."""

from __future__ import annotations

import numpy as np
import pytest
import requests

import guirl_client.client as client_module
from guirl_client import GuirlClient, GuirlServerError, actions, decode_screenshot
from guirl_client.actions import extract_action, quote

from conftest import TASK, target_center


def test_action_text_matches_the_grammar():
    assert actions.click(3.6, "4") == "click(4, 4)"
    assert actions.drag(1, 2, 3, 4) == "drag(1, 2, 3, 4)"
    assert actions.scroll(1, 2, 0, -120) == "scroll(1, 2, 0, -120)"
    assert actions.key("ctrl+a") == "key(ctrl+a)"
    assert actions.key('"Enter"') == "key(Enter)"
    assert actions.done() == "done()"
    assert quote('a "b" \\ \n\t\x01é') == '"a \\"b\\" \\\\ \\n\\t\\u{1}é"'
    with pytest.raises(ValueError, match="a key like Enter"):
        actions.key("")
    with pytest.raises(TypeError, match="pixel coordinate"):
        actions.click("left", 3)


def test_extract_action_finds_the_last_action():
    assert extract_action("I see it. <action>click(3, 4)</action>") == "click(3, 4)"
    assert extract_action("Thought: type it.\nAction: type(\"a) b\")") == 'type("a) b")'
    assert extract_action("click(1, 2) no wait, double_click(5, 6)") == "double_click(5, 6)"
    assert extract_action("nothing to do here") is None


def test_health_and_tasks(live):
    c = GuirlClient(live.url)
    h = c.health()
    assert h["status"] == "healthy" and h["max_sessions"] == live.max_sessions
    tasks = {t["id"]: t for t in c.tasks()}
    assert TASK in tasks, sorted(tasks)[:20]
    t = tasks[TASK]
    assert t["suite"] and t["width"] > 0 and t["height"] > 0 and t["max_steps"] > 0


def test_session_round_trip(live):
    c = GuirlClient(live.url)
    with c.create_session(TASK, max_steps=5) as s:
        assert s.max_steps == 5 and s.task_id == TASK
        assert any(st.get("session_id") == s.id for st in c.sessions())
        out = s.reset(seed=7)
        obs, info = out["observation"], out["info"]
        assert info["status"] == "running" and info["seed"] == 7 and info["step"] == 0
        assert obs["screenshot_format"] == "png"
        img = decode_screenshot(obs)
        assert img.shape == (s.height, s.width, 3) and img.dtype == np.uint8
        assert (obs["width"], obs["height"]) == (s.width, s.height)
        x, y = target_center(obs["instruction"], obs["elements"])
        out = s.step(actions.click(x, y))
        assert set(out) >= {"observation", "reward", "terminated", "truncated", "info"}
        assert out["info"]["status"] == "success" and out["terminated"] is True and out["reward"] > 0
        png = s.render()
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        # The episode is over: stepping again is a 409 no_episode.
        with pytest.raises(GuirlServerError) as e:
            s.step("click(1, 1)")
        assert (e.value.code, e.value.status) == ("no_episode", 409)
    assert all(st.get("session_id") != s.id for st in c.sessions())
    s.close()  # twice is fine


def test_invalid_action_is_a_normal_step(live):
    c = GuirlClient(live.url)
    with c.create_session(TASK) as s:
        s.reset(seed=1)
        out = s.step("clik(1, 2)")
        info = out["info"]
        assert info["status"] == "invalid_action" and info["valid_action"] is False
        assert "clik" in info["action_error"]
        assert out["terminated"] is False and out["truncated"] is False and info["step"] == 1
        out = s.step(actions.click(10_000, 5))  # outside the screenshot
        assert out["info"]["status"] == "invalid_action" and out["info"]["step"] == 2


def test_errors_carry_the_server_code(live):
    c = GuirlClient(live.url)
    with pytest.raises(GuirlServerError) as e:
        c.create_session("miniwob/click-buton")
    assert (e.value.code, e.value.status) == ("unknown_task", 400)
    assert "miniwob/click-button" in e.value.message  # the closest id is suggested
    with pytest.raises(GuirlServerError) as e:
        c.session("no-such-session")
    assert (e.value.code, e.value.status) == ("unknown_session", 404)
    with c.create_session(TASK) as s:
        with pytest.raises(GuirlServerError) as e:
            s.step("click(1, 1)")
        assert (e.value.code, e.value.status) == ("no_episode", 409)
        s.reset(seed=0)
        with pytest.raises(GuirlServerError) as e:
            s.step("type(\"" + "a" * 10_001 + "\")")
        assert (e.value.code, e.value.status) == ("malformed_action", 400)
        with pytest.raises(GuirlServerError) as e:
            s.reset(seed=-1)
        assert (e.value.code, e.value.status) == ("bad_seed", 400)
    with pytest.raises(GuirlServerError) as e:
        c.create_session(TASK, screenshot="gif")
    assert e.value.code in ("bad_option", "bad_request") and e.value.status == 400


def test_unreachable_server_says_what_to_do():
    c = GuirlClient("http://127.0.0.1:9", timeout=2)
    with pytest.raises(GuirlServerError, match="is it running") as e:
        c.health()
    assert e.value.code == "connection_failed"


def test_token_is_required_but_not_for_health(small_server):
    assert requests.get(small_server.url + "/health", timeout=5).status_code == 200
    with pytest.raises(GuirlServerError) as e:
        GuirlClient(small_server.url).tasks()
    assert (e.value.code, e.value.status) == ("unauthorized", 401)
    assert GuirlClient(small_server.url, token="s3cret").tasks()


def test_capacity_is_503_and_retried_as_told(small_server, monkeypatch):
    c = GuirlClient(small_server.url, token="s3cret", retries=0)
    first = c.create_session(TASK)
    try:
        with pytest.raises(GuirlServerError) as e:
            c.create_session(TASK)
        assert (e.value.code, e.value.status) == ("capacity_reached", 503)
        raw = requests.post(
            small_server.url + "/v1/sessions",
            json={"task": TASK},
            headers={"Authorization": "Bearer s3cret"},
            timeout=10,
        )
        assert raw.status_code == 503 and raw.headers.get("Retry-After") is not None
        retry_after = float(raw.headers["Retry-After"])

        waits = []
        monkeypatch.setattr(client_module.time, "sleep", waits.append)
        c2 = GuirlClient(small_server.url, token="s3cret", retries=2)
        with pytest.raises(GuirlServerError, match="capacity_reached"):
            c2.create_session(TASK)
        assert waits == [retry_after, retry_after]

        # A retry that finds room succeeds: free the slot during the first wait.
        waits.clear()
        monkeypatch.setattr(client_module.time, "sleep", lambda s: (waits.append(s), first.close()))
        second = c2.create_session(TASK)
        assert waits == [retry_after]
        second.close()
    finally:
        first.close()
