#!/usr/bin/env python3
"""Check that docs/qwen-vl.md's "Config keys" table covers every key transformers writes.

For both architectures it takes the keys of a default config as transformers saves it
(`to_dict()`: the top level, `text_config`, `vision_config`, and both `rope_parameters`
objects) and the fields of the six config classes, and fails naming any key the table
has in neither its section nor `any`. `tests/qwen_vl/config.rs` checks the other half: that the
table and the reader's list (`src/policy/qwen_vl/model/config_keys.rs`) agree.

    /tmp/ref/bin/python scripts/qwen_config_keys.py   # transformers 5.24 when last run
"""

import dataclasses
import re
import sys

import transformers
from transformers import Qwen2_5_VLConfig, Qwen3VLConfig


def table(path="docs/qwen-vl.md"):
    text = open(path).read()
    section = text.split("## Config keys", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([a-z ]+) \| `([^`]+)` \| (used|refused|ignored) \|", section, re.M)
    return {(s, k) for s, k, _ in rows}


def transformers_keys():
    out = set()
    for cls in [Qwen3VLConfig, Qwen2_5_VLConfig]:
        cfg = cls()
        d = cfg.to_dict()
        for name, sub, sub_cls in [
            ("top", d, cls),
            ("text", d["text_config"], type(cfg.text_config)),
            ("vision", d["vision_config"], type(cfg.vision_config)),
        ]:
            keys = set(sub) | {f.name for f in dataclasses.fields(sub_cls)}
            out |= {(name, k) for k in keys}
        out |= {("text rope", k) for k in d["text_config"]["rope_parameters"]}
        out |= {("vision rope", k) for k in d["vision_config"]["rope_parameters"]}
    return out


def main():
    have = table()
    missing = sorted((s, k) for s, k in transformers_keys() if (s, k) not in have and ("any", k) not in have)
    print(f"transformers {transformers.__version__}: {len(transformers_keys())} (section, key) pairs")
    if missing:
        for s, k in missing:
            print(f"not in the table: {s} `{k}`")
        sys.exit(1)
    print("every key is in docs/qwen-vl.md's table")


if __name__ == "__main__":
    main()
