"""A chain of studies as ``conf/chain/<name>.yaml`` defines it (see ``conf/chain/cs336.yaml``).

Each stage names an experiment preset of ``conf/experiment/`` and the keys it decides: the keys
later stages take from its best config. A stage with ``off_policy_only`` takes what earlier
stages decide about the batch plan (``off_policy.epochs``, ``train_batch_size``) from their best
off-policy config (more than one optimizer step per rollout batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from grpo.training.batch_plan import CONFIG_KEYS

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
STAGE_KEYS = ("experiment", "decides", "off_policy_only", "study", "race_max_seeds")
CONFIRM_KEYS = ("top_k", "seeds", "retrain", "placebo")
YAML_BOOLEANS = ("true", "false", "True", "False", "TRUE", "FALSE")
"""How a boolean of the chain's yaml is written (YAML 1.2's); YAML 1.1's yes/no/on/off, which
the yaml loader also reads as booleans, are refused: a key set to `yes` by mistake must not
silently train a placebo arm."""


@dataclass(frozen=True)
class ConfirmStage:
    """The chain's optional last stage: its last stage's top ``top_k`` configs confirmed
    (``python -m analysis confirm``) with ``seeds`` fresh seeds each (``retrain``), or its own
    final models on the held-out problems alone (not ``retrain``); with ``placebo``, beside the
    best one's config trained on ``reward=random`` with the same seeds."""

    top_k: int
    seeds: int | None
    retrain: bool = True
    placebo: bool = False


@dataclass(frozen=True)
class Stage:
    """One study: its preset, the keys it decides, whether it takes the batch plan of the best
    off-policy config of the stages before it, and whether it is a race across seeds."""

    experiment: str
    decides: tuple[str, ...]
    off_policy_only: bool = False
    study: str | None = None
    race_max_seeds: int | None = None
    """Race the stage's configs across up to this many seeds (`race.max_seeds`; None: no race)."""

    def decides_batch_plan(self) -> bool:
        """Whether the stage decides a key of the batch plan (epochs, train batch size, ...)."""
        return any(key in CONFIG_KEYS.values() for key in self.decides)


@dataclass(frozen=True)
class Chain:
    """The stages of a chain, in the order they run, and the compute budget of each study
    (GPU-hours; a study may span several stages)."""

    name: str
    stages: tuple[Stage, ...]
    budgets: tuple[tuple[str, float], ...] = ()
    confirm: ConfirmStage | None = None
    """The optional last stage: a confirmation of the last stage's pick."""

    @property
    def names(self) -> list[str]:
        """The stages' experiment names, in order."""
        return [stage.experiment for stage in self.stages]

    def select(self, names: list[str]) -> list[int]:
        """The indices of the named stages, in chain order; an unknown name is an error."""
        unknown = [name for name in names if name not in self.names]
        if unknown:
            raise ValueError(f"--stages: {', '.join(unknown)} is not a stage of chain {self.name}; "
                             f"its stages: {', '.join(self.names)}")
        return [i for i, name in enumerate(self.names) if name in names]


def load_chain(name: str, conf_dir: Path = CONF_DIR) -> Chain:
    """``<conf_dir>/chain/<name>.yaml``, checked: every stage a preset of
    ``<conf_dir>/experiment/``, named once, with keys it decides."""
    path = conf_dir / "chain" / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in (conf_dir / "chain").glob("*.yaml"))
        raise ValueError(f"--chain {name}: no {path}; chains: {', '.join(known) or 'none'}")
    data = OmegaConf.to_container(OmegaConf.load(path))
    entries = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: `stages` must be a non-empty list of stages")
    stages = []
    for i, entry in enumerate(entries):
        where = f"{path}: stages[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping with keys {', '.join(STAGE_KEYS)}")
        unknown = sorted(set(entry) - set(STAGE_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(unknown)}; "
                             f"a stage has {', '.join(STAGE_KEYS)}")
        experiment, decides = entry.get("experiment"), entry.get("decides")
        if not isinstance(experiment, str) or not (conf_dir / "experiment" / f"{experiment}.yaml"
                                                   ).is_file():
            raise ValueError(f"{where}: experiment={experiment!r} is not a preset of "
                             f"{conf_dir / 'experiment'}")
        if not isinstance(decides, list) or not decides or not all(
                isinstance(key, str) for key in decides):
            raise ValueError(f"{where} ({experiment}): `decides` must be a non-empty list of keys")
        study = entry.get("study")
        if study is not None and not isinstance(study, str):
            raise ValueError(f"{where} ({experiment}): `study` must be a name")
        race = entry.get("race_max_seeds")
        if race is not None and (not isinstance(race, int) or isinstance(race, bool) or race < 2):
            raise ValueError(f"{where} ({experiment}): `race_max_seeds` must be an integer >= 2 "
                             "(the most seeds a config gets in the stage's race) or absent")
        off_policy_only = entry.get("off_policy_only", False)
        if not isinstance(off_policy_only, bool):
            raise ValueError(f"{where} ({experiment}): `off_policy_only` must be true or false, "
                             f"not {off_policy_only!r}")
        stages.append(Stage(experiment, tuple(decides), off_policy_only, study, race))
    names = [stage.experiment for stage in stages]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"{path}: stage(s) {', '.join(twice)} appear more than once")
    unknown = sorted(set(data) - {"stages", "budgets", "confirm"})
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(unknown)}; a chain has stages, "
                         "budgets and confirm")
    return Chain(name, tuple(stages), _budgets(data.get("budgets"), stages, path),
                 _confirm(data.get("confirm"), path))


def _confirm(data: object, path: Path) -> ConfirmStage | None:
    """The `confirm` mapping ({top_k, seeds[, placebo: true]} or {top_k, retrain: false}),
    checked as `python -m analysis confirm` checks its options."""
    if data is None:
        return None
    from analysis.outputs.confirm import check_counts

    if not isinstance(data, dict) or set(data) - set(CONFIRM_KEYS):
        raise ValueError(f"{path}: `confirm` must be a mapping of {', '.join(CONFIRM_KEYS)}")
    retrain, placebo = data.get("retrain", True), data.get("placebo", False)
    written = _written_scalars(path, "confirm")
    for key, value in (("retrain", retrain), ("placebo", placebo)):
        if not isinstance(value, bool):
            raise ValueError(f"{path}: confirm.{key} must be true or false, not {value!r}")
        if key in written and written[key] not in YAML_BOOLEANS:
            raise ValueError(f"{path}: confirm.{key} must be true or false, not {written[key]} "
                             f"(which YAML 1.1 reads as {str(value).lower()}: write "
                             f"{str(value).lower()})")
    try:
        check_counts(data.get("top_k"), data.get("seeds"), retrain, placebo)
    except ValueError as error:
        raise ValueError(f"{path}: confirm: {confirm_words(str(error))}") from None
    return ConfirmStage(int(data["top_k"]), data.get("seeds"), retrain, placebo)


def _written_scalars(path: Path, block: str) -> dict[str, str]:
    """The scalar values of the top-level mapping ``block`` of the yaml file at ``path``, as
    written (before YAML reads ``yes`` or ``on`` as true): key -> text; {} where there is
    no such mapping."""
    root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    mapping = next((value for key, value in getattr(root, "value", [])
                    if isinstance(key, yaml.ScalarNode) and key.value == block), None)
    if not isinstance(mapping, yaml.MappingNode):
        return {}
    return {key.value: value.value for key, value in mapping.value
            if isinstance(key, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode)}


def confirm_words(message: str) -> str:
    """A refusal of ``python -m analysis confirm`` in the words of the chain's `confirm` block
    (its options as the block's keys)."""
    return (message.replace("--top-k", "top_k").replace("--seeds", "seeds")
            .replace("--no-retrain", "retrain: false").replace("--placebo", "placebo: true"))


def _budgets(data: object, stages: list[Stage], path: Path) -> tuple[tuple[str, float], ...]:
    """The `budgets` mapping (study -> GPU-hours > 0), naming every stage's study."""
    if data is None:
        return ()
    if not isinstance(data, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in data.values()):
        raise ValueError(f"{path}: `budgets` must map each study to its GPU-hours (> 0)")
    unknown = sorted({s.study for s in stages if s.study is not None} - set(data))
    if unknown:
        raise ValueError(f"{path}: no budget for the stages' study {', '.join(unknown)}; add it "
                         "to `budgets`")
    return tuple((str(study), float(hours)) for study, hours in data.items())
