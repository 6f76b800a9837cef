"""The ``sat-ext`` command: ``sat-ext doctor`` (environment check) and ``sat-ext demo`` (the CPU example)."""

from __future__ import annotations

import sys

USAGE = """usage: sat-ext {doctor,demo} [options]

  doctor   check that verl is found and sat/sat_gspo register in a fresh process and a Ray worker
  demo     asynchronous RL under lag on one CPU: SAT against GRPO/GSPO/DPPO (see `sat-ext demo --help`)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "doctor":
        from sat_ext.doctor import main as run
    elif command == "demo":
        from sat_ext.demo.cli import main as run
    else:
        print(f"sat-ext: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
