"""Code extraction from a model reply: the last fenced python block, or None.

The paper's extractor (drkernel-reference.md §5.1, §9.26) tried marker regexes first (which can
swallow trailing prose), then the last fenced block of any language, then the **whole reply**
(which turns a code-less answer into a guaranteed compile error and grades prose), and it searched
the thinking text too. This one:

1. drops thinking: everything up to the last ``</think>``; a reply whose ``<think>`` is never closed
   is all thinking (it was cut off while reasoning) and yields None;
2. parses fences line by line as Markdown does: an opening line of 3+ backticks (or tildes) with an
   optional language word, closed by a line holding only the same character, at least as many
   times. Inline triple backticks inside prose never open a block; an inner ```` ``` ```` inside a
   ```` ```` ```` block does not close it; an unclosed last block runs to the end of the text;
3. keeps blocks labelled ``python`` / ``py`` / ``python3`` or unlabelled (``bash``, ``text``, ``cpp``
   blocks are never code to grade), and skips empty ones;
4. returns the last kept block that defines ``class <entry_point>New``; if none does, the last
   python-labelled block, else the last unlabelled one; no block gives None (never the whole text).

Rule 4 handles the common "full program, then a short usage example" reply, where a purely
"last block" rule would grade the example.
"""

from __future__ import annotations

import re

PYTHON_LANGS = frozenset({"python", "py", "python3", "py3"})

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


def strip_thinking(text: str) -> str | None:
    """The reply without its reasoning; None when the reply ends inside an unclosed ``<think>``."""
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        # Chat templates often put the opening <think> in the prompt: the answer is after the last close.
        text = text[closes[-1].end():]
    if _THINK_OPEN.search(text):
        return None
    return text


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` for every fenced block of ``text``, in order (language lower-cased, "" if none)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent").expandtabs(4))
        lang = m.group("info").lower()
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            body.append(_dedent_line(lines[i], indent))
            i += 1
        i += 1  # past the closing fence (or the end of the text)
        blocks.append((lang, "\n".join(body)))
    return blocks


def _dedent_line(line: str, indent: int) -> str:
    """Remove up to ``indent`` columns of leading whitespace (fences nested in list items)."""
    n = 0
    while n < len(line) and n < indent and line[n] == " ":
        n += 1
    return line[n:]


def extract_code(text: str | None, *, entry_point: str = "Model") -> str | None:
    """The candidate program in a model reply, or None if it holds no usable code block."""
    if not text:
        return None
    answer = strip_thinking(text)
    if answer is None:
        return None
    blocks = [(lang, code.strip("\n")) for lang, code in fenced_blocks(answer)]
    blocks = [(lang, code) for lang, code in blocks if code.strip() and (lang in PYTHON_LANGS or lang == "")]
    if not blocks:
        return None
    defines = re.compile(r"^[ \t]*class[ \t]+" + re.escape(entry_point) + r"New\b", re.MULTILINE)
    for want in (lambda lang, code: defines.search(code) is not None,
                 lambda lang, code: lang in PYTHON_LANGS,
                 lambda lang, code: True):
        chosen = [code for lang, code in blocks if want(lang, code)]
        if chosen:
            return chosen[-1] + "\n"
    return None  # pragma: no cover - the last rule always matches


__all__ = ["extract_code", "fenced_blocks", "strip_thinking", "PYTHON_LANGS"]
