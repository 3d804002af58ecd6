"""A real ``guirl serve`` for the client tests.

The server binary is ``$GUIRL_BIN``, else ``<repo>/target/release/guirl`` (build it with
``cargo build --release``); tests that need it fail when it is missing. The server
runs with ``TMPDIR`` set to a folder of its own, so the browser profile folders it makes
(``guirl-chromium-*``) lie there and every process it starts (chromedriver, Chromium and
its helpers) names that folder in its command line or environment: on teardown no such
process may be left.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[3]
#: A MiniWoB++ task with a target named in its instruction (``Click on the "X" button.``).
TASK = "miniwob/click-button"


def guirl_bin() -> Path | None:
    p = Path(os.environ.get("GUIRL_BIN") or REPO / "target" / "release" / "guirl")
    return p if p.is_file() and os.access(p, os.X_OK) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def address_off_loopback() -> str | None:
    """An IPv4 address of this machine that is not loopback (the one its default route
    leaves from), or None. Connecting a UDP socket sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))
            host = s.getsockname()[0]
    except OSError:
        return None
    return None if host.startswith("127.") or host == "0.0.0.0" else host


def _pgid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def processes_mentioning(text: str) -> dict[int, str]:
    """pid -> command line of every process whose command line or environment contains
    ``text``, and of every process in their process groups (Chromium's helpers rewrite
    their command line and environment with a process title, but stay in the group of
    the chromedriver that started them). This process's own group is left out."""
    needle = text.encode()
    own_group = os.getpgrp()
    cmdlines, groups, found = {}, {}, set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read()
            except OSError:
                environ = b""
        except OSError:
            continue
        cmdlines[pid] = cmdline.replace(b"\0", b" ").decode(errors="replace").strip()
        groups[pid] = _pgid(pid)
        if needle in cmdline or needle in environ:
            found.add(pid)
    started_groups = {groups[p] for p in found} - {own_group, None}
    found |= {p for p, g in groups.items() if g in started_groups}
    return {p: cmdlines[p] for p in found}


def is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@dataclass
class Server:
    url: str
    proc: subprocess.Popen
    tmpdir: str
    log: Path
    max_sessions: int

    def log_tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def live_processes(self) -> dict[int, str]:
        """Processes started for this server's browsers, zombies aside."""
        return {
            pid: cmd
            for pid, cmd in processes_mentioning(self.tmpdir).items()
            if pid != self.proc.pid and not is_zombie(pid)
        }


def start_server(*extra: str, max_sessions: int = 10, host: str = "127.0.0.1") -> Server:
    binary = guirl_bin()
    if binary is None:
        pytest.fail("no guirl binary: build it (cargo build --release) or set GUIRL_BIN")
    port = free_port(host)
    # Short: Chromium puts a unix socket under its profile, and socket paths are short.
    tmpdir = tempfile.mkdtemp(prefix="gs-", dir="/tmp")
    # Open to other users: a guirl running as root runs its browsers as an unprivileged
    # user (Chromium's sandbox), whose profiles go elsewhere when it cannot enter TMPDIR.
    os.chmod(tmpdir, 0o755)
    log = Path(tmpdir) / "serve.log"
    cmd = [
        str(binary),
        "serve",
        "--bind",
        f"{host}:{port}",
        "--max-sessions",
        str(max_sessions),
        *extra,
    ]
    env = dict(os.environ, TMPDIR=tmpdir)
    env.pop("GUIRL_SERVE_TOKEN", None)  # tokens only where a test asks for one
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://{host}:{port}", proc, tmpdir, log, max_sessions)
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{server.log_tail()}")
        try:
            if requests.get(server.url + "/health", timeout=2).status_code == 200:
                return server
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            stop_server(server, check=False)
            raise RuntimeError(f"guirl serve did not answer /health within 60 s:\n{server.log_tail()}")
        time.sleep(0.1)


def stop_server(server: Server, check: bool = True) -> None:
    """SIGTERM the server, then require that nothing it started outlives it."""
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
            if check:
                pytest.fail(f"guirl serve did not exit within 20 s of SIGTERM:\n{server.log_tail()}")
    deadline = time.monotonic() + 10
    left = server.live_processes()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = server.live_processes()
    for pid in left:  # do not leave them to the machine, whatever the verdict
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    profiles = [p.name for p in Path(server.tmpdir).glob("guirl-chromium-*")]
    shutil.rmtree(server.tmpdir, ignore_errors=True)
    if check:
        assert not left, f"browser processes outlived guirl serve: {left}\n{server.log_tail()}"
        assert not profiles, f"guirl serve left browser profile folders behind: {profiles}"


@pytest.fixture(scope="session")
def server():
    """One ``guirl serve`` (10 sessions) for the whole test run."""
    s = start_server(max_sessions=10)
    yield s
    stop_server(s)


@pytest.fixture(scope="session")
def small_server():
    """A second server: one session at most, behind the token ``s3cret``."""
    s = start_server("--token", "s3cret", max_sessions=1)
    yield s
    stop_server(s)


@pytest.fixture
def live(server):
    """The shared server, with any session a test left behind deleted afterwards (so
    tests cannot exhaust its capacity for the next ones)."""
    yield server
    try:
        for st in requests.get(server.url + "/v1/sessions", timeout=10).json().get("sessions", []):
            sid = st.get("session_id") or st.get("id")
            if sid:
                requests.delete(f"{server.url}/v1/sessions/{sid}", timeout=30)
    except requests.RequestException:
        pass


def kill_session_browser(base_url: str, session_id: str, server: Server) -> list[int]:
    """Kill the Chromium of one session, as a crash would. Uses the session state's
    ``browser_profile_dir``; without it, the server's only profile folder. Returns the
    killed pids."""
    state = requests.get(f"{base_url}/v1/sessions/{session_id}", timeout=10).json()
    profile = state.get("browser_profile_dir")
    if not profile:
        folders = list(Path(server.tmpdir).glob("guirl-chromium-*"))
        assert len(folders) == 1, (
            f"GET /v1/sessions/{{id}} has no browser_profile_dir ({sorted(state)}), and the server "
            f"has {len(folders)} profile folders, so the session's browser cannot be told apart"
        )
        profile = str(folders[0])
    killed = []
    for pid, cmd in processes_mentioning(profile).items():
        exe = cmd.split(" ", 1)[0]
        # The browser itself (its --user-data-dir lies in the profile folder), not chromedriver.
        if "chrom" in os.path.basename(exe) and "chromedriver" not in exe and "--type=" not in cmd:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass
    return killed


def target_center(instruction: str, elements: list[dict]) -> tuple[int, int]:
    """The centre of the element the instruction names in quotes (``Click on the "OK"
    button.``), in screenshot pixels."""
    import re

    m = re.search(r'"([^"]+)"', instruction)
    assert m, f"no quoted target in {instruction!r}"
    name = m.group(1).strip()
    for el in elements:
        if (el.get("text") or "").strip() == name:
            b = el["bbox"]
            return int(b["x"] + b["w"] / 2), int(b["y"] + b["h"] / 2)
    raise AssertionError(f"no element with text {name!r} among {[e.get('text') for e in elements]}")


def wait_no_sessions(base_url: str, timeout: float = 5.0) -> list[dict]:
    """Poll ``GET /v1/sessions`` until it is empty (or ``timeout``); returns what is left."""
    deadline = time.monotonic() + timeout
    while True:
        left = requests.get(base_url + "/v1/sessions", timeout=10).json()["sessions"]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)
