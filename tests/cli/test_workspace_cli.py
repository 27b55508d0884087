"""`colibri workspace list|show|add`: add edits colibri.jsonc and keeps its comments."""

from __future__ import annotations

import json
from pathlib import Path

import json5

from tests.helpers import colibri


def test_add_keeps_comments_and_list_and_show_see_it(root: Path) -> None:
    (root / "colibri.jsonc").write_text(
        '{\n  // how often the safety net runs\n  "scheduler": { "tick": "30s" },\n'
        '  "templates": { "oneshot": { "session": { "command": ["claude", "-p"] } } },'
        "\n}\n"
    )
    web = colibri(root, "workspace", "add", "web", "--cap", "typescript", "--extends", "oneshot")
    assert web.returncode == 0, web.stderr
    api = colibri(root, "workspace", "add", "api", "--cap", "python", "--send-to", "web",
                  "--slots", "2", "--", "python3", "-c", "print(1)")  # fmt: skip
    assert api.returncode == 0, api.stderr
    text = (root / "colibri.jsonc").read_text()
    assert "// how often the safety net runs" in text
    parsed = json5.loads(text)
    assert parsed["workspaces"]["api"] == {
        "slots": 2, "capabilities": ["python"], "send_to": ["web"],
        "session": {"command": ["python3", "-c", "print(1)"]},
    }  # fmt: skip
    listed = json.loads(colibri(root, "workspace", "list", "--json").stdout)
    assert [w["name"] for w in listed] == ["web", "api"]
    shown = json.loads(colibri(root, "workspace", "show", "web", "--json").stdout)
    assert shown["command"] == ["claude", "-p"] and shown["capabilities"] == ["typescript"]
    assert shown["path"] == str((root / "web").resolve())


def test_a_bad_or_duplicate_workspace_leaves_the_file_unchanged(root: Path) -> None:
    before = (root / "colibri.jsonc").read_text()
    bad = colibri(root, "workspace", "add", "api", "--send-to", "nowhere", "--", "x")
    assert bad.returncode == 1
    assert "nowhere" in bad.stderr and "unchanged" in bad.stderr
    assert (root / "colibri.jsonc").read_text() == before
    assert colibri(root, "workspace", "add", "api", "--", "x").returncode == 0
    after = (root / "colibri.jsonc").read_text()
    again = colibri(root, "workspace", "add", "api", "--", "y")
    assert again.returncode == 1 and "exists" in again.stderr
    assert (root / "colibri.jsonc").read_text() == after
    missing = colibri(root, "workspace", "show", "nope")
    assert missing.returncode == 1 and "no workspace" in missing.stderr
