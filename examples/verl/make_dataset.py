"""Write the train/validation parquet files that drive ``guirl_agent_loop.py`` in veRL.

Each row is one episode start: the task and seed go in ``extra_info`` (``task_id``,
``seed``), ``agent_name`` selects the guirl agent loop. The screenshot comes from the
environment at run time, so the rows carry no images and the prompt no ``<image>``
placeholder (veRL asserts that the two counts match). ``rollout.n`` copies of a row are
rolled out from the same seed, i.e. from the same screen: a GRPO group.

    python make_dataset.py --tasks miniwob/click-button,miniwob/click-link \\
        --train 512 --val 64 --out ~/data/guirl

Train seeds are 0, 1, 2, ...; validation seeds start at 2^16 so the two never overlap.
With ``--server URL`` (default ``$GUIRL_SERVER_URL``) the task ids are checked against
that server's ``GET /v1/tasks`` first, so a typo fails here rather than at rollout time.
"""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

VAL_SEED_BASE = 2**16


def rows(tasks: list[str], n: int, split: str, agent_name: str) -> list[dict]:
    base = 0 if split == "train" else VAL_SEED_BASE
    out = []
    for i in range(n):
        task = tasks[i % len(tasks)]
        seed = base + i // len(tasks)
        out.append(
            {
                "data_source": f"guirl/{task}",
                # Not shown to the model: the agent loop builds the prompt from the
                # environment (instruction + screenshot). RLHFDataset needs the column.
                "prompt": [{"role": "user", "content": f"Solve the web task {task}."}],
                "ability": "gui",
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"split": split, "index": i, "task_id": task, "seed": seed},
                "agent_name": agent_name,
            }
        )
    return out


def write(path: Path, table_rows: list[dict]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(pa.Table.from_pylist(table_rows), tmp)
    tmp.replace(path)  # atomic: a reader never sees half a file


def unknown_tasks(tasks: list[str], server: str) -> list[str]:
    """What is wrong with ``tasks`` on ``server`` (token from ``$GUIRL_SERVE_TOKEN``): one
    line per id it does not serve, with the closest ids it does."""
    from guirl_client import GuirlClient

    served = [t["id"] for t in GuirlClient(server).tasks()]
    out = []
    for t in tasks:
        if t not in served:
            close = difflib.get_close_matches(t, served, n=3, cutoff=0.6)
            out.append(f"{t!r} is not a task of {server}" + (f" (closest: {', '.join(close)})" if close else ""))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", required=True, help="comma-separated task ids (GET /v1/tasks lists them)")
    ap.add_argument("--train", type=int, default=512, help="train rows")
    ap.add_argument("--val", type=int, default=64, help="validation rows")
    ap.add_argument("--agent-name", default="guirl_agent")
    ap.add_argument("--out", type=Path, required=True, help="folder for train.parquet and val.parquet")
    ap.add_argument(
        "--server",
        default=os.environ.get("GUIRL_SERVER_URL"),
        help="a guirl serve URL whose task list the ids are checked against (default $GUIRL_SERVER_URL)",
    )
    args = ap.parse_args(argv)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks:
        ap.error("--tasks: give at least one task id")
    if args.server:
        wrong = unknown_tasks(tasks, args.server)
        if wrong:
            ap.error("--tasks: " + "; ".join(wrong) + " (guirl tasks lists the ids)")
    else:
        print("task ids not checked: give --server URL (or set GUIRL_SERVER_URL) to check them")
    args.out.mkdir(parents=True, exist_ok=True)
    write(args.out / "train.parquet", rows(tasks, args.train, "train", args.agent_name))
    write(args.out / "val.parquet", rows(tasks, args.val, "test", args.agent_name))
    print(f"wrote {args.train} train and {args.val} validation rows to {args.out}")


if __name__ == "__main__":
    main()
