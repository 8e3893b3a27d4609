"""The agent's exported SFT records (JSONL) -> the parquet verl's multi-turn SFT dataset reads.

``drkernel.agent.sft.export_sft`` writes one ``{"messages": [...], "task", "turn", "reward", ...}``
object per line. verl 0.9.1's ``MultiTurnSFTDataset`` reads parquet with a ``messages`` column of
``{role, content}`` lists (``data.messages_key``). This keeps ``messages`` (role and content only)
and the task name, and checks every dialogue ends on an assistant reply (the trained target)::

    python -m drkernel.verl.sft_data runs/sft.jsonl data/sft.parquet
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["read_records", "jsonl_to_parquet", "main"]


def read_records(path: str | Path) -> list[dict]:
    """SFT rows of a JSONL export: ``{"messages": [{role, content}, ...], "task": str}``."""
    rows = []
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        rec = json.loads(line)
        messages = [{"role": str(m["role"]), "content": str(m.get("content") or "")} for m in rec["messages"]]
        if not messages or messages[-1]["role"] != "assistant":
            raise ValueError(f"{path}:{lineno}: a record must end with an assistant message")
        rows.append({"messages": messages, "task": str(rec.get("task", ""))})
    return rows


def jsonl_to_parquet(src: str | Path, dst: str | Path) -> int:
    """Convert; returns the number of rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = read_records(src)
    if not rows:
        raise ValueError(f"{src}: no SFT records")
    schema = pa.schema([("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
                        ("task", pa.string())])
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), dst)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m drkernel.verl.sft_data IN.jsonl OUT.parquet", file=sys.stderr)
        return 2
    n = jsonl_to_parquet(args[0], args[1])
    print(f"wrote {n} SFT rows to {args[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
