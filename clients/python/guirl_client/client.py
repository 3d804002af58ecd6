"""A thin client for the REST API of ``guirl serve`` (see ``docs/serve.md``).

::

    client = GuirlClient("http://127.0.0.1:8765")
    with client.create_session("miniwob/click-button") as s:
        out = s.reset(seed=0)                     # {"observation": {...}, "info": {...}}
        out = s.step("click(80, 120)")            # + reward, terminated, truncated
        image = decode_screenshot(out["observation"])   # (H, W, 3) uint8

Resets and steps come as binary frames (``docs/serve.md``, "Binary frames"): the answer's
JSON, then the screenshot's bytes, no base64. The observation's ``screenshot`` is then a
read-only ``(H, W, 3)`` uint8 array. When the server is on this machine the pixels do not
cross the socket at all: they are raw RGB in shared memory (``shm``, "Shared-memory
frames"), copied out as the answer arrives; where that file cannot be read (the server in
another container) the client falls back to ``raw`` RGB in the frame. A remote server
sends ``png``. ``GuirlClient(binary=False)`` gives the JSON form (``screenshot`` a base64
string), as OpenEnv clients see it.

Errors the server answers with its JSON error body raise :class:`GuirlServerError`
(``code``, ``message``, ``status``). A browser failure is not an HTTP error: it is a
normal answer with ``info["status"] == "env_error"``; :class:`GuirlEnvError` is what the
environment wrappers (``GuirlEnv``, ``GuirlTRLEnv``) raise for it.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import mmap
import os
import struct
import time
import warnings
from typing import Any
from urllib.parse import urlparse

import numpy as np
import requests
from PIL import Image

DEFAULT_URL = "http://127.0.0.1:8765"
#: The media type of a binary frame (what ``Accept`` asks for).
FRAME_MEDIA_TYPE = "application/octet-stream"
#: magic "GRLF", version (1 byte), 3 reserved bytes, JSON length (u32 little-endian).
_FRAME_HEADER = struct.Struct("<4sB3xI")
FRAME_VERSION = 1
#: A shared-memory frame file's header: magic "GRLS", version (u32), seq (u64), bytes (u64).
_SHM_HEADER = struct.Struct("<4sIQQ")


class GuirlServerError(Exception):
    """The server answered with an error: ``code`` is the stable code of ``docs/serve.md``
    (``unknown_task``, ``capacity_reached``, ...), ``status`` the HTTP status."""

    def __init__(self, code: str, message: str, status: int | None = None):
        super().__init__(f"{code}: {message}" + (f" (HTTP {status})" if status else ""))
        self.code = code
        self.message = message
        self.status = status


class GuirlEnvError(RuntimeError):
    """The browser failed under the episode (``info["status"] == "env_error"``).

    Not the agent's fault: mask the episode out of training (or relaunch it with the same
    seed). The session stays usable: the next ``reset`` starts a fresh browser.
    ``info`` is the server's info dict, when there was one.
    """

    def __init__(self, message: str, info: dict | None = None, session_id: str | None = None):
        super().__init__(message)
        self.info = info or {}
        self.session_id = session_id


def _error_from_response(resp: requests.Response) -> GuirlServerError:
    try:
        body = resp.json()
        err = body["error"]
        return GuirlServerError(str(err["code"]), str(err.get("message", "")), resp.status_code)
    except (ValueError, KeyError, TypeError):
        text = resp.text.strip()[:500]
        return GuirlServerError(
            "http_error",
            f"{resp.request.method} {resp.url} answered {resp.status_code} without guirl's error body: {text!r}",
            resp.status_code,
        )


def _retry_after(resp: requests.Response, attempt: int, cap: float) -> float:
    """Seconds to wait before retrying a 503: the Retry-After header (seconds), else an
    exponential backoff from 0.5 s."""
    value = resp.headers.get("Retry-After")
    try:
        wait = float(value) if value is not None else 0.5 * 2**attempt
    except ValueError:
        wait = 0.5 * 2**attempt
    return max(0.0, min(wait, cap))


def _is_loopback(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse_frame(data: bytes) -> dict:
    """A binary frame (``docs/serve.md``, "Binary frames") as the answer it carries: the
    JSON, with the observation's ``screenshot`` the image as a read-only ``(H, W, 3)``
    uint8 array (None for ``screenshot = "none"``). The observation sits at
    ``["observation"]`` (REST) or ``["data"]["observation"]`` (WebSocket)."""
    if len(data) < _FRAME_HEADER.size:
        raise ValueError(f"not a guirl binary frame: {len(data)} bytes, shorter than its header")
    magic, version, n = _FRAME_HEADER.unpack_from(data)
    if magic != b"GRLF":
        raise ValueError(f"not a guirl binary frame: it starts {bytes(data[:4])!r}, not b'GRLF'")
    if version != FRAME_VERSION:
        raise ValueError(f"binary frame version {version}; this client reads {FRAME_VERSION}: upgrade it")
    start = _FRAME_HEADER.size
    if start + n > len(data):
        raise ValueError(f"binary frame cut short: its JSON is {n} bytes, {len(data) - start} follow the header")
    answer = json.loads(bytes(memoryview(data)[start : start + n]))
    holder = answer if "observation" in answer else (answer.get("data") or {})
    obs = holder.get("observation")
    if obs is not None:
        obs["screenshot"] = _frame_image(obs, data, start + n)
    return answer


def _frame_image(obs: dict, data: bytes, offset: int) -> np.ndarray | None:
    fmt = obs.get("screenshot_format")
    size = len(data) - offset
    if fmt == "none" or (size == 0 and fmt != "raw"):
        return None
    if fmt == "raw":
        h, w = int(obs["height"]), int(obs["width"])
        if size != h * w * 3:
            raise ValueError(f"a raw {w}x{h} screenshot is {h * w * 3} bytes; the frame has {size}")
        # A view on the answer's bytes: no copy.
        return np.frombuffer(data, dtype=np.uint8, count=size, offset=offset).reshape(h, w, 3)
    img = Image.open(io.BytesIO(memoryview(data)[offset:]))
    arr = np.asarray(img.convert("RGB") if img.mode != "RGB" else img, dtype=np.uint8)
    arr.flags.writeable = False
    return arr


class _SharedFrames:
    """Reads shared-memory frames (``screenshot = "shm"``): one open file per session,
    and with ``zero_copy`` one read-only mapping of it, whose arrays are views."""

    def __init__(self, zero_copy: bool = False):
        self.zero_copy = zero_copy
        self.fds: dict[str, int] = {}
        self.maps: dict[str, mmap.mmap] = {}

    def fd(self, path: str) -> int:
        fd = self.fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError as e:
                raise GuirlServerError(
                    "shm_unreadable",
                    f"cannot open the shared-memory frame {path} ({e.strerror}): the server must run "
                    'on this machine, in this container, as this user; otherwise use screenshot="raw"',
                ) from e
            self.fds[path] = fd
        return fd

    def _map(self, path: str, end: int) -> mmap.mmap:
        """The file's mapping, made again when a frame reaches past it (the server only
        grows the file, so an older mapping stays valid for the arrays that use it)."""
        m = self.maps.get(path)
        if m is None or len(m) < end:
            m = mmap.mmap(self.fd(path), 0, access=mmap.ACCESS_READ)
            if len(m) < end:
                raise ValueError(f"{path} holds {len(m)} bytes, short of the frame's {end}")
            self.maps[path] = m
        return m

    def read(self, obs: dict) -> np.ndarray:
        """The pixels an observation's ``screenshot_shm`` names as a read-only ``(H, W, 3)``
        uint8 array: copied out (it outlives the next answer), or with ``zero_copy`` a view
        of the file that the session's next request overwrites."""
        at = obs["screenshot_shm"]
        h, w = int(obs["height"]), int(obs["width"])
        n, seq, offset = int(at["bytes"]), int(at["seq"]), int(at["offset"])
        if n != h * w * 3:
            raise ValueError(f"a {w}x{h} shm screenshot is {h * w * 3} bytes; the answer says {n}")
        fd = self.fd(at["path"])
        m = self._map(at["path"], offset + n) if self.zero_copy else None

        def check() -> None:  # a frame overwritten meanwhile is refused (a copy: before and after)
            head = m[: _SHM_HEADER.size] if m is not None else os.pread(fd, _SHM_HEADER.size, 0)
            if len(head) != _SHM_HEADER.size or head[:4] != b"GRLS":
                raise ValueError(f"{at['path']} holds no guirl frame: was the session closed?")
            now = _SHM_HEADER.unpack(head)[2]
            if now != seq:
                raise ValueError(
                    f"shm frame {seq} was overwritten by frame {now}: read it before the session's next "
                    "request, and send one request at a time per session"
                )

        check()
        if m is not None:
            return np.frombuffer(m, dtype=np.uint8, count=n, offset=offset).reshape(h, w, 3)
        data = os.pread(fd, n, offset)
        check()
        if len(data) != n:
            raise ValueError(f"{at['path']} holds {len(data)} bytes of pixels, not {n}")
        return np.frombuffer(data, dtype=np.uint8).reshape(h, w, 3)

    def forget(self, path: str | None) -> None:
        # The mapping is dropped, not closed: arrays still viewing it keep it alive.
        if path:
            self.maps.pop(path, None)
        fd = self.fds.pop(path, None) if path else None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.maps.clear()
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class GuirlClient:
    """Talks to one ``guirl serve``.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8765``.
        token: sent as ``Authorization: Bearer <token>`` (``guirl serve --token``);
            ``None`` reads ``$GUIRL_SERVE_TOKEN``, as the server does (``""`` sends none).
        timeout: seconds per request (a reset that starts a browser can take a few).
        retries: how many times a ``503 capacity_reached`` is retried, waiting what its
            ``Retry-After`` says (capped at ``max_retry_wait``); 0 raises at once.
        max_retry_wait: the longest single wait between retries, in seconds.
        binary: resets and steps answer in binary frames (the screenshot's bytes after the
            JSON, no base64); False gives the JSON form.
        screenshot: the encoding of the sessions it creates (``shm``, ``raw``, ``png``,
            ``jpeg``, ``none``); by default, when binary and the server is on loopback,
            ``shm`` (pixels in shared memory: the fastest there), falling back to ``raw``
            for a session whose frame file this process cannot open; else ``png`` (the
            server's default).
        zero_copy: ``shm`` screenshots are views of the frame file instead of copies: no
            copy of the pixels at all (2.76 MB a frame at 1280x720), but the array changes
            with the session's next reset or step. Copy what you keep
            (``obs["screenshot"].copy()``); reading a view after the next request reads the
            next frame.

    Connections are kept alive (one ``requests.Session``). Only 503s are retried: a step
    that failed in transit is not repeated, since the server may have executed it.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        max_retry_wait: float = 30.0,
        binary: bool = True,
        screenshot: str | None = None,
        zero_copy: bool = False,
    ):
        self.base_url = base_url.rstrip("/")
        self.binary = bool(binary)
        #: Whether ``shm`` was chosen here (not asked for): a session that cannot read
        #: its frame file then falls back to ``raw``.
        self.auto_shm = screenshot is None and self.binary and _is_loopback(self.base_url)
        if screenshot is None and self.binary:
            screenshot = "shm" if self.auto_shm else "png"
        #: The encoding sessions are created with (None: the server's default, png).
        self.screenshot = screenshot
        self.frames = _SharedFrames(zero_copy)
        self.timeout = timeout
        self.retries = retries
        self.max_retry_wait = max_retry_wait
        self.http = requests.Session()
        self.http.headers["Accept"] = "application/json"
        if token is None:
            token = os.environ.get("GUIRL_SERVE_TOKEN")
        if token:
            self.http.headers["Authorization"] = f"Bearer {token}"

    # -- plumbing -------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        headers: dict | None = None,
    ) -> requests.Response:
        """Send one request, retrying 503s; raise :class:`GuirlServerError` on any error
        status. Returns the (2xx) response."""
        url = self.base_url + path
        attempt = 0
        while True:
            try:
                resp = self.http.request(
                    method, url, json=json, params=params, headers=headers, timeout=self.timeout
                )
            except requests.ConnectionError as e:
                raise GuirlServerError(
                    "connection_failed",
                    f"cannot reach guirl serve at {self.base_url} ({e.__class__.__name__}); "
                    "is it running? start it with `guirl serve --bind 127.0.0.1:8765`",
                ) from e
            except requests.Timeout as e:
                raise GuirlServerError(
                    "timeout", f"{method} {path} got no answer within {self.timeout} s"
                ) from e
            if resp.status_code == 503 and attempt < self.retries:
                time.sleep(_retry_after(resp, attempt, self.max_retry_wait))
                attempt += 1
                continue
            if resp.status_code >= 400:
                raise _error_from_response(resp)
            return resp

    def _json(self, method: str, path: str, **kw) -> Any:
        return self.request(method, path, **kw).json()

    def _observation(self, path: str, body: dict) -> dict:
        """A reset or step: a binary frame when ``binary``, else JSON; shared-memory
        pixels are read at once."""
        if not self.binary:
            out = self._json("POST", path, json=body)
        else:
            resp = self.request("POST", path, json=body, headers={"Accept": FRAME_MEDIA_TYPE})
            if resp.headers.get("Content-Type", "").startswith(FRAME_MEDIA_TYPE):
                out = parse_frame(resp.content)
            else:
                out = resp.json()  # a server without binary frames answers JSON
        obs = out.get("observation")
        if obs and obs.get("screenshot_format") == "shm":
            obs["screenshot"] = self.frames.read(obs)
        return out

    # -- routes ---------------------------------------------------------------------

    def health(self) -> dict:
        """``GET /health``: ``{"status": "healthy", "sessions": n, "max_sessions": m}``."""
        return self._json("GET", "/health")

    def tasks(self) -> list[dict]:
        """``GET /v1/tasks``: ``[{"id", "suite", "width", "height", "max_steps"}, ...]``."""
        return self._json("GET", "/v1/tasks")["tasks"]

    def sessions(self) -> list[dict]:
        """``GET /v1/sessions``: the state of every live session."""
        return self._json("GET", "/v1/sessions")["sessions"]

    def create_session(self, task: str | None = None, *, task_spec: str | None = None, **options) -> "Session":
        """``POST /v1/sessions``: a new session for ``task`` (a task id like
        ``miniwob/click-button``) or ``task_spec`` (a website spec as TOML).

        Options (``docs/serve.md``): ``max_steps``, ``strict_actions``, ``wall_clock_ms``,
        ``screenshot`` (``shm`` | ``raw`` | ``png`` | ``jpeg`` | ``none``; the client's
        ``screenshot`` when not given), ``jpeg_quality``, ``elements``, ``viewport``
        ({"width", "height"}, website specs only). None values are left out.
        """
        if (task is None) == (task_spec is None):
            raise ValueError("give exactly one of task (a task id) or task_spec (website spec TOML)")
        body: dict[str, Any] = {"task": task} if task is not None else {"task_spec": task_spec}
        auto = options.get("screenshot") is None and self.auto_shm
        if options.get("screenshot") is None and self.screenshot is not None:
            options["screenshot"] = self.screenshot
        body.update({k: v for k, v in options.items() if v is not None})
        try:
            info = self._json("POST", "/v1/sessions", json=body)
        except GuirlServerError as e:
            # A loopback address that the server does not see as one (a container's
            # published port): pixels in the frame instead.
            if not (auto and e.code == "bad_option" and '"shm"' in e.message):
                raise
            body["screenshot"] = "raw"
            info = self._json("POST", "/v1/sessions", json=body)
        shm_path = (info.get("screenshot_shm") or {}).get("path")
        if shm_path:
            try:
                self.frames.fd(shm_path)
            except GuirlServerError as e:
                if not auto:
                    Session(self, info).close()
                    raise
                # The server is on loopback but its files are not ours to read (another
                # container, another user): pixels in the frame instead.
                warnings.warn(f"{e.message}; this session uses raw frames", stacklevel=2)
                Session(self, info).close()
                info = self._json("POST", "/v1/sessions", json={**body, "screenshot": "raw"})
        return Session(self, info)

    def session(self, session_id: str) -> "Session":
        """Attach to an existing session by id (``GET /v1/sessions/{id}``)."""
        state = self._json("GET", f"/v1/sessions/{session_id}")
        return Session(self, {"session_id": session_id, **state})

    def close(self) -> None:
        """Close the HTTP connections and frame files (sessions on the server are left alone)."""
        self.frames.close()
        self.http.close()

    def __enter__(self) -> "GuirlClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GuirlClient({self.base_url!r})"


class Session:
    """One environment session on the server (one browser). Made by
    :meth:`GuirlClient.create_session`; a context manager that deletes it on exit."""

    def __init__(self, client: GuirlClient, created: dict):
        self.client = client
        self.id: str = created["session_id"]
        self.task_id: str | None = created.get("task_id")
        self.max_steps: int | None = created.get("max_steps")
        self.width: int | None = created.get("width")
        self.height: int | None = created.get("height")
        self._shm_path: str | None = (created.get("screenshot_shm") or {}).get("path")
        self.closed = False

    def reset(self, seed: int | None = None, screenshot: str | None = None) -> dict:
        """``POST /v1/sessions/{id}/reset``: ``{"observation", "info"}``. The same seed
        gives the same start. A browser failure answers ``observation = None`` and
        ``info["status"] == "env_error"`` (no exception here)."""
        body: dict[str, Any] = {}
        if seed is not None:
            body["seed"] = int(seed)
        if screenshot is not None:
            body["screenshot"] = screenshot
        return self._seen(self.client._observation(f"/v1/sessions/{self.id}/reset", body))

    def step(self, action: str, screenshot: str | None = None) -> dict:
        """``POST /v1/sessions/{id}/step`` with action text:
        ``{"observation", "reward", "terminated", "truncated", "info"}``."""
        body: dict[str, Any] = {"action": action}
        if screenshot is not None:
            body["screenshot"] = screenshot
        return self._seen(self.client._observation(f"/v1/sessions/{self.id}/step", body))

    def _seen(self, out: dict) -> dict:
        # A step may ask for shm on a session made with another encoding: remember the
        # file, so that closing the session closes it here too.
        path = ((out.get("observation") or {}).get("screenshot_shm") or {}).get("path")
        self._shm_path = path or self._shm_path
        return out

    def state(self) -> dict:
        """``GET /v1/sessions/{id}``."""
        return self.client._json("GET", f"/v1/sessions/{self.id}")

    def render(self, format: str = "png") -> bytes:
        """``GET /v1/sessions/{id}/render``: the current screen as image bytes."""
        return self.client.request("GET", f"/v1/sessions/{self.id}/render", params={"format": format}).content

    def close(self) -> None:
        """``DELETE /v1/sessions/{id}``: the browser is killed. Closing twice, or a session
        the server already reaped, is fine."""
        if self.closed:
            return
        self.closed = True
        self.client.frames.forget(self._shm_path)
        try:
            self.client.request("DELETE", f"/v1/sessions/{self.id}")
        except GuirlServerError as e:
            if e.code != "unknown_session":
                raise

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Session({self.id!r}, task={self.task_id!r})"


def screenshot_image(observation: dict) -> Image.Image | None:
    """The observation's screenshot as an RGB PIL image (None when it has none)."""
    data = observation.get("screenshot") if observation else None
    if data is None or (isinstance(data, str) and not data):
        return None
    if isinstance(data, np.ndarray):  # from a binary frame
        return Image.fromarray(data)
    raw = base64.b64decode(data)
    if observation.get("screenshot_format") == "raw":
        h, w = int(observation["height"]), int(observation["width"])
        return Image.frombytes("RGB", (w, h), raw)
    img = Image.open(io.BytesIO(raw))
    return img.convert("RGB") if img.mode != "RGB" else img


def decode_screenshot(observation: dict) -> np.ndarray | None:
    """The observation's screenshot as a new, writable ``(height, width, 3)`` uint8 array
    (None when it has none, i.e. ``screenshot = "none"``)."""
    data = observation.get("screenshot") if observation else None
    if isinstance(data, np.ndarray):
        return data.copy()
    img = screenshot_image(observation)
    return None if img is None else np.asarray(img, dtype=np.uint8).copy()


def screenshot_data_url(observation: dict) -> str | None:
    """The screenshot as a ``data:image/...;base64,...`` URL: the server's PNG or JPEG as
    sent; pixels that came as an array or as raw RGB are encoded as PNG here."""
    data = observation.get("screenshot") if observation else None
    if data is None or (isinstance(data, str) and not data):
        return None
    fmt = observation.get("screenshot_format") or "png"
    if isinstance(data, np.ndarray) or fmt == "raw":
        buf = io.BytesIO()
        screenshot_image(observation).save(buf, format="PNG")
        return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return f"data:image/{fmt};base64,{data}"
