"""The fenced code blocks of README.md and docs/*.md, for test_readme.py.

A ```sh or ```python block is run as written unless the line before it is a marker
`<!-- readme-test: skip (REASON) -->`, which the reader of the source sees too. An
unlabelled block right after a ```python block (blank lines between at most) is the
standard output that block prints.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import List, Optional

RUNNABLE = ("sh", "python")
_FENCE = re.compile(r"^```(\S*)\s*$")
_SKIP = re.compile(r"^<!-- readme-test: skip \((.+)\) -->$")


@dataclasses.dataclass
class Block:
    language: str  # "" for an unlabelled block
    text: str
    line: int  # 1-based line of the opening fence
    skip_reason: Optional[str] = None
    expected_output: Optional[str] = None
    source: str = "README.md"  # the file, relative to the repository root

    @property
    def id(self) -> str:
        return f"{self.source}:{self.language or 'text'}@line{self.line}"


def parse(path: Path, source: str = "README.md") -> List[Block]:
    lines = path.read_text().splitlines()
    blocks: List[Block] = []
    previous_nonblank = ""
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                previous_nonblank = lines[i].strip()
            i += 1
            continue
        end = i + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{i + 1}: the block opened here is never closed")
        skip = _SKIP.match(previous_nonblank)
        block = Block(fence.group(1), "\n".join(lines[i + 1:end]) + "\n", i + 1,
                      skip.group(1) if skip else None, source=source)
        if (block.language == "" and blocks and blocks[-1].language == "python"
                and previous_nonblank == "```"):
            blocks[-1].expected_output = block.text
        blocks.append(block)
        previous_nonblank = "```"
        i = end + 1
    return blocks
