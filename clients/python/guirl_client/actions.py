"""guirl's action text, written from Python.

Every action has one canonical text form, the same in logs, trajectory files, a model's
output and the HTTP API (``src/env/action.rs`` is the parser)::

    click(x, y)   double_click(x, y)   right_click(x, y)   hover(x, y)
    drag(x1, y1, x2, y2)   scroll(x, y, dx, dy)   type("text, with \\"escapes\\"")
    key(Enter)   key(ctrl+a)   wait(ms)   done()

Coordinates are integer pixels of the last observation's screenshot, origin top-left.
The functions here build that text; :func:`extract_action` finds an action in free-form
model output.
"""

from __future__ import annotations

import re
import string
import unicodedata

#: The action names, in the order of the grammar.
VERBS = (
    "click",
    "double_click",
    "right_click",
    "hover",
    "drag",
    "scroll",
    "type",
    "key",
    "wait",
    "done",
)

#: Characters the action text is written with (printable ASCII: names, digits, punctuation,
#: the quotes and escapes of ``type("...")``). ``type`` may carry any Unicode text; this is the
#: charset of :class:`GuirlEnv`'s ``action_space``, not a limit the server enforces.
ACTION_CHARSET = "".join(c for c in string.printable if c not in "\t\n\r\x0b\x0c")

#: The longest action text the server accepts (longer is a 400 ``malformed_action``).
MAX_ACTION_CHARS = 10_000


def _coord(v) -> int:
    """An integer pixel coordinate from an int, a float or a numeric string."""
    if isinstance(v, bool):
        raise TypeError(f"expected a pixel coordinate, got {v!r}")
    if isinstance(v, int):
        return v
    try:
        return int(round(float(v)))
    except (TypeError, ValueError):
        raise TypeError(f"expected a pixel coordinate (a number), got {v!r}") from None


def quote(text: str) -> str:
    """``text`` as a quoted string of the action grammar (``"`` and ``\\`` escaped,
    ``\\n``, ``\\t``, ``\\r``, other control characters as ``\\u{hex}``)."""
    out = ['"']
    for c in text:
        if c == '"':
            out.append('\\"')
        elif c == "\\":
            out.append("\\\\")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif unicodedata.category(c) == "Cc":
            out.append("\\u{%x}" % ord(c))
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


def click(x, y) -> str:
    """``click(x, y)``: left click at screenshot pixel (x, y)."""
    return f"click({_coord(x)}, {_coord(y)})"


def double_click(x, y) -> str:
    """``double_click(x, y)``."""
    return f"double_click({_coord(x)}, {_coord(y)})"


def right_click(x, y) -> str:
    """``right_click(x, y)``."""
    return f"right_click({_coord(x)}, {_coord(y)})"


def hover(x, y) -> str:
    """``hover(x, y)``: move the pointer there."""
    return f"hover({_coord(x)}, {_coord(y)})"


def drag(x1, y1, x2, y2) -> str:
    """``drag(x1, y1, x2, y2)``: press at (x1, y1), move to (x2, y2), release."""
    return f"drag({_coord(x1)}, {_coord(y1)}, {_coord(x2)}, {_coord(y2)})"


def scroll(x, y, dx, dy) -> str:
    """``scroll(x, y, dx, dy)``: turn the wheel by (dx, dy) pixels with the pointer at (x, y)."""
    return f"scroll({_coord(x)}, {_coord(y)}, {_coord(dx)}, {_coord(dy)})"


def type_text(text: str) -> str:
    """``type("text")``: type into whatever has focus."""
    if not isinstance(text, str):
        raise TypeError(f"expected the text to type, got {type(text).__name__}")
    return f"type({quote(text)})"


def key(combo: str) -> str:
    """``key(combo)``: press a key, e.g. ``Enter``, ``Tab``, ``ctrl+a``, ``shift+Tab``, ``a``.

    Named keys: Enter Tab Escape Backspace Delete Insert Space ArrowLeft ArrowUp ArrowRight
    ArrowDown Home End PageUp PageDown F1..F12; modifiers: ctrl alt shift meta. The combo
    is written bare (``key(Enter)``), not quoted.
    """
    combo = str(combo).strip()
    if len(combo) >= 2 and combo[0] == combo[-1] and combo[0] in "\"'":
        combo = combo[1:-1].strip()  # models like to quote it
    if not combo or ")" in combo:
        raise ValueError(f"expected a key like Enter or ctrl+a, got {combo!r}")
    return f"key({combo})"


def wait(ms) -> str:
    """``wait(ms)``: do nothing for ``ms`` milliseconds."""
    ms = _coord(ms)
    if ms < 0:
        raise ValueError(f"expected a non-negative number of milliseconds, got {ms}")
    return f"wait({ms})"


def done() -> str:
    """``done()``: declare the task finished."""
    return "done()"


_TAG = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_CALL = re.compile(r"\b(" + "|".join(VERBS) + r")\s*\(")


def _call_end(text: str, start: int) -> int | None:
    """Index just past the ``)`` closing the call whose ``(`` is at ``start``, skipping
    quoted strings; None when it never closes."""
    in_string = False
    i = start + 1
    while i < len(text):
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == ")":
            return i + 1
        i += 1
    return None


def extract_action(text: str) -> str | None:
    """The action in a model's free-form output, or None when there is none.

    Takes the last ``<action>...</action>`` block when there is one, else the last
    ``verb(...)`` call of the grammar in the text (``Thought: ... Action: click(3, 4)``).
    The result is not validated: the server says whether it parses
    (``info["valid_action"]``).
    """
    if not isinstance(text, str):
        return None
    tagged = _TAG.findall(text)
    if tagged:
        inner = tagged[-1].strip()
        return inner or None
    found = None
    for m in _CALL.finditer(text):
        end = _call_end(text, m.end() - 1)
        if end is not None:
            found = text[m.start() : end]
    return found


#: A system prompt that teaches a model the action text (for chat-style policies).
SYSTEM_PROMPT = """You operate a web page through its screenshot. Each turn, answer with exactly one action, written as one of:
click(x, y)  double_click(x, y)  right_click(x, y)  hover(x, y)
drag(x1, y1, x2, y2)  scroll(x, y, dx, dy)  type("text")  key(Enter)  key(ctrl+a)  wait(ms)  done()
x and y are integer pixels of the screenshot, origin at its top-left corner. Put the action inside <action></action>."""
