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
from dataclasses import dataclass

PYTHON_LANGS = frozenset({"python", "py", "python3", "py3"})

_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\s`]*)[^`]*$")
_THINK_OPEN = re.compile(r"<think(?:ing)?>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think(?:ing)?>", re.IGNORECASE)


def _answer_start(text: str) -> int | None:
    """Offset where the answer begins (after the last ``</think>``); None if it ends inside ``<think>``."""
    closes = list(_THINK_CLOSE.finditer(text))
    # Chat templates often put the opening <think> in the prompt: the answer is after the last close.
    start = closes[-1].end() if closes else 0
    if _THINK_OPEN.search(text, start):
        return None
    return start


def strip_thinking(text: str) -> str | None:
    """The reply without its reasoning; None when the reply ends inside an unclosed ``<think>``."""
    start = _answer_start(text)
    return None if start is None else text[start:]


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block: its language, its code, and where its body lies in the text it came from."""

    lang: str
    """Language word, lower-cased ("" if none)."""
    code: str
    """The body, with the fence's indentation removed."""
    start: int
    """Offset of the body's first character in the text (just after the opening fence line)."""
    end: int
    """Offset just past the body's last character (before the closing fence line)."""


def _lines(text: str) -> list[tuple[int, str, int]]:
    """``(start, line without its break, end of the line including its break)`` for each line."""
    out = []
    for m in re.finditer(r"([^\r\n]*)(\r\n|\r|\n|$)", text):
        if m.start() == len(text) and out and not m.group(0):
            break
        out.append((m.start(), m.group(1), m.end()))
        if m.end() == len(text):
            break
    return out


def code_blocks(text: str, offset: int = 0) -> list[CodeBlock]:
    """Every fenced block of ``text`` in order, with character spans (``offset`` is added to them)."""
    lines = _lines(text)
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i][1])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent").expandtabs(4))
        lang = m.group("info").lower()
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*$")
        body: list[str] = []
        i += 1
        start = lines[i][0] if i < len(lines) else len(text)
        end = start
        while i < len(lines) and not close.match(lines[i][1]):
            body.append(_dedent_line(lines[i][1], indent))
            end = lines[i][0] + len(lines[i][1])
            i += 1
        i += 1  # past the closing fence (or the end of the text)
        blocks.append(CodeBlock(lang, "\n".join(body), offset + start, offset + max(start, end)))
    return blocks


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` for every fenced block of ``text``, in order (language lower-cased, "" if none)."""
    return [(b.lang, b.code) for b in code_blocks(text)]


def _dedent_line(line: str, indent: int) -> str:
    """Remove up to ``indent`` columns of leading whitespace (fences nested in list items)."""
    n = 0
    while n < len(line) and n < indent and line[n] == " ":
        n += 1
    return line[n:]


def locate_code(text: str | None, *, entry_point: str = "Model") -> CodeBlock | None:
    """The block :func:`extract_code` takes, with its span in ``text`` (module doc for the rules).

    ``text[block.start:block.end]`` is the block's body as the model wrote it (the reply's code
    tokens, for TritonRL's hierarchical reasoning/code split); ``block.code`` is that body with
    the fence's indentation removed.
    """
    if not text:
        return None
    start = _answer_start(text)
    if start is None:
        return None
    blocks = [b for b in code_blocks(text[start:], offset=start)
              if b.code.strip() and (b.lang in PYTHON_LANGS or b.lang == "")]
    if not blocks:
        return None
    defines = re.compile(r"^[ \t]*class[ \t]+" + re.escape(entry_point) + r"New\b", re.MULTILINE)
    for want in (lambda b: defines.search(b.code) is not None,
                 lambda b: b.lang in PYTHON_LANGS,
                 lambda b: True):
        chosen = [b for b in blocks if want(b)]
        if chosen:
            return chosen[-1]
    return None  # pragma: no cover - the last rule always matches


def extract_code(text: str | None, *, entry_point: str = "Model") -> str | None:
    """The candidate program in a model reply, or None if it holds no usable code block."""
    block = locate_code(text, entry_point=entry_point)
    return None if block is None else block.code.strip("\n") + "\n"


def kernel_reply(code: str) -> str:
    """A reply carrying ``code`` as :func:`extract_code` takes it back (one fenced python block): the
    wording of every scripted turn (the verl stage's and the local trainer's forced solutions, the
    SFT chain's episodes)."""
    return "Here is my kernel.\n```python\n" + code.strip("\n") + "\n```"


def token_code_mask(token_texts: list[str], span: tuple[int, int] | None) -> list[bool]:
    """Which reply tokens fall in the code span: True for a token whose characters overlap
    ``[start, end)``. ``token_texts`` are the reply's tokens decoded one by one, in order (their
    concatenation is the reply); builds TritonRL's code/reasoning token mask
    (``drkernel.advantages.hierarchical``, ``tok_code_mask``)."""
    mask: list[bool] = []
    pos = 0
    for piece in token_texts:
        end = pos + len(piece)
        mask.append(span is not None and pos < span[1] and end > span[0] and end > pos)
        pos = end
    return mask


__all__ = ["extract_code", "kernel_reply", "locate_code", "token_code_mask", "code_blocks", "CodeBlock", "fenced_blocks", "strip_thinking",
           "PYTHON_LANGS"]
