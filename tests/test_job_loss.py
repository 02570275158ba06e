"""The off-policy default loss (grpo.sweep.job_loss): an off-policy job that names no loss runs
GRPO-Clip, in the dry run, in the sweep that runs and in a single run; a named loss wins."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from launching import launch
from omegaconf import DictConfig, OmegaConf

from grpo.sweep.job_loss import compose_job

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
TOY = ["model=tiny", "data=toy", "rollout=hf"]


def job_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("job #")]


def composed(overrides: list[str]):  # noqa: ANN201
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose_job(GlobalHydra.instance().config_loader(), "config", overrides)


def test_headline_dry_run_gives_every_off_policy_job_grpo_clip(tmp_path: Path) -> None:
    out = launch("-m", "off_policy.epochs=1,2,4", "train_batch_size=64,128,256", *TOY,
                 "rollout_batch_size=256", f"paths.output_root={tmp_path}", "dry_run=true")
    assert out.returncode == 0, out.stderr
    losses = [line.split("] ", 1)[1].split(", gradient", 1)[0] for line in job_lines(out.stdout)]
    # only epochs=1 with train_batch_size=256 (job #2) takes one optimizer step per rollout batch
    assert losses == ["loss=grpo_clip (off-policy default)"] * 2 + ["loss=reinforce_with_baseline"] \
        + ["loss=grpo_clip (off-policy default)"] * 6
    assert "ignores the probability ratio" not in out.stderr
    assert not list(tmp_path.rglob("*"))


def test_a_named_loss_wins_and_keeps_its_warning(tmp_path: Path) -> None:
    out = launch("-m", "off_policy.epochs=1,2", *TOY, "loss=reinforce_with_baseline",
                 f"paths.output_root={tmp_path}", "dry_run=true")
    assert out.returncode == 0, out.stderr
    assert [line.split("] ", 1)[1].split(",", 1)[0] for line in job_lines(out.stdout)] == \
        ["loss=reinforce_with_baseline"] * 2
    assert "warning: job #1 [off_policy.epochs=2]: 2 optimizer steps per rollout batch" in out.stderr
    assert "job #0" not in out.stderr  # on-policy: no warning


@pytest.mark.parametrize(("overrides", "loss", "defaulted"), [
    ([*TOY, "off_policy.epochs=2"], "grpo_clip", True),
    ([*TOY, "off_policy.epochs=1"], "reinforce_with_baseline", False),
    ([*TOY, "train_batch_size=32", "micro_batch_size=32"], "grpo_clip", True),
    ([*TOY, "off_policy.epochs=2", "loss=no_baseline"], "no_baseline", False),
    # chosen by a preset: `override /loss: grpo_clip` (demo) is kept, not re-added
    (["+experiment=demo", "off_policy.epochs=2"], "grpo_clip", False),
    # an impossible plan is validation's to report; nothing is added
    ([*TOY, "train_batch_size=100"], "reinforce_with_baseline", False),
])
def test_compose_job_applies_the_rule(overrides: list[str], loss: str, defaulted: bool) -> None:
    job = composed(overrides)
    assert (job.cfg.loss.name, job.loss_defaulted) == (loss, defaulted)
    assert job.overrides == tuple(overrides) + (("loss=grpo_clip",) if defaulted else ())


@pytest.mark.parametrize(("overrides", "compositions"), [
    ([*TOY, "off_policy.epochs=2"], 1),
    (["off_policy.epochs=4", "train_batch_size=64", "hydra.job.config.override_dirname.kv_sep=@"], 1),
    (["+experiment=toy", "off_policy.epochs=2"], 1),
    # something besides the loss's yaml wrote into `loss`: composed again with the choice
    ([*TOY, "off_policy.epochs=2", "+loss.note=1"], 2),
])
def test_a_defaulted_job_is_composed_once_as_hydra_would(
    overrides: list[str], compositions: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        calls: list[list[str]] = []
        load = loader.load_configuration

        def counted(name: str, job: list[str], mode: RunMode) -> DictConfig:
            calls.append(job)
            return load(name, job, mode)

        monkeypatch.setattr(loader, "load_configuration", counted)
        job = compose_job(loader, "config", overrides)
        monkeypatch.undo()
        hydra = loader.load_configuration("config", list(job.overrides), RunMode.RUN)
    assert job.loss_defaulted and len(calls) == compositions
    assert OmegaConf.to_container(job.cfg) == OmegaConf.to_container(hydra)
    assert job.cfg.hydra.job.override_dirname == hydra.hydra.job.override_dirname
    assert "loss=grpo_clip" in job.cfg.hydra.job.override_dirname.replace("@", "=")


@pytest.mark.slow
def test_run_directories_record_the_loss_used(tmp_path: Path, tiny_model_dir: Path) -> None:
    common = [*TOY, f"model.path={tiny_model_dir}", "n_grpo_steps=1", "checkpoint.save_final_model=false"]
    out = launch("-m", "off_policy.epochs=1,2", *common, f"paths.output_root={tmp_path / 'sweep'}")
    assert out.returncode == 0, out.stderr[-3000:]
    runs = {p.parent.parent.name: p.parent.parent for p in (tmp_path / "sweep").rglob(".hydra/config.yaml")}
    for num, loss, override in (("0", "reinforce_with_baseline", []), ("1", "grpo_clip", ["loss=grpo_clip"])):
        hydra_dir = runs[num] / ".hydra"
        assert yaml.safe_load((hydra_dir / "config.yaml").read_text())["loss"]["name"] == loss
        recorded = yaml.safe_load((hydra_dir / "overrides.yaml").read_text())
        assert [o for o in recorded if o.startswith("loss=")] == override
    out = launch(*common, "off_policy.epochs=2", f"paths.output_root={tmp_path / 'single'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "loss=grpo_clip (off-policy default): 2 optimizer steps per rollout batch" in out.stderr
    (hydra_dir,) = (tmp_path / "single").rglob(".hydra")
    assert yaml.safe_load((hydra_dir / "config.yaml").read_text())["loss"]["name"] == "grpo_clip"
    assert "loss=grpo_clip" in yaml.safe_load((hydra_dir / "overrides.yaml").read_text())


@pytest.mark.slow
def test_the_micro_batch_cut_changes_neither_the_loss_nor_the_weights(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    """An off-policy run that names no loss trains GRPO-Clip whatever cuts its optimizer steps
    into micro-batches: fixed sizes 32 and 8, or token budgets of 100000, 150 and 64 tokens with
    a micro_batch_size that does not divide train_batch_size (unused under a budget; the rule
    once skipped such a job and it trained reinforce_with_baseline off-policy). Three GRPO steps
    of 2 epochs x 2 optimizer steps end on the same weights, to 1e-4 of their movement."""
    from safetensors.torch import load_file

    from grpo.training.trainer import train

    common = [*TOY, f"model.path={tiny_model_dir}", "normalization=mean", "off_policy.epochs=2",
              "rollout_batch_size=64", "train_batch_size=32", "n_grpo_steps=3",
              "sampling.temperature=1.0", "logging.wandb_mode=disabled", "eval.eval_every=100",
              "checkpoint.save_final_model=false"]
    cuts = {"size 32": ["micro_batch_size=32"], "size 8": ["micro_batch_size=8"],
            **{f"budget {n}": ["micro_batch_size=7", f"model.micro_batch_tokens={n}"]
               for n in (100000, 150, 64)}}
    weights = {}
    for name, cut in cuts.items():
        job = composed([*common, *cut])
        assert (job.cfg.loss.name, job.loss_defaulted) == ("grpo_clip", True), name
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=list(job.overrides))  # the job's config, as it runs
        run_dir = tmp_path / name.replace(" ", "_")
        assert train(cfg, run_dir)["status"] == "completed"
        weights[name] = load_file(str(run_dir / "checkpoints" / "step_000003" / "model.safetensors"))
    start = load_file(str(tiny_model_dir / "model.safetensors"))
    reference = weights["size 32"]
    keys = sorted(reference.keys() & start.keys())
    assert len(keys) > 20

    def distance(a: dict, b: dict) -> float:
        return sum(float((a[k].double() - b[k].double()).square().sum()) for k in keys) ** 0.5

    movement = distance(reference, start)
    assert movement > 1e-3
    shares = {name: distance(state, reference) / movement for name, state in weights.items()}
    assert max(shares.values()) <= 1e-4, shares
