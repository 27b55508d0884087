"""Reading colibri.jsonc at its limits: a 1 MiB file of workspaces, the same file with a mistake
in its last workspace, a file past the limit, and nesting far past the cap.

Each case is run ``--runs`` times per repetition on a temporary root; the median wall time of
``load_config`` is reported (the last three are refusals, each one line). The file is the test
suite's (tests/test_config.py: ``realistic``): the template, then 3,000-odd workspaces written
in the JSON5 the docs use.

    .venv/bin/python bench/config_load.py --runs 5 --repeat 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _support import emit, median, note

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_config import realistic

from colibri.config import MAX_CONFIG_BYTES, load_config
from colibri.core.errors import ConfigError
from colibri.layout import CONFIG_NAME


def timed_ms(root: Path, text: str, refused: bool) -> float:
    (root / CONFIG_NAME).write_text(text)
    start = time.perf_counter()
    try:
        load_config(root)
    except ConfigError:
        if not refused:
            raise
    else:
        if refused:
            raise SystemExit("a file that must be refused was read")
    return (time.perf_counter() - start) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="loads of each case per repetition")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    whole = realistic(MAX_CONFIG_BYTES)
    last = whole.rfind('"slots": 2')
    cases = {
        "read_1mib": (whole, False),
        "mistake_at_end": (whole[:last] + '"slots": 0' + whole[last + 10 :], True),
        "over_limit": (whole + " ", True),
        "nested_100k": ("[" * 100_000, True),
    }
    medians: dict[str, list[float]] = {name: [] for name in cases}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / ".colibri").mkdir(mode=0o700)
        for rep in range(args.repeat):
            for name, (text, refused) in cases.items():
                medians[name].append(median([timed_ms(root, text, refused)
                                             for _ in range(args.runs)]))  # fmt: skip
            note(f"  repetition {rep + 1}: " + ", ".join(
                f"{n} {v[-1]:.0f} ms" for n, v in medians.items()))  # fmt: skip
    emit({f"{name}_ms": median(values) for name, values in medians.items()}
         | {"bytes": len(whole.encode()), "runs": args.runs, "repeat": args.repeat})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
