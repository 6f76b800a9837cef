"""The example folders that ship with sat_ext (``sat_ext.examples`` in the wheel, ``examples/`` in a checkout).

An example is a folder with a ``run.sh``. Its variants are the top-level ``config/*.yaml`` files that no other
top-level file names in its ``defaults`` list (those are the shared bases); each variant is one Hydra
``--config-name``. ``sat-ext example`` lists them, prints a config dir, or writes a folder out with the data
script beside it, so a pip-installed user can run them without the git checkout.
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import stat
import sys
from pathlib import Path

DATA_FOLDER = "data"
PACKAGE = "sat_ext.examples"
# Hydra 1.3's options that take a value (``--info`` takes one of its choices, or none); tests check these against
# Hydra's own parser.
HYDRA_VALUE_OPTIONS = frozenset(
    {
        "--cfg",
        "-c",
        "--package",
        "-p",
        "--config-path",
        "-cp",
        "--config-name",
        "-cn",
        "--config-dir",
        "-cd",
        "--experimental-rerun",
    }
)
HYDRA_INFO_OPTIONS = frozenset({"--info", "-i"})
HYDRA_INFO_CHOICES = frozenset({"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"})


class ExampleError(ValueError):
    """A bad example name or destination, with the value and where it came from."""


def examples_root() -> Path:
    """``examples/`` of the source checkout this sat_ext was imported from, else the installed ``sat_ext.examples``."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "examples" / "__init__.py").is_file():
        return checkout / "examples"
    return Path(importlib.import_module(PACKAGE).__file__).resolve().parent


def example_names(root: Path | None = None) -> list[str]:
    """Folders under the examples root that have a ``run.sh``."""
    root = root or examples_root()
    return sorted(p.name for p in root.iterdir() if (p / "run.sh").is_file())


def example_dir(name: str, root: Path | None = None) -> Path:
    """The folder of example ``name``; an unknown name is an error listing the known ones."""
    root = root or examples_root()
    names = example_names(root)
    if name not in names:
        raise ExampleError(f"unknown example {name!r} (in {root}); known: {', '.join(names)}")
    return root / name


def _defaults_names(path: Path) -> set[str]:
    """The plain (non-group) entries of a config file's ``defaults`` list, e.g. its base config."""
    import yaml

    raw = yaml.safe_load(path.read_text()) or {}
    return {d for d in raw.get("defaults", []) if isinstance(d, str) and d != "_self_"}


def variants(name: str, root: Path | None = None) -> list[str]:
    """Config names of example ``name`` that are runs, not bases (empty when it has no ``config/``)."""
    config = example_dir(name, root) / "config"
    files = sorted(config.glob("*.yaml")) if config.is_dir() else []
    bases = set().union(*(_defaults_names(f) for f in files)) if files else set()
    return [f.stem for f in files if f.stem not in bases]


def _load_yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _merged(path: Path, config: Path) -> dict:
    """The keys an example's own YAML files set for config file ``path``, merged in its defaults order (a plain
    entry is a file beside it, ``group: option`` is ``config/group/option.yaml``, ``_self_`` the file itself;
    entries that are not the example's, such as verl's ``ppo_trainer``, are skipped)."""
    raw = _load_yaml(path)
    own = {k: v for k, v in raw.items() if k not in ("defaults", "hydra")}
    merged: dict = {}
    entries = raw.get("defaults", []) or ["_self_"]
    for entry in entries if "_self_" in entries else [*entries, "_self_"]:
        if entry == "_self_":
            _deep_update(merged, own)
            continue
        group, option = next(iter(entry.items())) if isinstance(entry, dict) else (None, entry)
        part = config / group / f"{option}.yaml" if group else config / f"{option}.yaml"
        if part.is_file():
            _deep_update(merged, _merged(part, config))
    return merged


def _deep_update(into: dict, new: dict) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_update(into[key], value)
        else:
            into[key] = value


def variant_setting(name: str, variant: str, key: str, root: Path | None = None):
    """The value of dotted ``key`` that example ``name``'s ``variant`` sets in its own YAML files (base, group
    files, the variant; Hydra's order), or None where only verl's defaults would set it. Needs no verl: what
    ``sat-ext check-run`` compares a run's log with (tests check it against Hydra's composition)."""
    config = config_dir(name, root)
    if variant not in variants(name, root):
        raise ExampleError(f"example {name!r} has no variant {variant!r} (known: {', '.join(variants(name, root))})")
    node = _merged(config / f"{variant}.yaml", config)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def example_for_project(project: str, root: Path | None = None) -> str | None:
    """The example whose runs log under verl project name ``project`` (``trainer.project_name``), if any."""
    for name in example_names(root):
        found = variants(name, root)
        if found and variant_setting(name, found[0], "trainer.project_name", root) == project:
            return name
    return None


def config_dir(name: str, root: Path | None = None) -> Path:
    """The Hydra ``--config-path`` of example ``name``."""
    config = example_dir(name, root) / "config"
    if not config.is_dir():
        raise ExampleError(f"example {name!r} has no config/ folder (see its run.sh)")
    return config


def hydra_argv(args: list[str]) -> list[str]:
    """``args`` of a Hydra app with every override first and every option (with its value) after them.

    Hydra's parser takes the overrides as one positional run, so ``a=1 --cfg job b=2`` fails with "unrecognized
    arguments"; the examples' ``run.sh`` passes its arguments through this, so overrides and options can come in
    any order. The order within the overrides and within the options is kept (the last override of a key wins).
    """
    overrides: list[str] = []
    options: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            overrides.append(arg)
            continue
        options.append(arg)
        info_value = arg in HYDRA_INFO_OPTIONS and rest and rest[0] in HYDRA_INFO_CHOICES
        if (arg in HYDRA_VALUE_OPTIONS or info_value) and rest:
            options.append(rest.pop(0))
    return overrides + options


def _copy(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "__init__.py"))


def write(name: str, dest: Path, root: Path | None = None) -> Path:
    """Copy example ``name`` to ``dest`` (which must be absent or empty), the data script to ``dest/data``.

    ``run.sh`` finds ``config/`` beside itself, so ``bash dest/run.sh VARIANT`` runs from anywhere.
    """
    src = example_dir(name, root)
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise ExampleError(f"destination {str(dest)!r} exists and is not an empty directory")
    if dest.exists():
        dest.rmdir()
    _copy(src, dest)
    data = src.parent / DATA_FOLDER
    if data.is_dir() and not (dest / DATA_FOLDER).exists():
        _copy(data, dest / DATA_FOLDER)
    for script in dest.rglob("*.sh"):
        script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return dest


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sat-ext example", description="the example configs shipped with sat_ext")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list", help="the examples, or one example's variants (one per line)")
    ls.add_argument("name", nargs="?", help="an example folder, e.g. verl_aime_qwen3_30b")
    path = sub.add_parser("path", help="an example's config dir, for --config-path")
    path.add_argument("name")
    out = sub.add_parser("write", help="write an example folder (config/, run.sh, README, data/ script) to DIR")
    out.add_argument("name")
    out.add_argument("dir", type=Path)
    return p


def main(argv: list[str] | None = None) -> int:
    """``sat-ext example {list [NAME], path NAME, write NAME DIR}``."""
    args = _parser().parse_args(argv)
    try:
        if args.action == "list" and args.name is None:
            for name in example_names():
                found = variants(name)
                print(f"{name}\t{len(found)} variants" if found else f"{name}\t(no config/: see its run.sh)")
        elif args.action == "list":
            print("\n".join(variants(args.name)))
        elif args.action == "path":
            print(config_dir(args.name))
        else:
            dest = write(args.name, args.dir)
            print(f"wrote {dest}: bash {dest / 'run.sh'} --list")
    except ExampleError as err:
        print(f"sat-ext example: {err}", file=sys.stderr)
        return 2
    return 0
