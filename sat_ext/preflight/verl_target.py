"""What ``sat-ext preflight verl TARGET [overrides ...]`` runs: the config, composed as the user's launcher would.

TARGET is one of:

- a shipped example variant, ``EXAMPLE/VARIANT`` (``verl_aime_qwen3_30b/sat_gspo_r3_lag8``), composed as the
  example's ``run.sh`` composes it (``--config-path <example>/config --config-name VARIANT``, with run.sh's own
  overrides); ``EXAMPLE`` alone stands for each of its variants;
- a user's Hydra config file (one with a ``defaults`` list: ``path/to/my_run.yaml``), composed as ``python -m
  sat_ext.verl.main_ppo --config-path path/to --config-name my_run`` would (a config that builds on verl's
  ``ppo_trainer`` declares ``hydra.searchpath: [pkg://verl.trainer.config]``, as the examples do);
- a composed config (verl's ``--cfg job`` output: a YAML file without ``defaults``), taken as it is.

The overrides are Hydra's: an override of a key the config does not have raises here, naming it, before
anything starts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from sat_ext.example_configs import ExampleError, config_dir, example_names, variants


class PreflightError(ValueError):
    """Bad preflight input, naming the value and where it came from (a target, an override, a flag)."""


@dataclass(frozen=True)
class Target:
    """One config to run: a name for its output folder and how to compose it."""

    name: str
    config_dir: Path
    config_name: str
    kind: str  # "example", "hydra" or "composed"

    @property
    def example(self) -> str | None:
        """The example folder name, for an example variant."""
        return self.name.split("/", 1)[0] if self.kind == "example" else None


def _example_targets(text: str) -> list[Target]:
    example, _, variant = text.partition("/")
    try:
        folder = config_dir(example)
        names = variants(example)
    except ExampleError as err:
        raise PreflightError(f"TARGET {text!r}: {err}") from err
    if variant and variant not in names:
        raise PreflightError(
            f"TARGET {text!r}: example {example!r} has no variant {variant!r}; known: {', '.join(names)}"
        )
    return [Target(f"{example}/{v}", folder, v, "example") for v in ([variant] if variant else names)]


def resolve(text: str) -> list[Target]:
    """The targets ``text`` names (several for a whole example); raises :class:`PreflightError` naming it."""
    path = Path(text)
    if path.suffix in (".yaml", ".yml"):
        if not path.is_file():
            raise PreflightError(f"TARGET {text!r}: no such config file")
        import yaml

        raw = yaml.safe_load(path.read_text()) or {}
        if not isinstance(raw, dict):
            raise PreflightError(f"TARGET {text!r}: not a YAML mapping")
        kind = "hydra" if "defaults" in raw else "composed"
        return [Target(path.stem, path.resolve().parent, path.stem, kind)]
    if text.split("/", 1)[0] in example_names():
        return _example_targets(text)
    raise PreflightError(
        f"TARGET {text!r} is neither a shipped example variant (EXAMPLE/VARIANT, examples: "
        f"{', '.join(example_names())}) nor a .yaml config file"
    )


def compose(target: Target, overrides: list[str]) -> DictConfig:
    """The config ``target`` composes to with ``overrides`` (Hydra's grammar), with run.sh's one rule for an example
    variant: ``denominator=rollout`` names the run ``VARIANT_rollout_lp``."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    all_overrides = [*overrides]
    if target.kind == "example" and "denominator=rollout" in overrides:
        if not any(o.startswith("trainer.experiment_name=") for o in overrides):  # run.sh's naming rule
            all_overrides.append(f"trainer.experiment_name={target.config_name}_rollout_lp")
    try:
        with initialize_config_dir(config_dir=str(target.config_dir), version_base=None):
            return hydra_compose(config_name=target.config_name, overrides=all_overrides)
    except (HydraException, OmegaConfBaseException) as err:
        raise PreflightError(f"TARGET {target.name!r} does not compose with overrides {overrides}: {err}") from err
