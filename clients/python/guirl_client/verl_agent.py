"""guirl environments for verl-agent's environment-manager pattern (GRPO / GiGPO groups).

verl-agent steps a batch of environments in lock step: an ``EnvironmentManager`` turns the
model's text into actions (``projection_f``), steps a vectorized environment whose
sub-environments live in Ray actors, and hands back observations as ``{'text', 'image',
'anchor'}``. Here every sub-environment is one REST session of a ``guirl serve``
(one browser), held by a light Ray actor (``num_cpus=0.1``: it only waits on HTTP)::

    import ray
    ray.init(num_cpus=2, include_dashboard=False)
    envs = GuirlMultiEnv("miniwob/click-button", env_num=4, group_n=2,
                         base_url="http://127.0.0.1:8765", seed=0)
    manager = GuirlEnvironmentManager(envs)
    obs, infos = manager.reset()                 # seeds drawn, np.repeat'ed per group
    obs, rewards, dones, infos = manager.step(["<action>click(80, 120)</action>"] * 8)
    infos[0]["won"], infos[0]["is_action_valid"]
    manager.close()                              # sessions deleted, actors gone

The ``group_n`` copies of a seed start from the same screen, which GRPO's group baseline
and GiGPO's anchor states need. A browser failure does not raise here (it would stop the
whole batch): the episode ends with ``info["env_error"]`` set and ``info["won"] = False``;
leave such trajectories out of the loss.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

from .actions import SYSTEM_PROMPT, extract_action
from .client import DEFAULT_URL, GuirlClient, GuirlServerError, decode_screenshot

try:  # ray is an extra: `pip install guirl-client[verl]`
    import ray
except ImportError:  # pragma: no cover - exercised only without ray
    ray = None


def _need_ray():
    if ray is None:
        raise ImportError("guirl_client.verl_agent needs Ray: pip install 'guirl-client[verl]'")
    return ray


class GuirlWorker:
    """One session of a ``guirl serve``, stepped from a Ray actor (see :class:`GuirlMultiEnv`).

    Observations are ``{"instruction": str, "screenshot": (H, W, 3) uint8, "elements": [...]}``.
    ``info`` is the server's info plus ``won`` (status ``success``), ``env_error`` (the
    browser's error or None) and the page's ``elements``.
    """

    def __init__(self, task: str, base_url: str = DEFAULT_URL, token: str | None = None, session_options=None):
        self.task = task
        self.client = GuirlClient(base_url, token)
        self.options = {k: v for k, v in (session_options or {}).items() if v is not None}
        self.session = None
        self.over = True
        self.last_obs: dict | None = None
        self.last_info: dict = {}

    def _reset_call(self, seed: int) -> dict:
        if self.session is None:
            self.session = self.client.create_session(self.task, **self.options)
        try:
            return self.session.reset(seed=seed)
        except GuirlServerError as e:
            if e.code != "unknown_session":
                raise
            self.session = self.client.create_session(self.task, **self.options)
            return self.session.reset(seed=seed)

    def reset(self, seed: int):
        """Start an episode from ``seed``; a browser failure is retried once (a fresh
        browser), then reported as ``info["env_error"]`` with a blank observation."""
        for _ in range(2):
            out = self._reset_call(int(seed))
            info = dict(out.get("info") or {})
            obs = out.get("observation")
            if obs is not None and info.get("status") != "env_error":
                break
        self.over = obs is None or info.get("status") == "env_error"
        self.last_obs = None  # a new episode: never show the previous one's screen
        o = self._obs(None if self.over else obs)
        return o, self._info(info, o)

    def step(self, action: str):
        """Step with action text; after the episode ended, repeat the last observation
        with reward 0 and done (lock-step batches keep stepping finished envs)."""
        if self.over:
            info = dict(self.last_info)
            info["valid_action"] = False
            return self._obs(None), 0.0, True, info
        try:
            out = self.session.step(action)
        except GuirlServerError as e:
            if e.code == "malformed_action":
                # Refused before it reached the browser (e.g. over 10,000 characters): an
                # invalid action that does not count as a step.
                info = dict(self.last_info, status="invalid_action", valid_action=False, action_error=e.message)
                o = self._obs(None)
                return o, 0.0, False, self._info(info, o)
            if e.code in ("unknown_session", "no_episode"):
                # The server no longer has the episode (reaped while idle): end it, masked.
                self.over = True
                info = dict(self.last_info, status="env_error", valid_action=False, env_error=str(e))
                o = self._obs(None)
                return o, 0.0, True, self._info(info, o)
            raise
        info = dict(out.get("info") or {})
        done = bool(out.get("terminated") or out.get("truncated")) or info.get("status") == "env_error"
        self.over = done
        o = self._obs(out.get("observation"))
        return o, float(out.get("reward") or 0.0), done, self._info(info, o)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None
        self.client.close()

    def _obs(self, obs: dict | None) -> dict:
        """The observation (the last one again when ``obs`` is None; a blank screen when
        there is none, after a failed reset)."""
        if obs is not None:
            self.last_obs = obs
        obs = self.last_obs
        if obs is None:
            h, w = (self.session.height, self.session.width) if self.session is not None else (0, 0)
            return {"instruction": "", "screenshot": np.zeros((h or 0, w or 0, 3), np.uint8), "elements": [], "step": 0}
        screen = decode_screenshot(obs)
        return {
            "instruction": obs.get("instruction", ""),
            "screenshot": screen,
            "elements": obs.get("elements") or [],
            "step": obs.get("step", 0),
        }

    def _info(self, info: dict, obs: dict) -> dict:
        info["won"] = info.get("status") == "success"
        info["elements"] = obs["elements"]  # for scripted policies and oracles
        info["env_error"] = info.get("env_error") if info.get("status") == "env_error" else None
        self.last_info = info
        return dict(info)


class GuirlMultiEnv:
    """``env_num`` task instances × ``group_n`` copies each, one Ray actor per copy.

    Args:
        task: a task id, or a list of ``env_num`` task ids (one per group).
        env_num: distinct starts per batch (verl-agent: ``data.train_batch_size``).
        group_n: copies of each start (verl-agent: ``env.rollout.n``).
        base_url, token: the server.
        seed: seeds the draw of episode seeds.
        is_train: train seeds come from [0, 2^16 - 1), validation seeds from [2^16, 2^32 - 1),
            so the two never overlap.
        resources_per_worker: Ray resources per actor.
        session_options: ``POST /v1/sessions`` options (``max_steps``, ``screenshot``, ...).

    The server must allow ``env_num * group_n`` sessions (``guirl serve --max-sessions``).
    """

    def __init__(
        self,
        task: str | Sequence[str],
        env_num: int = 1,
        group_n: int = 1,
        base_url: str = DEFAULT_URL,
        token: str | None = None,
        seed: int = 0,
        is_train: bool = True,
        resources_per_worker: dict | None = None,
        session_options: dict | None = None,
    ):
        rt = _need_ray()
        if not rt.is_initialized():
            rt.init(include_dashboard=False)
        tasks = [task] * env_num if isinstance(task, str) else list(task)
        if len(tasks) != env_num:
            raise ValueError(f"task: expected one task id or a list of env_num={env_num} ids, got {len(tasks)}")
        self.env_num, self.group_n = env_num, group_n
        self.num_processes = env_num * group_n
        self.is_train = is_train
        self.rng = np.random.RandomState(seed)
        self.tasks = list(np.repeat(np.array(tasks, dtype=object), group_n))
        actor = rt.remote(**(resources_per_worker or {"num_cpus": 0.1}))(GuirlWorker)
        self.workers = [actor.remote(t, base_url, token, session_options) for t in self.tasks]

    def draw_seeds(self) -> np.ndarray:
        """``env_num`` fresh episode seeds, each repeated ``group_n`` times."""
        low, high = (0, 2**16 - 1) if self.is_train else (2**16, 2**32 - 1)
        seeds = self.rng.randint(low, high, size=self.env_num, dtype=np.int64)
        return np.repeat(seeds, self.group_n)

    def reset(self, seeds: Sequence[int] | None = None):
        """Reset every copy. ``seeds``: ``env_num`` seeds (repeated ``group_n`` times here)
        or ``env_num * group_n`` seeds as they are; drawn when None."""
        if seeds is None:
            seeds = self.draw_seeds()
        else:
            seeds = np.asarray(seeds, dtype=np.int64)
            if len(seeds) == self.env_num:
                seeds = np.repeat(seeds, self.group_n)
            elif len(seeds) != self.num_processes:
                raise ValueError(
                    f"seeds: expected env_num={self.env_num} or env_num*group_n={self.num_processes}, got {len(seeds)}"
                )
        self.seeds = [int(s) for s in seeds]
        results = ray.get([w.reset.remote(s) for w, s in zip(self.workers, self.seeds)])
        obs, infos = [list(x) for x in zip(*results)]
        return obs, infos

    def step(self, actions: Sequence[str]):
        if len(actions) != self.num_processes:
            raise ValueError(f"expected {self.num_processes} actions, got {len(actions)}")
        results = ray.get([w.step.remote(a) for w, a in zip(self.workers, actions)])
        obs, rewards, dones, infos = [list(x) for x in zip(*results)]
        return obs, rewards, dones, infos

    def close(self) -> None:
        """Delete every session, then end the actors."""
        if not self.workers:
            return
        try:
            ray.get([w.close.remote() for w in self.workers])
        finally:
            for w in self.workers:
                ray.kill(w)
            self.workers = []


def guirl_projection(text_actions: Sequence[str]):
    """verl-agent's ``projection_f``: the model's texts → (action texts, validity flags).

    The action is the last ``<action>...</action>`` block, else the last ``verb(...)`` call in
    the text (:func:`guirl_client.actions.extract_action`). Text without one is sent as it is
    (the server answers ``invalid_action`` and counts the step) and flagged invalid.
    """
    actions, valids = [], []
    for text in text_actions:
        found = extract_action(text)
        actions.append(found if found is not None else (text or "").strip()[:10_000])
        valids.append(found is not None)
    return actions, valids


def _anchor(obs: dict) -> str:
    """A state key for GiGPO's anchor grouping: the instruction plus a digest of the
    screenshot pixels (equal states of a group get equal anchors)."""
    shot = obs.get("screenshot")
    digest = hashlib.sha1(shot.tobytes()).hexdigest()[:16] if isinstance(shot, np.ndarray) else "-"
    return f"{obs.get('instruction', '')}\n{digest}"


class GuirlEnvironmentManager:
    """verl-agent's ``EnvironmentManagerBase`` contract over :class:`GuirlMultiEnv`.

    ``reset(kwargs)`` → ``({'text': [prompt], 'image': [(H, W, 3) uint8], 'anchor': [key]}, infos)``;
    ``step(text_actions)`` → ``(obs, rewards (float32), dones (bool), infos)`` with
    ``info['is_action_valid']`` (an action was found *and* the server could execute it),
    ``info['projected_action']`` and ``info['won']``.

    ``text`` is ``template`` filled with the instruction, the step, and the last action and
    its outcome; it carries one ``<image>`` placeholder for the screenshot (verl's
    multimodal convention). Subclass and override :meth:`build_text_obs` for other prompts.
    """

    template = (
        SYSTEM_PROMPT
        + "\n\nTask: {instruction}\nStep {step}. {history}\nThe current screen:\n<image>"
    )

    def __init__(self, envs: GuirlMultiEnv, projection_f=guirl_projection, config: Any = None):
        self.envs = envs
        self.projection_f = projection_f
        self.config = config
        self._last_actions: list[str | None] = []
        self._last_infos: list[dict] = []

    def reset(self, kwargs: dict | None = None):
        seeds = (kwargs or {}).get("seeds")
        obs, infos = self.envs.reset(seeds)
        self._last_actions = [None] * len(obs)
        self._last_infos = infos
        return self._observations(obs), infos

    def step(self, text_actions: Sequence[str]):
        actions, valids = self.projection_f(text_actions)
        obs, rewards, dones, infos = self.envs.step(actions)
        for info, action, valid in zip(infos, actions, valids):
            info["projected_action"] = action
            info["is_action_valid"] = np.bool_(bool(valid) and bool(info.get("valid_action", False)))
            info["won"] = bool(info.get("won", False))
        self._last_actions = list(actions)
        self._last_infos = infos
        return (
            self._observations(obs),
            np.asarray(rewards, dtype=np.float32),
            np.asarray(dones, dtype=bool),
            infos,
        )

    def build_text_obs(self, obs: list[dict]) -> list[str]:
        texts = []
        for i, o in enumerate(obs):
            action = self._last_actions[i] if i < len(self._last_actions) else None
            info = self._last_infos[i] if i < len(self._last_infos) else {}
            if action is None:
                history = "No action taken yet."
            else:
                history = f"Last action: {action} ({info.get('status', '?')}"
                if info.get("action_error"):
                    history += f": {info['action_error']}"
                history += ")."
            texts.append(self.template.format(instruction=o["instruction"], step=o.get("step", 0), history=history))
        return texts

    def success_evaluator(self, *, total_infos, total_batch_list, **_) -> dict:
        """``success_rate`` per episode: ``info['won']`` at its last active step."""
        success = []
        for infos, items in zip(total_infos, total_batch_list):
            won = 0.0
            for info, item in zip(reversed(infos), reversed(items)):
                if item.get("active_masks", True):
                    won = float(info.get("won", False))
                    break
            success.append(won)
        return {"success_rate": np.asarray(success)}

    def close(self) -> None:
        self.envs.close()

    def _observations(self, obs: list[dict]) -> dict:
        return {
            "text": self.build_text_obs(obs),
            "image": [o["screenshot"] for o in obs],
            "anchor": [_anchor(o) for o in obs],
        }


def make_envs(config) -> tuple[GuirlEnvironmentManager, GuirlEnvironmentManager]:
    """verl-agent's ``make_envs`` for guirl: train and validation managers from a config
    with ``env.seed``, ``env.rollout.n``, ``data.train_batch_size``, ``data.val_batch_size``
    and ``env.guirl.{task, base_url, token, session_options}`` (``env.max_steps`` becomes the
    session's ``max_steps``). Validation envs use ``group_n = 1`` and seed ``env.seed + 1000``.
    """

    def get(node, key, default=None):
        if node is None:
            return default
        if isinstance(node, dict):
            return node.get(key, default)
        return getattr(node, key, default)

    env = get(config, "env")
    data = get(config, "data")
    g = get(env, "guirl") or {}
    options = dict(get(g, "session_options") or {})
    if get(env, "max_steps") is not None:
        options.setdefault("max_steps", int(get(env, "max_steps")))
    common = dict(
        task=get(g, "task"),
        base_url=get(g, "base_url", DEFAULT_URL),
        token=get(g, "token"),
        session_options=options,
    )
    seed = int(get(env, "seed", 0))
    train = GuirlMultiEnv(
        env_num=int(get(data, "train_batch_size")),
        group_n=int(get(get(env, "rollout"), "n", 1)),
        seed=seed,
        is_train=True,
        **common,
    )
    val = GuirlMultiEnv(
        env_num=int(get(data, "val_batch_size")), group_n=1, seed=seed + 1000, is_train=False, **common
    )
    return GuirlEnvironmentManager(train, config=config), GuirlEnvironmentManager(val, config=config)
