"""`GuirlEnv`: a gymnasium environment whose steps run in a real browser behind ``guirl serve``.

::

    env = GuirlEnv("miniwob/click-button", base_url="http://127.0.0.1:8765")
    obs, info = env.reset(seed=0)        # obs = {"screenshot": (H, W, 3) uint8, "instruction": str}
    obs, reward, terminated, truncated, info = env.step("click(80, 120)")
    env.close()                          # deletes the session; the browser is killed

Actions are guirl's action text (see :mod:`guirl_client.actions`). ``info`` carries the
server's step info (``status``, ``valid_action``, ``action_error``, ``raw_reward``, ...)
plus the page's interactive ``elements``, the ``url`` and the coordinate ``frame``.
"""

from __future__ import annotations

import io
import weakref
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from PIL import Image

from .actions import ACTION_CHARSET, MAX_ACTION_CHARS
from .client import (
    DEFAULT_URL,
    GuirlClient,
    GuirlEnvError,
    GuirlServerError,
    Session,
    decode_screenshot,
)

#: Info fields that differ between two runs of the same seed and actions (wall-clock
#: timings, the server's episode counter, whether a reset started or replaced a browser).
#: They are kept out of ``info`` so that equal seeds and actions give equal infos, and
#: exposed as ``env.last_timings``, ``env.episode_id`` and ``env.last_browser``.
VOLATILE_INFO = ("timings", "episode_id", "reset_ms", "browser_started", "browser_replaced_after")

_BMP = None


def _bmp_charset() -> str:
    """Every character of Unicode's Basic Multilingual Plane but the surrogates: the
    charset of the instruction space (instructions are free text)."""
    global _BMP
    if _BMP is None:
        _BMP = "".join(chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF)
    return _BMP


class InstructionText(spaces.Text):
    """``spaces.Text`` over the Basic Multilingual Plane, with a short repr."""

    def __init__(self, max_length: int, seed=None):
        super().__init__(max_length, min_length=0, charset=_bmp_charset(), seed=seed)

    def __repr__(self) -> str:
        return f"Text({self.min_length}, {self.max_length}, charset=<Unicode BMP>)"


def _delete_quietly(session: Session) -> None:
    try:
        session.close()
    except Exception:  # at interpreter exit the server may be gone already
        pass


class GuirlEnv(gym.Env):
    """One browser environment session of a ``guirl serve``.

    Args:
        task: a task id from ``GET /v1/tasks`` (``miniwob/click-button``, ``builtin/...``).
        base_url: the server.
        token: the server's bearer token, when it was started with ``--token``.
        max_steps: override the task's step limit (the server truncates there).
        strict_actions: an action that cannot be executed ends the episode.
        render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns the last screenshot).
        task_spec: a website spec (TOML text) instead of ``task``.
        screenshot: ``"shm"`` (exact pixels in shared memory: the fastest with the server
            on this machine), ``"raw"`` (exact pixels, no encoding), ``"png"`` (exact
            pixels, compressed), ``"jpeg"`` (smaller, lossy) or ``"none"`` (the screenshot
            in ``obs`` is then all zeros); by default the client's choice (``shm`` on
            loopback, ``raw`` where its file cannot be read, else ``png``: :class:`GuirlClient`).
        elements: whether the server reports the page's interactive elements (``info["elements"]``).
        wall_clock_ms: enforce the task's time limit.
        jpeg_quality, viewport: passed on to the session (see ``docs/serve.md``).
        timeout, retries: of the underlying :class:`GuirlClient`.
        instruction_max_length: ``max_length`` of the instruction's ``Text`` space.
        client: reuse a :class:`GuirlClient` instead of making one.

    The session (not yet a browser) is created here, because the observation space needs
    the task's screenshot size. ``reset(seed=s)`` sends ``s`` to the server, so the same
    seed gives the same start; ``reset()`` without a seed draws one from ``np_random``.

    Raises :class:`GuirlEnvError` from ``reset`` or ``step`` when the browser failed
    (``info["status"] == "env_error"``); the next ``reset`` starts a fresh browser.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def __init__(
        self,
        task: str | None = None,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        max_steps: int | None = None,
        strict_actions: bool = False,
        render_mode: str | None = None,
        *,
        task_spec: str | None = None,
        screenshot: str | None = None,
        elements: bool = True,
        wall_clock_ms: int | None = None,
        jpeg_quality: int | None = None,
        viewport: dict | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        instruction_max_length: int = 4096,
        client: GuirlClient | None = None,
    ):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if screenshot not in (None, "shm", "raw", "png", "jpeg", "none"):
            raise ValueError(f"screenshot must be 'shm', 'raw', 'png', 'jpeg' or 'none', got {screenshot!r}")
        self.render_mode = render_mode
        self.client = client if client is not None else GuirlClient(base_url, token, timeout, retries)
        self._owns_client = client is None
        self._task, self._task_spec = task, task_spec
        self._options = {
            "max_steps": max_steps,
            "strict_actions": bool(strict_actions) if strict_actions else None,
            "wall_clock_ms": wall_clock_ms,
            "screenshot": screenshot,
            "jpeg_quality": jpeg_quality,
            "elements": elements,
            "viewport": viewport,
        }
        self.session: Session | None = None
        self._finalizer = None
        self._open_session()
        assert self.session is not None
        self.width, self.height = int(self.session.width), int(self.session.height)
        self.task_id = self.session.task_id

        self.observation_space = spaces.Dict(
            {
                "screenshot": spaces.Box(0, 255, (self.height, self.width, 3), np.uint8),
                "instruction": InstructionText(instruction_max_length),
            }
        )
        self.action_space = spaces.Text(MAX_ACTION_CHARS, min_length=1, charset=ACTION_CHARSET)

        #: The server's last observation, as the client gave it (screenshot a base64
        #: string in the JSON form, a read-only array from a binary frame).
        self.last_observation: dict | None = None
        #: ``info["timings"]`` of the last reset or step (action/settle/screenshot/total ms).
        self.last_timings: dict | None = None
        #: The server's episode counter for the current episode.
        self.episode_id: int | None = None
        #: What the last reset said of its browser: ``{"started": bool}``, with
        #: ``"replaced_after"`` (why) when it replaced one that failed.
        self.last_browser: dict | None = None
        self._screen: np.ndarray | None = None

    # -- session ----------------------------------------------------------------------

    def _open_session(self) -> None:
        self.session = self.client.create_session(self._task, task_spec=self._task_spec, **self._options)
        # Delete the session if the env is dropped without close() (the server's idle
        # reaper would free it too, later).
        self._finalizer = weakref.finalize(self, _delete_quietly, self.session)

    # -- gymnasium API ------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        screenshot = options.pop("screenshot", None)
        if options:
            raise ValueError(f"unknown reset option(s) {sorted(options)}; the only one is 'screenshot'")
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        if self.session is None:
            raise gym.error.ClosedEnvironmentError("this GuirlEnv was closed; make a new one")
        try:
            out = self.session.reset(seed=seed, screenshot=screenshot)
        except GuirlServerError as e:
            if e.code != "unknown_session":
                raise
            # The server's idle reaper closed our session: open a new one and go on.
            self._finalizer.detach()
            self._open_session()
            out = self.session.reset(seed=seed, screenshot=screenshot)
        info = out.get("info") or {}
        obs = out.get("observation")
        self._remember(obs, info)
        if obs is None or info.get("status") == "env_error":
            raise GuirlEnvError(
                f"reset of {self.task_id} (seed {seed}) failed in the browser: {info.get('env_error')}",
                info,
                self.session.id,
            )
        return self._obs(), self._info(obs, info)

    def step(self, action: str):
        if self.session is None:
            raise gym.error.ClosedEnvironmentError("this GuirlEnv was closed; make a new one")
        if not isinstance(action, str):
            # (str(5) would be sent as the action "5", an invalid step the agent never chose)
            raise TypeError(
                f"GuirlEnv.step takes guirl's action text, e.g. 'click(10, 20)'; got "
                f"{type(action).__name__} {action!r}"
            )
        out = self.session.step(action)
        info = out.get("info") or {}
        obs = out.get("observation")
        self._remember(obs, info)
        if info.get("status") == "env_error":
            raise GuirlEnvError(
                f"step {action!r} of {self.task_id} failed in the browser: {info.get('env_error')}",
                info,
                self.session.id,
            )
        return (
            self._obs(),
            float(out.get("reward") or 0.0),
            bool(out.get("terminated")),
            bool(out.get("truncated")),
            self._info(obs, info),
        )

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        if self._screen is not None:
            return self._screen.copy()
        if self.session is None:
            return None
        # No screenshot kept (screenshot="none", or before the first reset): ask for one.
        png = self.session.render("png")
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.uint8).copy()

    def close(self):
        if self.session is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
            _close = self.session
            self.session = None
            try:
                _close.close()
            except GuirlServerError as e:
                if e.code != "connection_failed":
                    raise
        if self._owns_client:
            self.client.close()

    # -- helpers ------------------------------------------------------------------------

    def _remember(self, obs: dict | None, info: dict) -> None:
        timings = info.get("timings")
        if timings is None and info.get("reset_ms") is not None:
            timings = {"total_ms": info["reset_ms"]}  # what a reset reports instead
        self.last_timings = timings
        if info.get("episode_id") is not None:
            self.episode_id = info.get("episode_id")
        if "browser_started" in info:
            self.last_browser = {"started": info["browser_started"]}
            if info.get("browser_replaced_after") is not None:
                self.last_browser["replaced_after"] = info["browser_replaced_after"]
        if obs is None:
            return
        self.last_observation = obs
        shot = obs.get("screenshot")
        # An array from the client is read-only and never changes (`_obs` copies it out);
        # base64 is decoded once here. None with screenshot="none".
        self._screen = shot if isinstance(shot, np.ndarray) else decode_screenshot(obs)

    def _obs(self) -> dict:
        """The gymnasium observation: fresh arrays every call. Without a new observation
        from the server (it sends none after an env_error) the last one is repeated."""
        screen = self._screen if self._screen is not None else np.zeros((self.height, self.width, 3), np.uint8)
        last = self.last_observation or {}
        return {"screenshot": screen.copy(), "instruction": str(last.get("instruction") or "")}

    def _info(self, obs: dict | None, info: dict) -> dict:
        out = {k: v for k, v in info.items() if k not in VOLATILE_INFO}
        if obs is not None:
            out["elements"] = obs.get("elements") or []
            out["url"] = obs.get("url")
            out["frame"] = obs.get("frame")
        return out

    def __repr__(self) -> str:
        sid = self.session.id if self.session is not None else "closed"
        return f"<GuirlEnv {self.task_id} session={sid}>"
