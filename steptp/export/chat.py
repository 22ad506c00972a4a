"""The chat files of a release: the order of their lines and how a line is written. What a line
holds is the chat format, :mod:`steptp.format.chat`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..records import StepRecord


def interleaved(steps: list[StepRecord]) -> list[StepRecord]:
    """The order of a chat file: round robin over kernels (kernels in a fixed hashed order, each
    kernel's steps in their given order), so the first lines a reader or a streaming loader sees
    span the kernels instead of one kernel's whole trajectory."""
    by_kernel: dict[str, list[StepRecord]] = {}
    for s in steps:
        by_kernel.setdefault(s.kernel_id, []).append(s)
    order = sorted(by_kernel, key=lambda k: (hashlib.sha256(k.encode()).hexdigest(), k))
    out: list[StepRecord] = []
    for r in range(max((len(v) for v in by_kernel.values()), default=0)):
        out.extend(by_kernel[k][r] for k in order if r < len(by_kernel[k]))
    return out


def to_line(ex: dict[str, Any]) -> str:
    return json.dumps(ex, ensure_ascii=False, sort_keys=False)
