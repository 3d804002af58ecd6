"""OpenEnv's own generic client over ``/ws``, unmodified, against a live ``guirl serve``."""

from __future__ import annotations

import base64
import io
import json

import pytest
import requests
from PIL import Image

from openenv.core.generic_client import GenericEnvClient

from guirl_client import GuirlClient, actions

from conftest import TASK, target_center, wait_no_sessions


def test_generic_client_runs_an_episode(live):
    with GenericEnvClient(base_url=live.url).sync() as env:
        result = env.reset(seed=5, task=TASK)
        obs = result.observation
        assert result.done is False
        assert obs["task_id"] == TASK and obs["step"] == 0 and obs["instruction"]
        img = Image.open(io.BytesIO(base64.b64decode(obs["screenshot"])))
        assert img.size == (obs["width"], obs["height"])
        assert obs["info"]["status"] == "running" and obs["info"]["seed"] == 5

        state = env.state()
        assert state["task_id"] == TASK and state["seed"] == 5 and state["step_count"] == 0

        # One connection is one session, visible in the REST table too.
        assert len(GuirlClient(live.url).sessions()) >= 1

        bad = env.step({"action": "clik(1, 2)"})
        assert bad.done is False and bad.observation["info"]["status"] == "invalid_action"

        x, y = target_center(obs["instruction"], obs["elements"])
        result = env.step({"action": actions.click(x, y)})
        assert result.done is True and result.reward > 0
        assert result.observation["terminated"] is True
        assert result.observation["info"]["status"] == "success"

        # A second episode on the same connection keeps the task.
        again = env.reset(seed=5)
        assert again.observation["task_id"] == TASK
        assert again.observation["instruction"] == obs["instruction"]
    # Closing the connection frees the session (its browser is killed).
    assert wait_no_sessions(live.url) == []


def test_ws_errors_use_openenv_codes(live):
    with GenericEnvClient(base_url=live.url).sync() as env:
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR|EXECUTION_ERROR|SESSION_ERROR"):
            env.step({"action": "click(1, 1)"})  # no reset yet
        with pytest.raises(RuntimeError, match="unknown|VALIDATION_ERROR"):
            env.reset(seed=0, task="miniwob/no-such-task")


def test_health_schema_metadata(live):
    assert requests.get(live.url + "/health", timeout=5).json()["status"] == "healthy"
    schema = requests.get(live.url + "/schema", timeout=5).json()
    assert {"action", "observation", "state"} <= set(schema)
    assert requests.get(live.url + "/metadata", timeout=5).status_code == 200


def test_ws_error_shape_and_capacity(small_server):
    """Raw frames: OpenEnv's code in ``code``, guirl's in ``error``; a full server answers
    CAPACITY_REACHED and closes the connection; the token also works as ?token=."""
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.sync.client import connect

    ws_url = small_server.url.replace("http://", "ws://") + "/ws"
    with pytest.raises(InvalidStatus, match="401"):
        connect(ws_url).close()
    with connect(ws_url + "?token=s3cret") as ws:
        ws.send(json.dumps({"type": "step", "data": {"action": "click(1, 1)"}}))
        err = json.loads(ws.recv(timeout=10))
        assert err["type"] == "error" and err["data"]["error"] == "no_episode" and err["data"]["code"]
        ws.send("{not json")
        err = json.loads(ws.recv(timeout=10))
        assert (err["data"]["code"], err["data"]["error"]) == ("INVALID_JSON", "bad_request")
        ws.send(json.dumps({"type": "dance"}))
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "UNKNOWN_TYPE"

        # This connection holds the only session: a second one is turned away.
        with connect(ws_url, additional_headers={"Authorization": "Bearer s3cret"}) as full:
            err = json.loads(full.recv(timeout=10))
            assert (err["data"]["code"], err["data"]["error"]) == ("CAPACITY_REACHED", "capacity_reached")
            with pytest.raises(ConnectionClosed):
                full.recv(timeout=10)
