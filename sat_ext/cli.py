"""The ``sat-ext`` command: ``doctor`` (environment check), ``demo`` (the CPU example), ``example`` (shipped
configs), ``check-run`` (a verl run's log against SAT's and the lag schedule's signals), ``smoke`` (verl's or
OpenRLHF's own training loop with SAT and the lag modes, a few steps, checked), ``preflight`` (a user's config or
a shipped example through that loop, with only what the machine cannot run substituted)."""

from __future__ import annotations

import sys

USAGE = """usage: sat-ext {doctor,demo,example,check-run,smoke,preflight} [options]

  doctor   check that verl is found and sat/sat_gspo register in a fresh process and a Ray worker
  demo       the paper's experiment in miniature on one CPU, on a real vLLM engine (`sat-ext demo --help`)
  example    the shipped example configs: `list [NAME]`, `path NAME`, `write NAME DIR` (run without a checkout)
  check-run  check a verl run's log: SAT active, gate rate, d_pi, finite losses, the lag schedule
  smoke      run verl's or OpenRLHF's own training loop with SAT and every lag mode for a few steps and check
             it (`sat-ext smoke verl|openrlhf --help`; on the CPU here, on the GPU where CUDA is available)
  preflight  run a config you will run (yours, or a shipped example's variant) through verl's or OpenRLHF's own
             loop here, only the machine substituted, and check it (`sat-ext preflight verl|openrlhf --help`)
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
    elif command == "example":
        from sat_ext.example_configs import main as run
    elif command == "check-run":
        from sat_ext.check_run import main as run
    elif command == "smoke":
        from sat_ext.smoke.cli import main as run
    elif command == "preflight":
        from sat_ext.preflight.cli import main as run
    else:
        print(f"sat-ext: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
