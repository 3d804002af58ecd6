"""Python client for ``guirl serve``: guirl's browser environments over HTTP.

- :class:`GuirlClient` / :class:`Session`: the REST API (``docs/serve.md``).
- :class:`GuirlEnv`: a ``gymnasium.Env`` (also ``gymnasium.make("guirl/GuirlEnv-v0", task=...)``).
- :class:`GuirlTRLEnv`: for TRL's ``GRPOTrainer(environment_factory=GuirlTRLEnv)``.
- :func:`to_openai_messages`: an observation as chat messages for OpenAI-compatible models.
- :mod:`guirl_client.verl_agent`: verl-agent environment managers on Ray actors.
- :mod:`guirl_client.actions`: the action text (``click(x, y)``, ``type("...")``, ...).
"""

import gymnasium as _gym

from . import actions
from .client import (
    DEFAULT_URL,
    GuirlClient,
    GuirlEnvError,
    GuirlServerError,
    Session,
    decode_screenshot,
    parse_frame,
    screenshot_data_url,
    screenshot_image,
)
from .gym_env import GuirlEnv
from .trl_env import GuirlTRLEnv, to_openai_messages

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL",
    "GuirlClient",
    "GuirlEnv",
    "GuirlEnvError",
    "GuirlServerError",
    "GuirlTRLEnv",
    "Session",
    "actions",
    "decode_screenshot",
    "parse_frame",
    "screenshot_data_url",
    "screenshot_image",
    "to_openai_messages",
]

#: The gymnasium id: ``gymnasium.make(ENV_ID, task="miniwob/click-button", base_url=...)``.
ENV_ID = "guirl/GuirlEnv-v0"
if ENV_ID not in _gym.registry:
    _gym.register(id=ENV_ID, entry_point="guirl_client.gym_env:GuirlEnv")
