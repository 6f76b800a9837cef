"""``sat-ext doctor``: can this environment (and every node of its Ray cluster) run sat_ext?

Checks, each with what to install or set when it fails: Python; the exact verl (and, if installed, OpenRLHF)
versions sat_ext is tested with; TransferQueue; in a fresh interpreter, that ``import verl`` registers
``sat`` / ``sat_gspo`` (showing the plugin error verl hides), that the SAT ``_target_`` converts through
verl's own config code, that verl's V1 stack with sat_ext's lag sampler and trainer mode imports, and that
the shipped example configs compose; then one task pinned to every alive Ray node (the running cluster when
``RAY_ADDRESS`` is set or a local one is found, else a local Ray started for the check; ``RAY_ADDRESS=local``
always starts a private one, as Ray's own ``ray.init(address="local")`` does); with
``--training-node``, CUDA, Megatron-core, mbridge and SGLang. Exit status 1 if any check failed; ``--json``
prints the checks as JSON.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import json
import os
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass

from sat_ext.pinned import LOSS_NAMES, OPENRLHF, TRANSFER_QUEUE, VERL

INSTALL_VERL = "pip install 'sat-ext[verl-async]' (from a clone: pip install -e '.[verl-async]'; see the README)"


@dataclass
class Check:
    """One line of the report: ``status`` is ok, FAIL or skip; ``fix`` says what to install or set."""

    name: str
    status: str
    detail: str
    fix: str = ""


def _version(pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def _exact(name: str, pkg: str, wanted: str, fix: str, optional_fix: str = "") -> Check:
    """``pkg`` installed at exactly ``wanted``; absent is a skip when ``optional_fix`` says what it is for."""
    got = _version(pkg)
    if got is None:
        if optional_fix:
            return Check(name, "skip", "not installed", optional_fix)
        return Check(name, "FAIL", "not installed", fix)
    if got != wanted:
        return Check(name, "FAIL", f"{got}, sat_ext is tested with {wanted} only", fix)
    return Check(name, "ok", got)


def _run_json(args: list[str], timeout: float, env: dict | None = None) -> tuple[dict | None, str]:
    """Run ``python args`` in a fresh interpreter: its last JSON line and its stderr (None on failure)."""
    try:
        p = subprocess.run(
            [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s"
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if p.returncode != 0 or not lines:
        return None, p.stderr.strip() or "no output"
    return json.loads(lines[-1]), p.stderr


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or ["no output"])[-1]


def _probe_check(name: str, result: dict, fix: str) -> Check:
    return Check(name, "ok" if result["ok"] else "FAIL", str(result["detail"]), "" if result["ok"] else fix)


def package_checks() -> list[Check]:
    """Python, the pinned frameworks, TransferQueue and the entry point."""
    checks = [
        Check("python", "ok" if sys.version_info[:2] >= (3, 10) else "FAIL", sys.version.split()[0], "Python 3.10-3.12")
    ]
    checks.append(
        Check(
            "sat-ext",
            "ok" if _version("sat-ext") else "FAIL",
            _version("sat-ext") or "not installed",
            "pip install -e . in the clone (or the built wheel) in this environment",
        )
    )
    checks.append(
        Check(
            "torch",
            "ok" if _version("torch") else "FAIL",
            _version("torch") or "not installed",
            "pip install torch (CPU: pip install torch --index-url https://download.pytorch.org/whl/cpu)",
        )
    )
    checks.append(_exact("verl", "verl", VERL, INSTALL_VERL))
    checks.append(
        Check(
            "ray",
            "ok" if _version("ray") else "FAIL",
            _version("ray") or "not installed",
            "verl depends on Ray: " + INSTALL_VERL,
        )
    )
    tq = _version("TransferQueue")
    tq_ok = importlib.util.find_spec("transfer_queue") is not None and tq == TRANSFER_QUEUE
    checks.append(
        Check(
            "TransferQueue (verl's V1 async trainers, sat_ext's lag modes)",
            "ok" if tq_ok else "FAIL",
            tq or "not installed",
            "" if tq_ok else INSTALL_VERL,
        )
    )
    checks.append(
        _exact(
            "openrlhf",
            "openrlhf",
            OPENRLHF,
            f"pip install --no-deps openrlhf=={OPENRLHF} (docs/openrlhf.md)",
            optional_fix=f"needed only for the OpenRLHF path: pip install openrlhf=={OPENRLHF} (docs/openrlhf.md)",
        )
    )
    ep = [e for e in md.entry_points(group="verl.plugins") if e.value.startswith("sat_ext")]
    checks.append(
        Check(
            "verl.plugins entry point",
            "ok" if ep else "FAIL",
            ", ".join(f"{e.name} = {e.value}" for e in ep) or "missing",
            "" if ep else "reinstall sat-ext in this environment (pip install -e . or the wheel)",
        )
    )
    return checks


def fresh_process_checks() -> list[Check]:
    """The in-process probes of :mod:`sat_ext.doctor_probes`, in a fresh interpreter."""
    report, err = _run_json(["-m", "sat_ext.doctor_probes"], timeout=300)
    if report is None:
        return [
            Check("fresh-process probes", "FAIL", _last_line(err), "run `python -m sat_ext.doctor_probes` to see why")
        ]
    if not report["import_verl"]["ok"]:
        return [_probe_check("import verl", report["import_verl"], INSTALL_VERL)]
    reg = report["registered"]
    ok = reg["ok"] and reg["detail"] == list(LOSS_NAMES)
    detail = "yes" if ok else f"registered: {reg['detail']}; plugin errors: {report['plugin_errors']}"
    fix = (
        "verl's plugin loading is off or failed: unset VERL_USE_EXTERNAL_PLUGINS, or set "
        "VERL_USE_EXTERNAL_MODULES=sat_ext.verl.plugin to see the error"
    )
    return [
        Check(
            "sat, sat_gspo registered by `import verl` (fresh process)",
            "ok" if ok else "FAIL",
            detail,
            "" if ok else fix,
        ),
        _probe_check(
            "SAT _target_ through verl's config conversion",
            report["target_conversion"],
            "reinstall sat-ext next to verl " + VERL,
        ),
        _probe_check("verl V1 + TransferQueue + sat_ext lag sampler/trainer", report["lag_stack"], INSTALL_VERL),
        _probe_check(
            "shipped example configs compose",
            report["example_configs"],
            "reinstall sat-ext (the wheel or pip install -e .): the configs ship as sat_ext.examples",
        ),
        *(
            _private_check(framework, report[f"{framework}_private"])
            for framework in ("verl", "openrlhf")
            if f"{framework}_private" in report
        ),
    ]


def _private_check(framework: str, result: dict) -> Check:
    """The private upstream members listed in sat_ext/<framework>/_upstream.py: present in the installed version?"""
    name = f"{framework} private members (sat_ext/{framework}/_upstream.py)"
    if not result["ok"]:
        fix = f"install the pinned {framework} (pip install -e '.[{framework}]')"
        return Check(name, "FAIL", str(result["detail"]), fix)
    names = result["detail"]["names"]
    listed = f"{len(names)}: " + ", ".join(n.rsplit(".", 1)[-1] for n in names)
    if not result["detail"]["checked"]:
        return Check(name, "skip", f"listed, not checked here ({result['detail']['why']}); {listed}")
    return Check(name, "ok", listed)


_RAY_SCRIPT = r"""
import json, os, ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from sat_ext.doctor_probes import node_report
address = os.environ.get("SAT_EXT_DOCTOR_RAY_ADDRESS")
if address:
    ray.init(address=address, log_to_driver=False)
else:  # "local": a new instance even if a stale /tmp/ray/ray_current_cluster names a dead one
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
nodes = [n for n in ray.nodes() if n["Alive"]]
task = ray.remote(num_cpus=0)(node_report)
refs = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in nodes]
out = []
for n, ref in zip(nodes, refs):
    try:
        out.append({"node": n["NodeManagerAddress"], "report": ray.get(ref, timeout=240)})
    except Exception as e:
        out.append({"node": n["NodeManagerAddress"], "error": f"{type(e).__name__}: {e}".splitlines()[0]})
print(json.dumps({"cluster": bool(address), "nodes": out}))
ray.shutdown()
"""


def _cluster_address() -> str | None:
    """``RAY_ADDRESS``, else "auto" when a Ray cluster runs on this machine, else None (start a local one; also
    for ``RAY_ADDRESS=local``)."""
    if os.environ.get("RAY_ADDRESS") == "local":
        return None
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    try:
        from ray._private.services import find_gcs_addresses
    except ImportError:
        return None
    return "auto" if find_gcs_addresses() else None


def _unreachable(address: str) -> str | None:
    """Why nothing answers at a ``host:port`` address (None if it does, or for "auto" / "ray://")."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "://" in address:
        return None
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as e:
        return f"nothing answers at {address} ({e.strerror or e})"
    return None


def ray_checks() -> list[Check]:
    """One task pinned to every alive node: sat_ext importable, versions, the losses registered there."""
    address = _cluster_address()
    where = f"cluster at {address}" if address else "a local Ray started for this check"
    down = _unreachable(address) if address else None
    if down:  # ray.init would retry for minutes
        return [Check(f"Ray ({where})", "FAIL", down, "check RAY_ADDRESS and that this node can reach the cluster")]
    result, err = _run_json(
        ["-c", _RAY_SCRIPT], timeout=420, env={"SAT_EXT_DOCTOR_RAY_ADDRESS": address or "", "RAY_ADDRESS": ""}
    )
    if result is None:
        fix = "check RAY_ADDRESS and that this node can reach the cluster" if address else "see the error"
        if "InvalidAuthToken" in err:
            fix = (
                "the cluster uses Ray token authentication: set RAY_AUTH_MODE=token and the cluster's token "
                "(RAY_AUTH_TOKEN or ~/.ray/auth_token) here, as on the head node"
            )
        return [Check(f"Ray ({where})", "FAIL", _last_line(err), fix)]
    checks = [Check(f"Ray ({where})", "ok", f"{len(result['nodes'])} alive node(s)")]
    for node in result["nodes"]:
        name = f"node {node['node']}"
        if "error" in node:
            checks.append(Check(name, "FAIL", node["error"], "install sat-ext (and verl) in that node's environment"))
            continue
        r = node["report"]
        problems = []
        if r["verl"] != VERL:
            problems.append(f"verl {r['verl']} (need {VERL})")
        if r["sat-ext"] != _version("sat-ext"):
            problems.append(f"sat-ext {r['sat-ext']} (driver has {_version('sat-ext')})")
        if not r["transfer_queue"]:
            problems.append("no TransferQueue")
        if not r["registered"]["ok"] or r["registered"]["detail"] != list(LOSS_NAMES):
            problems.append(f"registered: {r['registered']['detail']}")
        detail = f"{r['host']}: " + ("; ".join(problems) if problems else f"sat, sat_gspo registered, verl {r['verl']}")
        checks.append(
            Check(name, "FAIL" if problems else "ok", detail, f"on {r['host']}: {INSTALL_VERL}" if problems else "")
        )
    return checks


def training_node_checks() -> list[Check]:
    """CUDA, Megatron-core, mbridge and SGLang, as the 30B examples need them on a training node."""
    report, err = _run_json(["-m", "sat_ext.doctor_probes", "--training-node"], timeout=300)
    if report is None:
        return [Check("training-node probes", "FAIL", _last_line(err), "")]
    fix = f"pip install 'verl[megatron,sglang]=={VERL}' on a CUDA machine"
    return [
        _probe_check(name, report[key], fix)
        for name, key in [
            ("CUDA", "cuda"),
            ("megatron-core", "megatron-core"),
            ("mbridge", "mbridge"),
            ("sglang", "sglang"),
        ]
    ]


def run_checks(with_ray: bool = True, training_node: bool = False) -> list[Check]:
    """All doctor checks, in order."""
    checks = package_checks()
    if _version("verl") is None:
        return checks
    checks += fresh_process_checks()
    if with_ray and _version("ray") is not None:
        checks += ray_checks()
    if training_node:
        checks += training_node_checks()
    return checks


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(
        prog="sat-ext doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--no-ray", action="store_true", help="skip the Ray node checks")
    ap.add_argument(
        "--training-node",
        action="store_true",
        help="also check the GPU training stack (CUDA, megatron-core, mbridge, sglang)",
    )
    ap.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    args = ap.parse_args(argv)
    checks = run_checks(with_ray=not args.no_ray, training_node=args.training_node)
    failed = [c for c in checks if c.status == "FAIL"]
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=1))
        return 1 if failed else 0
    width = max(len(c.name) for c in checks)
    for c in checks:
        print(f"[{c.status:>4}] {c.name:<{width}}  {c.detail}")
        if c.fix and c.status != "ok":
            print(f"{'':>7}{'':<{width}}  -> {c.fix}")
    print("sat-ext doctor: all checks passed" if not failed else f"sat-ext doctor: {len(failed)} check(s) failed")
    return 1 if failed else 0
