"""A veRL agent loop that plays guirl browser tasks through ``guirl serve``'s REST API.

veRL drives the model in token space (``server_manager.generate`` takes and returns token
ids, so no re-tokenization drift); guirl only supplies observations (a screenshot and text)
and takes action text. Per rollout:

    create a session (POST /v1/sessions) -> reset(seed from the row)
    loop: prompt += screenshot + text  ->  server_manager.generate(...)  (response_mask 1)
          decode -> action text -> POST .../step
          outcome + new screenshot as a user turn                       (response_mask 0)
    until the episode ends, the turn limit, or the response length; DELETE the session.

The row names the task and seed in ``extra_info`` (``task_id``, ``seed``), as in the ``rl``
parquet of ``guirl export`` and in ``make_dataset.py`` here. The summed environment reward
is returned as ``reward_score``, so no reward function is needed. An episode the browser
broke under (``info.status == "env_error"``) is returned with an all-zero response mask
(no gradient) and ``extra_fields["env_error"] = True``.

Register it with the agent-loop YAML (``agent_loop.yaml``) and select it per row with the
``agent_name`` column. veRL runs on GPUs and is not importable everywhere: without it, this
module still imports (``GuirlAgentLoop`` is then None) so that its environment side can be
used and tested on its own.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any
from uuid import uuid4

from guirl_client import GuirlClient, screenshot_image
from guirl_client.actions import SYSTEM_PROMPT, extract_action
from guirl_client.client import DEFAULT_URL

try:
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
    from verl.utils.profiler import simple_timer
except ImportError as _e:  # veRL is not installed (it needs GPUs): see the README
    AgentLoopBase = AgentLoopOutput = register = simple_timer = None
    VERL_IMPORT_ERROR: ImportError | None = _e
else:
    VERL_IMPORT_ERROR = None


def row_task_and_seed(row: dict[str, Any]) -> tuple[str, int]:
    """The task id and seed of a dataset row: ``extra_info.task_id`` / ``extra_info.seed``,
    else top-level ``task`` / ``seed`` columns."""
    extra = row.get("extra_info") or {}
    task = extra.get("task_id") or row.get("task") or row.get("task_id")
    if not task:
        raise ValueError("the row names no task: put it in extra_info.task_id (or a `task` column)")
    seed = extra.get("seed", row.get("seed", 0))
    return str(task), int(seed or 0)


def outcome_text(action: str, info: dict) -> str:
    """What the model is told after a step (before the new screenshot)."""
    text = f"{action} -> {info.get('status')}"
    if info.get("action_error"):
        text += f" ({info['action_error']})"
    return text + f". Step {info.get('step')} of {info.get('max_steps')}. The screen now:"


class GuirlEpisode:
    """One guirl session driven from asyncio (the blocking REST calls run in threads)."""

    def __init__(self, base_url: str, token: str | None = None, session_options: dict | None = None):
        self.client = GuirlClient(base_url, token)
        self.options = session_options or {}
        self.session = None

    async def start(self, task: str, seed: int) -> dict:
        """Create the session and reset it: ``{"observation", "info"}``. A reset the
        browser failed is tried once more (the server starts a fresh browser for it)."""
        self.session = await asyncio.to_thread(self.client.create_session, task, **self.options)
        out = await asyncio.to_thread(self.session.reset, seed)
        if out.get("observation") is None or (out.get("info") or {}).get("status") == "env_error":
            out = await asyncio.to_thread(self.session.reset, seed)
        return out

    async def step(self, action: str) -> dict:
        return await asyncio.to_thread(self.session.step, action)

    async def close(self) -> None:
        if self.session is not None:
            await asyncio.to_thread(self.session.close)
            self.session = None
        self.client.close()


if AgentLoopBase is not None:

    @register("guirl_agent")
    class GuirlAgentLoop(AgentLoopBase):
        """Multi-turn GUI agent loop over ``guirl serve``.

        Extra keys of its agent-loop YAML entry arrive as keyword arguments:
        ``base_url`` (default ``$GUIRL_SERVER_URL`` or ``http://127.0.0.1:8765``), ``token``
        (default ``$GUIRL_SERVE_TOKEN``), ``max_turns`` (default the rollout's
        ``multi_turn.max_assistant_turns``, else 10), ``session_options`` (e.g.
        ``{max_steps: 10}``) and ``system_prompt``.
        """

        def __init__(
            self,
            trainer_config,
            server_manager,
            tokenizer,
            processor,
            base_url: str | None = None,
            token: str | None = None,
            max_turns: int | None = None,
            session_options: dict | None = None,
            system_prompt: str = SYSTEM_PROMPT,
            **kwargs,
        ):
            super().__init__(trainer_config, server_manager, tokenizer, processor, **kwargs)
            rollout = self.config.actor_rollout_ref.rollout
            self.response_length = rollout.response_length
            self.max_turns = max_turns or rollout.multi_turn.max_assistant_turns or 10
            self.base_url = base_url or os.environ.get("GUIRL_SERVER_URL", DEFAULT_URL)
            self.token = token or os.environ.get("GUIRL_SERVE_TOKEN")
            self.session_options = dict(session_options or {})
            self.guirl_system_prompt = system_prompt

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            task, seed = row_task_and_seed(kwargs)
            metrics: dict[str, Any] = {}
            episode = GuirlEpisode(self.base_url, self.token, self.session_options)
            request_id = uuid4().hex
            reward, status, env_error, turns = 0.0, "running", False, 0
            response_mask: list[int] = []
            response_logprobs: list[float] = []
            try:
                out = await episode.start(task, seed)
                obs, info = out.get("observation"), out.get("info") or {}
                if obs is None or info.get("status") == "env_error":
                    raise RuntimeError(f"guirl reset of {task} seed {seed} failed: {info.get('env_error')}")
                images = [screenshot_image(obs)]
                messages = [
                    {"role": "system", "content": self.guirl_system_prompt},
                    {
                        "role": "user",
                        "content": [{"type": "image"}, {"type": "text", "text": f"Task: {obs['instruction']}"}],
                    },
                ]
                prompt_ids = await self.apply_chat_template(messages, images=images)
                ids = list(prompt_ids)

                while turns < self.max_turns:
                    with simple_timer("generate_sequences", metrics):
                        gen = await self.server_manager.generate(
                            request_id=request_id, prompt_ids=ids, sampling_params=sampling_params, image_data=images
                        )
                    turns += 1
                    ids += gen.token_ids
                    response_mask += [1] * len(gen.token_ids)
                    if gen.log_probs:
                        response_logprobs += gen.log_probs
                    if len(response_mask) >= self.response_length:
                        break
                    text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
                    action = extract_action(text) or text.strip()[:10_000]
                    with simple_timer("tool_calls", metrics):
                        step = await episode.step(action)
                    info = step.get("info") or {}
                    status = info.get("status", status)
                    reward += float(step.get("reward") or 0.0)
                    if status == "env_error":
                        env_error = True
                        break
                    if step.get("terminated") or step.get("truncated"):
                        break
                    # The environment's answer: a user turn with the outcome and the new screen.
                    image = screenshot_image(step["observation"])
                    env_messages = [
                        {"role": "user", "content": [{"type": "text", "text": outcome_text(action, info)}, {"type": "image"}]}
                    ]
                    env_ids = await self.apply_chat_template(env_messages, images=[image], remove_system_prompt=True)
                    if len(response_mask) + len(env_ids) >= self.response_length:
                        break
                    images.append(image)
                    ids += env_ids
                    response_mask += [0] * len(env_ids)
                    if response_logprobs:
                        response_logprobs += [0.0] * len(env_ids)
            finally:
                await episode.close()

            if env_error:  # not the policy's doing: keep it out of the loss
                response_mask = [0] * len(response_mask)
            response_ids = ids[len(prompt_ids) :]
            n = self.response_length
            return AgentLoopOutput(
                prompt_ids=prompt_ids,
                response_ids=response_ids[:n],
                response_mask=response_mask[:n],
                response_logprobs=response_logprobs[:n] if response_logprobs else None,
                multi_modal_data={"images": images},
                reward_score=reward,
                num_turns=2 * turns + 1,
                metrics=metrics,
                extra_fields={
                    "task_id": task,
                    "seed": seed,
                    "status": status,
                    "won": status == "success",
                    "env_error": env_error,
                },
            )

else:
    GuirlAgentLoop = None
