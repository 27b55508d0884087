"""Claude Code's one-shot result: the output and cost of ``claude -p --output-format json``."""

from __future__ import annotations

import json
import logging
from typing import Any

import msgspec

from colibri.core.protocol import ReportedCost

log = logging.getLogger(__name__)


def claude_result(stdout: str) -> tuple[str, dict[str, Any] | None]:
    """Output and cost of a one-shot agent that ends with a JSON result object.

    Claude Code's ``-p --output-format json`` prints one object with ``result``,
    ``total_cost_usd`` and ``usage.input_tokens``/``output_tokens``: its ``result`` becomes the
    output and the rest the session's cost. Anything else is returned as it is, without cost.
    """
    text = stdout.strip()
    if not text.endswith("}"):
        return stdout, None
    start = text.rfind("\n{") + 1  # the last line that opens an object, or the whole output
    try:
        doc = json.loads(text[start:])
    except ValueError:
        try:
            doc = json.loads(text)
        except ValueError:
            return stdout, None
    if not isinstance(doc, dict) or ("total_cost_usd" not in doc and "usage" not in doc):
        return stdout, None
    usage: dict[str, Any] = doc["usage"] if isinstance(doc.get("usage"), dict) else {}
    cost: dict[str, Any] = {}
    for key, value in (
        ("usd", doc.get("total_cost_usd")),
        ("tokens_in", usage.get("input_tokens")),
        ("tokens_out", usage.get("output_tokens")),
        ("model", doc.get("model")),
    ):
        if value is None:
            continue
        try:  # what the daemon would take: a session's numbers must not get its report refused
            msgspec.convert({key: value}, ReportedCost)
        except msgspec.ValidationError as exc:
            log.warning("cost %s=%r left out: %s", key, value, exc, extra={"event": "bad_cost"})
            continue
        cost[key] = value
    output = doc["result"] if isinstance(doc.get("result"), str) else stdout
    return output, cost or None
