"""Coverage per package, from ``coverage json``'s report: statements, branches, line % and
branch % for each of colibri's subpackages (its top-level modules together as ``colibri``) and
the total, as a table on stdout and as JSON in the file given (run by ``coverage.sh``).

    .venv/bin/python bench/coverage_table.py files.json out.json
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FIELDS = ("num_statements", "covered_lines", "num_branches", "covered_branches")


def package_of(path: str) -> str:
    """``src/colibri/daemon/app.py`` → ``colibri/daemon``; ``src/colibri/client.py`` →
    ``colibri``."""
    parts = Path(path).parts
    at = parts.index("colibri")
    return "/".join(parts[at : at + 2]) if len(parts) > at + 2 else "colibri"


def percent(part: int, whole: int) -> float:
    return round(100.0 * part / whole, 1) if whole else 100.0


def row(counts: dict[str, int]) -> dict[str, Any]:
    return {
        "statements": counts["num_statements"],
        "lines_covered": counts["covered_lines"],
        "branches": counts["num_branches"],
        "branches_covered": counts["covered_branches"],
        "line_percent": percent(counts["covered_lines"], counts["num_statements"]),
        "branch_percent": percent(counts["covered_branches"], counts["num_branches"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the output of `coverage json`")
    parser.add_argument("out", type=Path, help="where to write the table as JSON")
    args = parser.parse_args()

    report = json.loads(args.report.read_text())
    packages: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FIELDS, 0))
    total = dict.fromkeys(FIELDS, 0)
    for path, data in report["files"].items():
        for field in FIELDS:
            packages[package_of(path)][field] += data["summary"][field]
            total[field] += data["summary"][field]
    table = {name: row(packages[name]) for name in sorted(packages)}
    result = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "coverage_version": report["meta"]["version"],
        "packages": table,
        "total": row(total),
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"| package | statements | branches | line % | branch % |\n|{' --- |' * 5}")
    for name, r in [*table.items(), ("**total**", result["total"])]:
        print(
            f"| {name} | {r['statements']:,} | {r['branches']:,} "
            f"| {r['line_percent']:.1f} | {r['branch_percent']:.1f} |"
        )


if __name__ == "__main__":
    main()
