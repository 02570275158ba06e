"""The field-axes study (`python launch.py -m +experiment=field_axes`) and the registry of TRL and
verl names (`grpo.config.equivalents`): the preset dry-runs its base and one job per axis, named by
what each sets and priced; each variant sets exactly its registry row's setting; every setting of
the registry is a key or a config group option of `conf/` and valid (a renamed option fails);
the generated docs page holds the table."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from conftest import gen_pages, stand_in_real_paths
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from grpo.config.equivalents import EQUIVALENTS, Equivalent, field_axes
from grpo.config.keys import config_keys
from grpo.config.validation import check_config

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PRESET = CONF / "experiment" / "field_axes.yaml"
VARIANTS = CONF / "variants" / "field_axes"


def swept_variants() -> list[str]:
    """The variants the preset's sweep gives, in order."""
    params = yaml.safe_load(PRESET.read_text())["hydra"]["sweeper"]["params"]
    return str(params["variants/field_axes"]).split(",")


def compose_with(overrides: Sequence[str], conf: Path = CONF) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The real model's and MATH's paths, stand-ins (the preset is the Qwen-on-MATH study)."""
    return stand_in_real_paths(tmp_path_factory.mktemp("real"))


def test_the_preset_sweeps_the_base_and_one_variant_per_axis_of_the_registry() -> None:
    """No grid: one list of variants, `base` first, then each axis of the registry once, and
    every option file of the group is one of them."""
    assert swept_variants() == ["base", *field_axes()]
    assert sorted(p.stem for p in VARIANTS.glob("*.yaml")) == sorted(swept_variants())
    assert list(field_axes()) == ["gspo", "cispo", "batch_std", "prompt_level",
                                  "zero_variance_filter", "dynamic_sampling", "retire",
                                  "overlong_filter", "overlong_punishment", "kl"]


def test_the_dry_run_names_prices_and_validates_every_job(stand_ins: list[str],
                                                         tmp_path: Path) -> None:
    """`launch.py -m +experiment=field_axes dry_run=true` (rollout=hf: no vLLM here): 11 jobs,
    each checked as it would run, labelled by what its variant sets (not `variants/...=gspo`),
    GRPO-Clip wherever no variant names a loss (the off-policy default), each job and the sweep
    priced, the KL job's reference model in the memory line."""
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "+experiment=field_axes",
                          *stand_ins, "rollout=hf", "dry_run=true",
                          f"paths.output_root={tmp_path / 'out'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    jobs = [line for line in out.stdout.splitlines() if line.startswith("job #")]
    assert len(jobs) == 11 and "variants/field_axes=" not in out.stdout + out.stderr
    label = {name: job.split("[", 1)[1].split("]", 1)[0] for name, job in zip(swept_variants(), jobs, strict=True)}
    base = dict(part.split("=", 1) for part in label["base"].split(", "))
    assert base == {"kl.beta": "0", "loss": "grpo_clip", "normalization": "mean",
                    "overlong.buffer": "0", "overlong.filter": "false", "retire.pass_rate": "None",
                    "std_norm": "on", "zero_variance": "keep"}
    changed = {"gspo": {"loss": "gspo"}, "cispo": {"loss": "cispo"},
               "batch_std": {"std_norm": "batch"}, "prompt_level": {"normalization": "prompt"},
               "zero_variance_filter": {"zero_variance": "filter"},
               "dynamic_sampling": {"zero_variance": "dynamic_sampling"},
               "retire": {"retire.pass_rate": "0.9"}, "overlong_filter": {"overlong.filter": "true"},
               "overlong_punishment": {"overlong.buffer": "256"}, "kl": {"kl.beta": "0.001"}}
    for name, values in changed.items():  # one axis changed at a time
        assert dict(part.split("=", 1) for part in label[name].split(", ")) == {**base, **values}
    for name, job in zip(swept_variants(), jobs, strict=True):
        loss = changed[name]["loss"] + "," if name in ("gspo", "cispo") else "grpo_clip (off-policy default),"
        assert f"] loss={loss}" in job
        assert "optimizer_steps_per_grpo_step=4 (off-policy)" in job and "n_grpo_steps=200" in job
        assert re.search(r"~\d+\.\d+ (GPU|CPU)-hours", job), job
    assert "priced at +4 x the rollouts" in jobs[swept_variants().index("dynamic_sampling")]
    assert re.search(r"^cost: 11 jobs, [\d.]+ (GPU|CPU)-hours for the full grid$", out.stdout, re.M)
    assert "trainer memory of job #10: 25.9 GiB" in out.stdout and "reference 2.88 GiB" in out.stdout
    assert not (tmp_path / "out").exists(), "a dry run wrote files"


def resolved(cfg: DictConfig) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def test_each_variant_sets_exactly_its_registry_rows_setting(stand_ins: list[str]) -> None:
    """Composing the preset with variant <axis> gives the config composing its base with the
    registry row's `key=value` overrides gives: the study runs what the table says it does."""
    preset = ["+experiment=field_axes", *stand_ins]
    base = resolved(compose_with([*preset, "variants/field_axes=base"]))
    for axis, row in field_axes().items():
        variant = resolved(compose_with([*preset, f"variants/field_axes={axis}"]))
        assert variant != base, axis
        assert variant == resolved(compose_with([*preset, "variants/field_axes=base", *row.setting])), axis


def setting_problems(row: Equivalent, stand_ins: Sequence[str]) -> list[str]:
    """What is wrong with a row's setting: a `group=option` with no `conf/<group>/<option>.yaml`,
    a `key=value` whose key is no config key, or a composition Hydra refuses or the validator
    rejects (on the Qwen-on-MATH defaults, off-policy for the losses that read the ratio)."""
    keys, problems = config_keys(CONF), []
    for override in row.setting:
        key, value = override.split("=", 1)
        if (CONF / key).is_dir():
            if not (CONF / key / f"{value}.yaml").is_file():
                problems.append(f"{override}: conf/{key}/ has no option {value}")
        elif key not in keys:
            problems.append(f"{override}: {key} is no config key")
    if problems:
        return problems
    plan = ["off_policy.epochs=2"] if row.setting[0].startswith("loss=") else []
    try:
        cfg = compose_with([*stand_ins, *plan, *row.setting])
    except Exception as err:  # noqa: BLE001 -- Hydra's refusal, whatever its type
        return [f"{' '.join(row.setting)}: {type(err).__name__}: {err}"]
    return [f"{' '.join(row.setting)}: {e}" for e in check_config(cfg).errors]


def test_every_setting_of_the_registry_is_a_valid_key_or_option_of_the_config(
        stand_ins: list[str]) -> None:
    assert [problem for row in EQUIVALENTS for problem in setting_problems(row, stand_ins)] == []
    assert {row.setting[0].split("=")[0] for row in EQUIVALENTS} >= {
        "loss", "std_norm", "normalization", "zero_variance", "retire.pass_rate",
        "overlong.filter", "overlong.buffer", "kl.beta"}
    assert all(row.paper and row.what for row in EQUIVALENTS)


@pytest.mark.parametrize(("setting", "named"), [
    (("std_norm=batched",), "conf/std_norm/ has no option batched"),  # an option renamed
    (("kl.coef=0.001",), "kl.coef is no config key"),  # a key renamed
    (("retire.pass_rate=1.5",), "retire.pass_rate"),  # out of its range
    (("overlong.buffer=4096",), "overlong.buffer"),  # longer than sampling.max_new_tokens
])
def test_a_renamed_or_invalid_setting_is_named(setting: tuple[str, ...], named: str,
                                               stand_ins: list[str]) -> None:
    problems = setting_problems(Equivalent(setting, "x", "x", "", ""), stand_ins)
    assert len(problems) == 1 and named in problems[0], problems


def test_the_page_holds_the_study_and_the_table() -> None:
    """reference/field-axes.md: the study's command and variants, and one row per setting with
    its paper and TRL's and verl's names, as the registry writes them."""
    page = gen_pages().field_axes_page()
    assert "python launch.py -m +experiment=field_axes" in page
    study, table = page.split("## This project's settings in TRL and verl")
    for axis, row in field_axes().items():
        assert f"| `{axis}` | {' '.join(f'`{s}`' for s in row.setting)} | {row.what} |" in study
    for row in EQUIVALENTS:
        cells = [" ".join(f"`{s}`" for s in row.setting), row.what, row.paper,
                 row.trl or "none", row.verl or "none", row.note]
        assert "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" in table
    assert '`scale_rewards="batch"`' in table and "`loss_agg_mode=seq-mean-token-mean`" in table
    assert "`kl_loss_coef=0.001`" in table and '`importance_sampling_level="sequence"`' in table
    assert "`algorithm.filter_groups.enable=true`" in table and "`mask_truncated_completions=True`" in table


def test_a_command_line_choice_that_makes_variants_one_run_is_refused(tmp_path: Path) -> None:
    """`loss=cispo` on the command line wins over the loss of every variant (and
    `overlong.buffer=4` over overlong_punishment's 256): base, gspo, cispo and overlong_punishment
    compose to one config and seed. The dry run refuses the sweep in one line naming those jobs
    and the two overrides, before anything is written."""
    out = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "+experiment=field_axes",
                          "model=tiny", "data=toy", "rollout=hf", "loss=cispo", "overlong.buffer=4",
                          f"paths.output_root={tmp_path / 'out'}", "dry_run=true"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "job #" not in out.stdout
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: jobs #0, #1, #2, #9 (variants/field_axes=base, gspo, cispo, "
                           "overlong_punishment) compose to one config and seed"), line
    assert ("loss=cispo on the command line overrides the loss that variants/field_axes=gspo, "
            "cispo set, overlong.buffer=4 on the command line overrides the overlong.buffer that "
            "variants/field_axes=overlong_punishment sets") in line
    assert "drop loss=cispo and overlong.buffer=4" in line and line.endswith("nothing was submitted")
    assert not (tmp_path / "out").exists(), "a refused dry run wrote files"
