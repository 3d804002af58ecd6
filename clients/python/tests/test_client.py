"""The REST client against a live ``guirl serve``: routes, error shapes, 503 retries, tokens."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import threading

import numpy as np
import pytest
import requests

import guirl_client.client as client_module
from guirl_client import (
    GuirlClient,
    GuirlServerError,
    actions,
    decode_screenshot,
    parse_frame,
    screenshot_data_url,
    screenshot_image,
)
from guirl_client.actions import extract_action, quote

from conftest import TASK, address_off_loopback, start_server, stop_server, target_center


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
        assert obs["screenshot_format"] == "shm"  # shared memory on loopback: the default
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
        # An over-long answer (an agent's runaway output) is an invalid step, not an error.
        out = s.step("type(\"" + "a" * 10_001 + "\")")
        assert out["info"]["status"] == "invalid_action", out["info"]
        assert "10009 characters long; at most 10000" in out["info"]["action_error"], out["info"]
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


def test_token_is_required_but_not_for_health(small_server, monkeypatch):
    monkeypatch.delenv("GUIRL_SERVE_TOKEN", raising=False)
    assert requests.get(small_server.url + "/health", timeout=5).status_code == 200
    with pytest.raises(GuirlServerError) as e:
        GuirlClient(small_server.url).tasks()
    assert (e.value.code, e.value.status) == ("unauthorized", 401)
    assert GuirlClient(small_server.url, token="s3cret").tasks()
    # the token the server reads, from the same variable
    monkeypatch.setenv("GUIRL_SERVE_TOKEN", "s3cret")
    assert GuirlClient(small_server.url).tasks()
    with pytest.raises(GuirlServerError):
        GuirlClient(small_server.url, token="").tasks()


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


def test_binary_and_json_forms_give_the_same_pixels(live):
    json_client = GuirlClient(live.url, binary=False)
    assert json_client.screenshot is None  # the JSON form is what it always was
    with json_client.create_session(TASK) as s:
        obs = s.reset(seed=3)["observation"]
    assert obs["screenshot_format"] == "png" and isinstance(obs["screenshot"], str)
    reference = decode_screenshot(obs)

    fast = GuirlClient(live.url)
    assert (fast.binary, fast.screenshot) == (True, "shm")
    for fmt in ("shm", "raw", "png", "jpeg"):
        with fast.create_session(TASK, screenshot=fmt, jpeg_quality=90) as s:
            obs = s.reset(seed=3)["observation"]
            shot = obs["screenshot"]
            assert obs["screenshot_format"] == fmt
            assert isinstance(shot, np.ndarray) and shot.dtype == np.uint8 and not shot.flags.writeable
            assert shot.shape == (obs["height"], obs["width"], 3)
            if fmt == "jpeg":
                diff = np.abs(shot.astype(int) - reference.astype(int)).mean()
                assert 0 < diff < 4, diff
            else:
                np.testing.assert_array_equal(shot, reference)
            # The helpers take either form.
            img = decode_screenshot(obs)
            assert img.flags.writeable and img is not shot
            np.testing.assert_array_equal(np.asarray(screenshot_image(obs)), shot)
            assert screenshot_data_url(obs).startswith("data:image/png;base64,")
            out = s.step("wait(0)")
            assert out["info"]["status"] == "running" and out["observation"]["screenshot"].shape == shot.shape
            # A request may ask for another encoding for its own answer, or none.
            out = s.step("wait(0)", screenshot="png")
            assert out["observation"]["screenshot_format"] == "png"
            np.testing.assert_array_equal(out["observation"]["screenshot"], reference)
            out = s.step("wait(0)", screenshot="none")
            assert out["observation"]["screenshot"] is None and decode_screenshot(out["observation"]) is None

    # raw in the JSON form: base64 of the RGB bytes, read back by the same helpers.
    with json_client.create_session(TASK, screenshot="raw") as s:
        obs = s.reset(seed=3)["observation"]
    assert isinstance(obs["screenshot"], str)
    np.testing.assert_array_equal(decode_screenshot(obs), reference)
    # shm in the JSON form: the pixels are read from shared memory as the answer arrives.
    with json_client.create_session(TASK, screenshot="shm") as s:
        obs = s.reset(seed=3)["observation"]
    np.testing.assert_array_equal(obs["screenshot"], reference)


def test_shm_frames_are_copies_private_and_gone_with_the_session(live):
    c = GuirlClient(live.url)
    s = c.create_session(TASK)
    first = s.reset(seed=3)["observation"]
    at = first["screenshot_shm"]
    assert os.stat(at["path"]).st_mode & 0o777 == 0o600
    assert at["bytes"] == first["width"] * first["height"] * 3 and at["seq"] == 1
    kept = first["screenshot"].copy()
    x, y = target_center(first["instruction"], first["elements"])
    out = s.step(f"click({x}, {y})")
    assert out["observation"]["screenshot_shm"]["seq"] == 2
    # The next answer overwrote the file, not the array an earlier answer gave.
    np.testing.assert_array_equal(first["screenshot"], kept)
    s.close()
    assert not os.path.exists(at["path"]), "a closed session's frame file is removed"
    assert c.frames.fds == {}, "and its descriptor closed"


def test_zero_copy_frames_are_views_until_the_next_request(live):
    copying = GuirlClient(live.url)
    c = GuirlClient(live.url, zero_copy=True)
    with copying.create_session(TASK) as ref, c.create_session(TASK) as s:
        first = s.reset(seed=3)["observation"]
        want = ref.reset(seed=3)["observation"]["screenshot"]
        shot = first["screenshot"]
        np.testing.assert_array_equal(shot, want)
        assert not shot.flags.writeable and not shot.flags.owndata, "a read-only view, not a copy"
        kept = shot.copy()
        # The next request: another seed's page (a click that ends click-button's episode
        # leaves its page as it was).
        out = s.reset(seed=4)["observation"]
        want = ref.reset(seed=4)["observation"]["screenshot"]
        np.testing.assert_array_equal(out["screenshot"], want)
        assert not np.array_equal(kept, want), "another seed shows another page"
        # The view is the file: the next request wrote over it, the copy kept the old frame.
        np.testing.assert_array_equal(shot, want)
        path = out["screenshot_shm"]["path"]
    assert not os.path.exists(path) and c.frames.maps == {} and c.frames.fds == {}
    np.testing.assert_array_equal(shot, want)  # a view outlives its session's mapping entry


def test_shm_that_cannot_be_read_falls_back_to_raw_or_says_why(live, monkeypatch):
    real_open = os.open

    def other_container(path, *a, **kw):  # the server's /dev/shm is not this process's
        if "guirl-frames-" in str(path):
            raise FileNotFoundError(2, "No such file or directory")
        return real_open(path, *a, **kw)

    monkeypatch.setattr(client_module.os, "open", other_container)
    c = GuirlClient(live.url)
    before = len(c.sessions())
    with pytest.warns(UserWarning, match="uses raw frames"):
        s = c.create_session(TASK)
    with s:
        assert s.reset(seed=3)["observation"]["screenshot_format"] == "raw"
    with pytest.raises(GuirlServerError) as e:
        c.create_session(TASK, screenshot="shm")
    assert e.value.code == "shm_unreadable" and 'screenshot="raw"' in e.value.message
    assert len(c.sessions()) == before, "no session is left behind"


@contextlib.contextmanager
def tcp_forwarder(to_host: str, to_port: int):
    """A loopback port whose connections are relayed to (to_host, to_port), as a
    container's published port is: the server sees them come from to_host's side, not
    from loopback. Yields the loopback port."""
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((to_host, to_port))
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=pipe, args=(a, b), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        listener.close()


def test_shm_refused_to_a_forwarded_client_falls_back_to_raw():
    # The client's URL is loopback, so it asks for shm; the server sees the connection
    # come from off loopback (a forwarder, as Docker's published ports are) and refuses it
    # with bad_option; the client then creates the session with raw frames.
    host = address_off_loopback()
    if host is None:
        pytest.skip("this machine has no IPv4 address off loopback to serve on")
    server = start_server("--token", "fw", host=host, max_sessions=1)
    try:
        port = int(server.url.rsplit(":", 1)[1])
        with tcp_forwarder(host, port) as local:
            c = GuirlClient(f"http://127.0.0.1:{local}", token="fw")
            assert c.screenshot == "shm", "a loopback URL asks for shm"
            with c.create_session(TASK) as s:
                obs = s.reset(seed=3)["observation"]
                assert obs["screenshot_format"] == "raw" and "screenshot_shm" not in obs
                assert obs["screenshot"].shape == (obs["height"], obs["width"], 3)
                assert obs["screenshot"].any(), "the frame's pixels arrived"
            assert c.frames.fds == {}, "no frame file was opened"
            # Asked for by name, shm is refused with what to do instead.
            with pytest.raises(GuirlServerError) as e:
                c.create_session(TASK, screenshot="shm")
            assert e.value.code == "bad_option" and '"raw"' in e.value.message
            assert c.sessions() == [], "no session is left behind"
    finally:
        stop_server(server)


def test_bad_encodings_are_refused_with_what_is_accepted(live):
    c = GuirlClient(live.url)
    with pytest.raises(GuirlServerError) as e:
        c.create_session(TASK, screenshot="webp")
    assert (e.value.code, e.value.status) == ("bad_option", 400)
    assert '"raw"' in e.value.message and '"png"' in e.value.message
    with c.create_session(TASK) as s:
        s.reset(seed=0)
        with pytest.raises(GuirlServerError) as e:
            c.request("POST", f"/v1/sessions/{s.id}/step", json={"action": "wait(0)", "jpeg_quality": 0})
        assert e.value.code == "bad_option" and "1 to 100" in e.value.message


def test_parse_frame_reads_the_layout_and_refuses_broken_frames():
    head = {"observation": {"screenshot": None, "screenshot_format": "raw", "width": 2, "height": 1}, "reward": 0.5}
    text = json.dumps(head).encode()
    pixels = bytes([1, 2, 3, 4, 5, 6])
    frame = b"GRLF\x01\x00\x00\x00" + struct.pack("<I", len(text)) + text + pixels
    out = parse_frame(frame)
    assert out["reward"] == 0.5
    np.testing.assert_array_equal(out["observation"]["screenshot"], [[[1, 2, 3], [4, 5, 6]]])
    ws = b"GRLF\x01\x00\x00\x00" + struct.pack("<I", 2) + b"{}"
    assert parse_frame(ws) == {}
    with pytest.raises(ValueError, match="GRLF"):
        parse_frame(b"{" + frame[1:])
    with pytest.raises(ValueError, match="version 2"):
        parse_frame(frame[:4] + b"\x02" + frame[5:])
    with pytest.raises(ValueError, match="is 6 bytes; the frame has 5"):
        parse_frame(frame[:-1])
    with pytest.raises(ValueError, match="cut short"):
        parse_frame(frame[:20])
