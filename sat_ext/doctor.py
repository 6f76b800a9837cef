"""``sat-ext doctor``: is SAT usable in this environment? Versions, and registration in fresh processes.

Each check runs in a fresh interpreter (and one in a Ray worker), because registration happens at import
time through verl's plugin loader, which hides failures; the doctor shows the captured plugin error.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from dataclasses import dataclass

PACKAGES = ("sat-ext", "torch", "verl", "openrlhf", "ray", "transformers", "hydra-core")

# Run in a fresh interpreter: import verl with plugin errors made visible, report the registry.
_REGISTRY_PROBE = r"""
import json, logging, io
buf = io.StringIO(); h = logging.StreamHandler(buf); h.setLevel(logging.DEBUG)
lg = logging.getLogger("verl"); lg.addHandler(h); lg.setLevel(logging.DEBUG)
import verl
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
errors = [l for l in buf.getvalue().splitlines() if "Failed to load plugin" in l]
print(json.dumps({"registered": sorted(n for n in ("sat", "sat_gspo") if n in POLICY_LOSS_REGISTRY),
                  "plugin_errors": errors}))
"""

_RAY_PROBE = r"""
import json, ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
@ray.remote
def probe():
    import verl
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    return sorted(n for n in ("sat", "sat_gspo") if n in POLICY_LOSS_REGISTRY)
print(json.dumps({"registered": ray.get(probe.remote())}))
ray.shutdown()
"""


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def _run_probe(code: str, timeout: float) -> tuple[dict | None, str]:
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        return None, (p.stderr.strip().splitlines() or ["no output"])[-1]
    return json.loads(lines[-1]), p.stderr


def run_checks(with_ray: bool = True) -> list[Check]:
    """All doctor checks, in order; each reports ok and a one-line detail."""
    checks = [Check("python", sys.version_info[:2] >= (3, 10), sys.version.split()[0])]
    versions = {p: _version(p) for p in PACKAGES}
    checks += [Check(p, v is not None or p in ("openrlhf", "transformers"), v or "not installed") for p, v in versions.items()]
    if versions["verl"] is None:
        checks.append(Check("verl registration", False, "verl is not installed: pip install 'sat-ext[verl]'"))
        return checks
    ep = [e for e in md.entry_points(group="verl.plugins") if e.value.startswith("sat_ext")]
    checks.append(Check("verl.plugins entry point", bool(ep), ", ".join(f"{e.name} = {e.value}" for e in ep) or
                        "missing: reinstall sat-ext (pip install -e . or pip install sat-ext)"))
    result, err = _run_probe(_REGISTRY_PROBE, timeout=120)
    if result is None:
        checks.append(Check("sat, sat_gspo registered by `import verl` (fresh process)", False, err))
    else:
        ok = result["registered"] == ["sat", "sat_gspo"]
        detail = "yes" if ok else f"registered: {result['registered']}; plugin errors: {result['plugin_errors']}"
        checks.append(Check("sat, sat_gspo registered by `import verl` (fresh process)", ok, detail))
    if with_ray and versions["ray"] is not None:
        result, err = _run_probe(_RAY_PROBE, timeout=180)
        ok = result is not None and result["registered"] == ["sat", "sat_gspo"]
        detail = err if result is None else ("yes" if ok else f"registered: {result['registered']}")
        checks.append(Check("sat, sat_gspo registered in a Ray worker", ok, detail))
    return checks


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="sat-ext doctor", description=__doc__)
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray worker check (it starts a local Ray)")
    args = ap.parse_args(argv)
    checks = run_checks(with_ray=not args.no_ray)
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"[{'ok' if c.ok else 'FAIL':>4}] {c.name:<{width}}  {c.detail}")
    failed = [c for c in checks if not c.ok]
    print("sat-ext doctor: all checks passed" if not failed else f"sat-ext doctor: {len(failed)} check(s) failed")
    return 1 if failed else 0
