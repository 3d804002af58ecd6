"""guirl for TRL's ``GRPOTrainer(environment_factory=GuirlTRLEnv)``, and a message helper for
chat-style rollouts (OpenPipe ART, any OpenAI-compatible policy).

TRL makes one instance per rollout with no arguments, calls ``reset(**row)`` with the
dataset row's columns, exposes every public method but ``reset`` and ``get_reward`` as a
tool (the schema comes from the type hints and the docstring's ``Args:``), and scores the
rollout with ``get_reward()``::

    os.environ["GUIRL_SERVER_URL"] = "http://127.0.0.1:8765"
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Do the task."}]] * 64,
                                 "task": ["miniwob/click-button"] * 64, "seed": list(range(64))})
    trainer = GRPOTrainer(model=..., train_dataset=dataset, environment_factory=GuirlTRLEnv, ...)

The server needs one session per rollout of a generation batch
(``guirl serve --max-sessions N``, N >= generation_batch_size).
"""

from __future__ import annotations

import base64
import io
import os
import weakref
from typing import Any

import numpy as np
from PIL import Image

from . import actions
from .actions import SYSTEM_PROMPT
from .client import (
    DEFAULT_URL,
    GuirlClient,
    GuirlEnvError,
    GuirlServerError,
    Session,
    screenshot_data_url,
    screenshot_image,
)


def _delete_quietly(session: Session) -> None:
    try:
        session.close()
    except Exception:
        pass


class GuirlTRLEnv:
    """A guirl browser task as a TRL environment: one tool per action verb.

    Configuration comes from the environment, since TRL calls ``__init__`` without
    arguments: ``GUIRL_SERVER_URL`` (default ``http://127.0.0.1:8765``),
    ``GUIRL_SERVE_TOKEN`` (the server's bearer token, if any) and ``GUIRL_TASK`` (the task
    when a row has no ``task`` column). Subclass to change the class attributes below.

    Nothing is contacted until the first ``reset``. A session is kept across resets of the
    same task (TRL reuses instances) and deleted when the instance is garbage-collected;
    the server's idle reaper frees it otherwise.

    Attributes:
        reward: the episode's summed reward so far (what ``get_reward()`` returns).
        episode_over: whether the episode ended (tools then answer with an error).
        env_error: whether the browser failed under this episode (mask it out).
        instruction: the episode's instruction.
        info: the server's info after the last reset or step.
    """

    #: Return the first screenshot from ``reset`` too (content blocks ``[image, text]``
    #: instead of the instruction string). TRL appends either to the last user message.
    reset_with_screenshot: bool = False
    #: Session options for ``POST /v1/sessions`` (``max_steps``, ``screenshot``, ...).
    session_options: dict = {}
    #: How many times ``reset`` retries after a browser failure (each retry starts a fresh
    #: browser) before raising :class:`GuirlEnvError`.
    reset_retries: int = 1

    def __init__(self):
        self._base_url = os.environ.get("GUIRL_SERVER_URL", DEFAULT_URL)
        self._token = os.environ.get("GUIRL_SERVE_TOKEN") or None
        self._client: GuirlClient | None = None
        self._session: Session | None = None
        self._finalizer = None
        self.task: str | None = None
        self.seed: int | None = None
        self.reward = 0.0
        self.episode_over = False
        self.env_error = False
        self.instruction: str | None = None
        self.info: dict = {}
        self.observation: dict | None = None

    # -- TRL's hooks ----------------------------------------------------------------

    def reset(self, **row) -> str | list:
        """Start an episode for the row's ``task`` and ``seed`` columns (``extra_info``'s
        ``task_id`` and ``seed`` also work, as in guirl's exported parquet); returns the
        instruction."""
        extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
        task = row.get("task") or row.get("task_id") or extra.get("task_id") or os.environ.get("GUIRL_TASK")
        if not task:
            raise ValueError(
                "GuirlTRLEnv.reset needs a task: add a `task` column to the dataset (e.g. "
                "'miniwob/click-button') or set GUIRL_TASK"
            )
        seed = row.get("seed", extra.get("seed", 0))
        seed = 0 if seed is None else int(seed)
        if self._client is None:
            self._client = GuirlClient(self._base_url, self._token)
        if self._session is not None and self.task != task:
            self._close()
        self.task, self.seed = task, seed
        self.reward, self.episode_over, self.env_error = 0.0, False, False
        for attempt in range(self.reset_retries + 1):
            out = self._reset_once(seed)
            info = out.get("info") or {}
            obs = out.get("observation")
            if obs is not None and info.get("status") != "env_error":
                break
            if attempt == self.reset_retries:
                self.env_error = self.episode_over = True
                raise GuirlEnvError(
                    f"reset of {task} (seed {seed}) failed in the browser: {info.get('env_error')}",
                    info,
                    self._session.id if self._session else None,
                )
        self.info, self.observation = info, obs
        self.instruction = obs.get("instruction", "")
        if self.reset_with_screenshot:
            return [{"type": "image", "image": screenshot_image(obs)}, {"type": "text", "text": self.instruction}]
        return self.instruction

    def get_reward(self) -> float:
        """The episode's summed reward (0.0 when the browser failed: check ``env_error``)."""
        return float(self.reward)

    # -- tools: one per action verb -------------------------------------------------

    def click(self, x: int, y: int) -> list:
        """Left-click a point of the screen.

        Args:
            x: Horizontal pixel coordinate in the latest screenshot, counted from its left edge.
            y: Vertical pixel coordinate in the latest screenshot, counted from its top edge.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.click(x, y))

    def double_click(self, x: int, y: int) -> list:
        """Double-click a point of the screen.

        Args:
            x: Horizontal pixel coordinate in the latest screenshot, counted from its left edge.
            y: Vertical pixel coordinate in the latest screenshot, counted from its top edge.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.double_click(x, y))

    def right_click(self, x: int, y: int) -> list:
        """Right-click a point of the screen.

        Args:
            x: Horizontal pixel coordinate in the latest screenshot, counted from its left edge.
            y: Vertical pixel coordinate in the latest screenshot, counted from its top edge.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.right_click(x, y))

    def hover(self, x: int, y: int) -> list:
        """Move the mouse pointer to a point of the screen without clicking.

        Args:
            x: Horizontal pixel coordinate in the latest screenshot, counted from its left edge.
            y: Vertical pixel coordinate in the latest screenshot, counted from its top edge.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.hover(x, y))

    def drag(self, x1: int, y1: int, x2: int, y2: int) -> list:
        """Press the mouse at one point, move it to another and release it there.

        Args:
            x1: Horizontal pixel coordinate where the drag starts.
            y1: Vertical pixel coordinate where the drag starts.
            x2: Horizontal pixel coordinate where the drag ends.
            y2: Vertical pixel coordinate where the drag ends.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.drag(x1, y1, x2, y2))

    def scroll(self, x: int, y: int, dx: int, dy: int) -> list:
        """Turn the mouse wheel with the pointer over a point of the screen.

        Args:
            x: Horizontal pixel coordinate of the pointer.
            y: Vertical pixel coordinate of the pointer.
            dx: Pixels to scroll right (negative: left).
            dy: Pixels to scroll down (negative: up).

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.scroll(x, y, dx, dy))

    def type_text(self, text: str) -> list:
        """Type text into the focused field (click the field first).

        Args:
            text: The text to type.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.type_text(text))

    def key(self, name: str) -> list:
        """Press a key, possibly with modifiers.

        Args:
            name: The key: Enter, Tab, Escape, Backspace, Delete, ArrowUp, ArrowDown, ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, F1 to F12, or one character; modifiers joined with '+', e.g. ctrl+a or shift+Tab.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.key(name))

    def wait(self, ms: int) -> list:
        """Wait for the page to change, doing nothing.

        Args:
            ms: Milliseconds to wait.

        Returns:
            The new screenshot and the outcome of the action.
        """
        return self._act(actions.wait(ms))

    def done(self) -> list:
        """Declare the task finished.

        Returns:
            The final screenshot and the outcome of the episode.
        """
        return self._act(actions.done())

    # -- plumbing -------------------------------------------------------------------

    def _reset_once(self, seed: int) -> dict:
        if self._session is None:
            self._open()
        try:
            return self._session.reset(seed=seed)
        except GuirlServerError as e:
            if e.code != "unknown_session":
                raise
            self._open()  # reaped while idle: start over in a new session
            return self._session.reset(seed=seed)

    def _open(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
        self._session = self._client.create_session(self.task, **self.session_options)
        self._finalizer = weakref.finalize(self, _delete_quietly, self._session)

    def _close(self) -> None:
        """Delete the session now (TRL has no close hook; this is for scripts and tests)."""
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._session is not None:
            session, self._session = self._session, None
            _delete_quietly(session)

    def _act(self, action: str) -> list:
        if self._session is None:
            raise RuntimeError("no episode: reset() was not called")
        if self.episode_over:
            raise RuntimeError("The episode is over; no more actions are possible.")
        out = self._session.step(action)
        info = out.get("info") or {}
        self.info = info
        if info.get("status") == "env_error":
            self.env_error = self.episode_over = True
            raise GuirlEnvError(
                f"{action} failed in the browser: {info.get('env_error')}", info, self._session.id
            )
        reward = float(out.get("reward") or 0.0)
        self.reward += reward
        self.episode_over = bool(out.get("terminated") or out.get("truncated"))
        obs = out.get("observation")
        if obs is not None:
            self.observation = obs
        text = _outcome_text(action, reward, self.episode_over, info)
        image = screenshot_image(obs) if obs is not None else None
        if image is None:
            return [{"type": "text", "text": text}]
        return [{"type": "image", "image": image}, {"type": "text", "text": text}]


def _outcome_text(action: str, reward: float, done: bool, info: dict) -> str:
    parts = [f"{action}: {info.get('status', 'running')}"]
    if info.get("action_error"):
        parts.append(f"the action could not be done: {info['action_error']}")
    parts.append(f"reward {reward:g}")
    if info.get("step") is not None and info.get("max_steps") is not None:
        parts.append(f"step {info['step']} of {info['max_steps']}")
    if done:
        parts.append("the episode is over")
    return "; ".join(parts) + "."


def _png_data_url(array: np.ndarray) -> str:
    buf = io.BytesIO()
    Image.fromarray(np.asarray(array, dtype=np.uint8)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def to_openai_messages(
    obs: dict[str, Any],
    system_prompt: str | None = SYSTEM_PROMPT,
    text: str | None = None,
) -> list[dict]:
    """Chat messages for an OpenAI-compatible model (vLLM, ART's ``model.openai_client()``):
    an optional system message, then one user message with the instruction and the
    screenshot as a data URL.

    ``obs`` is either a server observation (base64 ``screenshot``, as from
    ``Session.reset/step`` or OpenEnv's client) or a :class:`GuirlEnv` observation
    (``screenshot`` as an ``(H, W, 3)`` array). ``text`` replaces the default user text,
    ``Instruction: <instruction>``: the layout guirl's ``openai:`` policy sends and
    ``guirl serve-policy`` reads, so these messages drive a served guirl checkpoint too.
    """
    shot = obs.get("screenshot")
    if isinstance(shot, np.ndarray):
        url = _png_data_url(shot)
    else:
        url = screenshot_data_url(obs)
    instruction = obs.get("instruction", "")
    content: list[dict] = [{"type": "text", "text": text if text is not None else f"Instruction: {instruction}"}]
    if url is not None:
        content.append({"type": "image_url", "image_url": {"url": url}})
    messages: list[dict] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": content})
    return messages
