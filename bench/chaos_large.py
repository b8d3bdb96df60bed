"""The large chaos run (RELIABILITY R1/R2): one command, figures printed at the end.

Default: 2,000 runs started over ~50 s on a throwaway PostgreSQL cluster of its own
(initdb into a temp dir; never the shared server), 4 worker processes x concurrency
16 with a 2 s lease, a random worker SIGKILLed every U(1, 3) s for 60 s and
restarted after 0.5 s, and one crash-restart of PostgreSQL (``pg_ctl -m immediate``)
mid-run. Then the oracle of ``tests/chaos/harness.py`` (every run completed, one
journal row per step, every side effect recorded, no stuck run, no worker
crash-loop). Exit code 1 on any violation; the seed is printed (``--seed`` replays).

Usage::

    python bench/chaos_large.py                       # the configuration above
    python bench/chaos_large.py --runs 500 --kill-for 30
    python bench/chaos_large.py --backend sqlite --pg-restarts 0 --workers 4
    python bench/chaos_large.py --seed 1234           # replay a seed

Any option of ``python -m tests.chaos.harness --help`` may be given; these are
only the defaults.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.chaos.harness import main

LARGE = [
    "--backend", "postgres-throwaway",
    "--runs", "2000",
    "--start-rate", "40",
    "--workers", "4",
    "--concurrency", "16",
    "--lease", "2",
    "--kill-min", "1", "--kill-max", "3",
    "--kill-for", "60",
    "--pg-restarts", "1",
    "--pg-every-min", "20", "--pg-every-max", "40",
    "--pg-down-max", "3",
    "--work", "0.05",
    "--nap", "500ms",
    "--deadline", "900",
]  # fmt: skip


def _merged(args: list[str]) -> list[str]:
    """The defaults above, each overridden by the same option given on the command line."""
    given = {a for a in args if a.startswith("--")}
    merged: list[str] = []
    i = 0
    while i < len(LARGE):
        option = LARGE[i]
        values = []
        i += 1
        while i < len(LARGE) and not LARGE[i].startswith("--"):
            values.append(LARGE[i])
            i += 1
        if option not in given:
            merged += [option, *values]
    return merged + args


if __name__ == "__main__":
    argv = _merged(sys.argv[1:])
    backend = argv[argv.index("--backend") + 1]
    if backend != "postgres-throwaway" and "--pg-restarts" not in sys.argv:
        argv[argv.index("--pg-restarts") + 1] = "0"  # restarts need a cluster of our own
    sys.exit(main(argv))
