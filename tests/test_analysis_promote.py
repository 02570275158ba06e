"""``analysis.outputs.promote`` end to end: a real Hydra multirun of a tiny app over a small config tree
is the source sweep; the generated preset must compose, and sweep, the intended configs."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf
from rich.console import Console
from sweep_factory import write_scenario, write_simple_sweep

from analysis.__main__ import main
from analysis.outputs.monitor import SweepMonitor
from analysis.outputs.progress import SweepProgress
from analysis.outputs.promote import promote
from analysis.readers.collect import collect
from analysis.readers.jobs import Job, write_jobs
from grpo.config.keys import yours

ROOT = Path(__file__).resolve().parents[1]

CONF = {
    "config.yaml": """\
defaults:
  - _self_
  - loss: reinforce_with_baseline
  - off_policy: default
  - cluster: local
  - pruning: "off"
experiment_name: base
n_grpo_steps: 10
seed: 0
rollout_batch_size: 128
group_size: 8
train_batch_size: 128
micro_batch_size: 2
eval:
  eval_every: 10
health:
  zero_reward_patience: 0
race:
  max_seeds: null
""",
    "loss/reinforce_with_baseline.yaml": "name: reinforce_with_baseline\n",
    "loss/grpo_clip.yaml": "name: grpo_clip\n",
    "loss/no_baseline.yaml": "name: no_baseline\n",
    "off_policy/default.yaml": "epochs: 1\n",
    "cluster/local.yaml": "gpus_per_job: 0\n",
    "cluster/big.yaml": "gpus_per_job: 2\n",
    "pruning/off.yaml": "name: \"off\"\n",
    "pruning/successive_halving.yaml": "name: successive_halving\nmin_resource: 10\n",
    "experiment/broad.yaml": """\
# @package _global_
defaults:
  - override /loss: grpo_clip
  - override /pruning: successive_halving
experiment_name: broad
n_grpo_steps: 3
eval:
  eval_every: 5
health:
  zero_reward_patience: 15
learning_rate: 0.001
hydra:
  sweeper:
    params:
      off_policy.epochs: 1,2
      train_batch_size: 64,128
""",
}
# A Hydra app that "trains" by writing the eval rewards given for its config in $EVALS
APP = """\
import json, os
from pathlib import Path
import hydra
from hydra.core.hydra_config import HydraConfig

@hydra.main(config_path={conf!r}, config_name="config", version_base=None)
def main(cfg):
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    key = f"{{cfg.loss.name}},{{cfg.off_policy.epochs}},{{cfg.train_batch_size}}"
    rewards = json.loads(os.environ.get("EVALS", "{{}}")).get(key)
    if rewards is not None:
        rows = [{{"step": s, "time/elapsed_s": 10.0 * (s + 1), "eval/reward": r}}
                for s, r in enumerate(rewards)]
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\\n" for r in rows))
        (run_dir / "status.json").write_text(json.dumps({{"status": "completed"}}))

main()
"""


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    """A small config tree shaped like the project's."""
    root = tmp_path / "conf"
    for name, text in CONF.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (tmp_path / "app.py").write_text(APP.format(conf=str(root)))
    return root


def hydra_sweep(conf: Path, out: Path, args: Sequence[str],
                evals: Mapping[str, Sequence[float]] | None = None) -> Path:
    """Run ``app.py -m *args`` into ``out``; ``evals`` maps "loss,epochs,tbs" to rewards."""
    env = {**os.environ, "EVALS": json.dumps(evals or {})}
    subprocess.run([sys.executable, str(conf.parent / "app.py"), "-m", *args,
                    f"hydra.sweep.dir={out}"], check=True, capture_output=True, env=env,
                   timeout=120)
    return out


def composed(conf: Path, overrides: Sequence[str], hydra: bool = False) -> DictConfig:
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)


def test_promoted_preset_reproduces_source_configs(tmp_path: Path, conf: Path) -> None:
    evals = {"grpo_clip,1,64": [0.1, 0.2], "grpo_clip,1,128": [0.1, 0.3],
             "grpo_clip,2,64": [0.1, 0.6], "grpo_clip,2,128": [0.1, 0.5]}
    source = hydra_sweep(conf, tmp_path / "broad", ["+experiment=broad", "cluster=big"], evals)
    promotion = promote(collect([source]), 2, "best_eval_reward", "focused", steps=200,
                        conf_dir=conf)

    assert [p.name for p in promotion.options] == ["top1.yaml", "top2.yaml", "on_policy.yaml"]
    preset = promotion.preset.read_text()
    assert preset.startswith("# @package _global_\n")
    assert f"from sweep(s): {source}\n# Criterion: best_eval_reward" in preset
    # one seed a cell of a 2 x 2 grid: the additive model's residual (1 df) is the seed variance
    assert ("#   top1: off_policy.epochs=2, train_batch_size=64  [best_eval_reward=0.6000, 95% "
            "interval [0.000, 1.000]]") in preset
    assert "additive model of the 2 x 2 one-seed grid" in preset
    assert "#   on_policy: off_policy.epochs=1, train_batch_size=128  (on-policy baseline)" \
        in preset
    assert OmegaConf.to_container(OmegaConf.load(promotion.preset)) == {
        "experiment_name": "focused", "n_grpo_steps": 200,
        "hydra": {"sweeper": {"params": {"+promoted/focused": "top1,top2,on_policy"}}}}
    # what the broad preset says a config is (its loss, learning rate) is carried; how the broad
    # pass ran it (its pruner, evaluation cadence, health guard, cluster, steps, name) is not
    assert OmegaConf.to_container(OmegaConf.load(promotion.options[0])) == {
        "defaults": [{"override /loss": "grpo_clip"}], "learning_rate": 0.001,
        "off_policy": {"epochs": 2}, "train_batch_size": 64}

    cfg = composed(conf, ["+experiment=promoted/focused"], hydra=True)
    assert cfg.hydra.sweeper.params == {"+promoted/focused": "top1,top2,on_policy"}
    # a real multirun of the preset launches exactly the promoted configs
    rerun = collect([hydra_sweep(conf, tmp_path / "focused", ["+experiment=promoted/focused"])])
    got = rerun.runs[["config label", "off_policy.epochs", "train_batch_size", "loss.name",
                      "n_grpo_steps", "experiment_name", "cluster.gpus_per_job"]]
    # named by the values each promoted config sets, as the broad sweep named them
    assert got.values.tolist() == [
        ["off_policy.epochs=2, train_batch_size=64", 2, 64, "grpo_clip", 200, "focused", 0],
        ["off_policy.epochs=2, train_batch_size=128", 2, 128, "grpo_clip", 200, "focused", 0],
        ["off_policy.epochs=1, train_batch_size=128", 1, 128, "grpo_clip", 200, "focused", 0]]
    assert rerun.label_keys == ["off_policy.epochs", "train_batch_size"]
    assert rerun.group_keys == frozenset()
    assert set(rerun.runs["status"]) == {"pending"}
    # the focused sweep's own evaluation cadence, pruning and guards rule its runs
    focused = OmegaConf.load(Path(rerun.runs["run_dir"][0]) / ".hydra/config.yaml")
    assert (focused.eval, focused.pruning, focused.health, focused.learning_rate) == (
        {"eval_every": 10}, {"name": "off"}, {"zero_reward_patience": 0}, 0.001)


def test_the_watch_and_the_summary_name_promoted_configs_as_the_report_does(
        tmp_path: Path, conf: Path) -> None:
    """The per-job lines of `make watch` and of the sweep's summary (analysis.outputs.progress) name each
    promoted config by the values its option sets, as the report's config labels do
    (analysis.names.config_names), not `+promoted/focused=top1`; a job whose run has not written its
    config yet keeps its override."""
    evals = {"grpo_clip,1,64": [0.1, 0.2], "grpo_clip,1,128": [0.1, 0.3],
             "grpo_clip,2,64": [0.1, 0.6], "grpo_clip,2,128": [0.1, 0.5]}
    source = hydra_sweep(conf, tmp_path / "broad", ["+experiment=broad"], evals)
    promote(collect([source]), 2, "best_eval_reward", "focused", conf_dir=conf)
    focused = hydra_sweep(conf, tmp_path / "focused", ["+experiment=promoted/focused"])
    reported = collect([focused]).runs.sort_values("job")["config label"].tolist()
    assert reported == ["off_policy.epochs=2, train_batch_size=64",
                        "off_policy.epochs=2, train_batch_size=128",
                        "off_policy.epochs=1, train_batch_size=128"]
    rows = SweepProgress(focused).read()
    assert [row.label for row in rows] == reported
    # jobs.json (the launchers write it) lists a job whose run has not started: its override
    write_jobs(focused, "local", [Job(3, ("+experiment=promoted/focused", "+promoted/focused=top2"))])
    rows = SweepProgress(focused).read()
    assert [row.label for row in rows] == [*reported, "+promoted/focused=top2"]
    monitor = SweepMonitor(SweepProgress(focused), Console(file=io.StringIO(), width=400))
    summary = monitor.summary(rows)
    assert summary[1:5] == [f"  #{i} {label}: pending, step 0" for i, label in enumerate(
        [*reported, "+promoted/focused=top2"])], summary
    assert not any("promoted/focused=top1" in line for line in summary)  # named, not the option


def test_the_dry_run_names_promoted_configs_as_the_report_does(tmp_path: Path) -> None:
    """`launch.py -m +experiment=promoted/<NAME> dry_run=true` lists each job by the values its
    promoted option sets (analysis.names.config_names over the composed configs), not by
    `+promoted/<NAME>=top1`: a preset `promote` wrote into a copy of the project's config tree."""
    project = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", project, ignore=lambda folder, names: [
        n for n in names if yours(Path(folder, n), ROOT / "conf")])
    sweep = write_simple_sweep(tmp_path / "broad", [
        {"loss": "grpo_clip", "off_policy.epochs": e, "train_batch_size": t}
        for e, t in ((1, 64), (2, 64), (2, 128))], [[0.2, 0.3], [0.2, 0.5], [0.2, 0.4]],
        groups=("loss",))
    promote(collect([sweep]), 2, "best_eval_reward", "top", conf_dir=project)
    dry = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-cp", str(project), "-m",
                          "+experiment=promoted/top", "model=tiny", "data=toy", "rollout=hf",
                          "dry_run=true", f"paths.output_root={tmp_path / 'out'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stderr[-3000:]
    jobs = [line.split(" loss=", 1)[0] for line in dry.stdout.splitlines() if line.startswith("job #")]
    assert jobs == ["job #0 [off_policy.epochs=2, train_batch_size=64]",
                    "job #1 [off_policy.epochs=2, train_batch_size=128]",
                    "job #2 [off_policy.epochs=1, train_batch_size=128]"]
    assert "promoted/top=" not in dry.stdout + dry.stderr


def test_criterion_and_derived_baseline(tmp_path: Path, conf: Path) -> None:
    # no on-policy run: rollout_batch_size is 128
    evals = {"reinforce_with_baseline,1,64": [0.1, 0.3, 0.4],
             "reinforce_with_baseline,2,64": [0.1, 0.9, 0.2],
             "reinforce_with_baseline,4,64": [0.1, 0.5, 0.6],
             "reinforce_with_baseline,4,32": [0.1, 0.2, 0.3]}
    coll = collect([hydra_sweep(conf, tmp_path / "s",
                                ["off_policy.epochs=1,2,4", "train_batch_size=32,64"], evals)])
    best = promote(coll, 1, "best_eval_reward", "by_best", conf_dir=conf)
    final = promote(coll, 1, "final_eval_reward", "by_final", conf_dir=conf)
    assert "off_policy.epochs=2, train_batch_size=64  [best_eval_reward=0.9000]" in \
        best.options[0].read_text()
    assert "off_policy.epochs=4, train_batch_size=64  [final_eval_reward=0.6000]" in \
        final.options[0].read_text()
    assert OmegaConf.load(final.options[0]) == {"off_policy": {"epochs": 4},
                                                "train_batch_size": 64}
    assert "(not in the sweep; derived from the best config)  (on-policy baseline)" in \
        final.preset.read_text()
    assert OmegaConf.load(final.options[1]) == {"off_policy": {"epochs": 1},
                                                "train_batch_size": 128}
    cfg = composed(conf, ["+experiment=promoted/by_final", "+promoted/by_final=on_policy"])
    assert (cfg.off_policy.epochs, cfg.train_batch_size) == (1, 128)
    # promoting again with a larger K leaves no stale option behind
    promote(coll, 2, "final_eval_reward", "by_final", conf_dir=conf, overwrite=True)
    assert sorted(p.name for p in (conf / "promoted" / "by_final").iterdir()) == [
        "on_policy.yaml", "top1.yaml", "top2.yaml"]
    promote(coll, 1, "final_eval_reward", "by_final", conf_dir=conf, overwrite=True)
    assert sorted(p.name for p in (conf / "promoted" / "by_final").iterdir()) == [
        "on_policy.yaml", "top1.yaml"]


def test_swept_groups_become_defaults_overrides(tmp_path: Path, conf: Path) -> None:
    evals = {"grpo_clip,1,128": [0.1, 0.2], "grpo_clip,2,128": [0.1, 0.3],
             "no_baseline,1,128": [0.1, 0.4], "no_baseline,2,128": [0.1, 0.8]}
    coll = collect([hydra_sweep(conf, tmp_path / "s",
                                ["loss=grpo_clip,no_baseline", "off_policy.epochs=1,2"], evals)])
    assert coll.group_keys == {"loss"}
    promotion = promote(coll, 2, "final_eval_reward", "by_loss", conf_dir=conf)
    assert OmegaConf.load(promotion.options[0]).defaults == [{"override /loss": "no_baseline"}]
    got = [(c.loss.name, c.off_policy.epochs) for c in (
        composed(conf, ["+experiment=promoted/by_loss", f"+promoted/by_loss={option}"])
        for option in ("top1", "top2"))]
    # loss=no_baseline, epochs=1 is second best and the on-policy run closest to the best
    assert got == [("no_baseline", 2), ("no_baseline", 1)]
    assert "(on-policy baseline)" in promotion.options[1].read_text()


def test_cli_promote_and_errors(tmp_path: Path, conf: Path, capsys: pytest.CaptureFixture
                                ) -> None:
    sweep = write_scenario(tmp_path / "exp" / "sweep")
    main(["promote", "--sweep", str(sweep), "--top-k", "3", "--criterion", "final_eval_reward",
          "--name", "cli", "--steps", "50", "--conf-dir", str(conf)])
    # two configs are ranked at step 9: the others were stopped early, or their runs (failed at
    # step 2, never started) did not reach it, so the top 3 are 2
    out = capsys.readouterr().out
    assert "promoted/cli/top2.yaml" in out and "top3.yaml" not in out
    assert OmegaConf.load(conf / "experiment" / "promoted" / "cli.yaml").n_grpo_steps == 50
    with pytest.raises(SystemExit, match="must match"):
        main(["promote", "--sweep", str(sweep), "--top-k", "1", "--name", "bad name",
              "--conf-dir", str(conf)])


def test_promote_never_replaces_a_preset_and_checks_its_arguments(
        tmp_path: Path, conf: Path, capsys: pytest.CaptureFixture) -> None:
    """`--name toy` once overwrote the shipped conf/experiment/toy.yaml (which overlap_toy
    includes): promoted presets have their own folder, a name already promoted is refused unless
    --overwrite, and --steps and --top-k are refused out of range, naming the option."""
    sweep = write_scenario(tmp_path / "exp" / "sweep")
    shipped = conf / "experiment" / "toy.yaml"
    shipped.parent.mkdir(parents=True, exist_ok=True)
    shipped.write_text("# shipped\nn_grpo_steps: 7\n")
    args = ["promote", "--sweep", str(sweep), "--top-k", "1", "--name", "toy", "--conf-dir", str(conf)]
    main(args)
    assert shipped.read_text() == "# shipped\nn_grpo_steps: 7\n"
    promoted = conf / "experiment" / "promoted" / "toy.yaml"
    assert "run it: python launch.py -m +experiment=promoted/toy" in capsys.readouterr().out
    first = promoted.read_text()
    with pytest.raises(SystemExit, match="a promotion named toy exists .*--overwrite to replace it"):
        main([*args, "--steps", "30"])
    assert promoted.read_text() == first
    main([*args, "--steps", "30", "--overwrite"])
    assert OmegaConf.load(promoted).n_grpo_steps == 30
    for bad, message in ((["--steps", "-5"], r"--steps: n_grpo_steps=-5 is out of range: the number "
                                             r"of GRPO steps must be an integer in \[1, "),
                         (["--top-k", "0"], r"--top-k is 0; give the number of configs")):
        with pytest.raises(SystemExit, match=message):
            main([*args, "--overwrite", *bad])
    assert OmegaConf.load(promoted).n_grpo_steps == 30
    # checked before the sweep is read: a bad value is named even where the sweep is missing
    with pytest.raises(SystemExit, match="--steps: n_grpo_steps=0 is out of range"):
        main(["promote", "--sweep", str(tmp_path / "missing"), "--top-k", "1", "--name", "x",
              "--steps", "0", "--conf-dir", str(conf)])


def test_promote_carries_no_race_and_writes_through_no_link(tmp_path: Path, conf: Path) -> None:
    """A race's settings are how its sweep chose runs, not a config's: an option promoted from a
    race does not set race.max_seeds. `--overwrite` never follows a linked option directory or
    preset folder out of the config tree (it once deleted the yaml files it found there), and
    a name too long for a file is refused as such."""
    evals = {"grpo_clip,1,64": [0.1, 0.2], "grpo_clip,2,64": [0.1, 0.6]}
    source = hydra_sweep(conf, tmp_path / "raced", ["+experiment=broad", "train_batch_size=64",
                                                     "race.max_seeds=3"], evals)
    assert OmegaConf.load(source / "0" / ".hydra" / "config.yaml").race.max_seeds == 3
    promotion = promote(collect([source]), 1, "best_eval_reward", "raced", conf_dir=conf)
    for option in promotion.options:
        assert "race" not in OmegaConf.to_container(OmegaConf.load(option)), option.read_text()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.yaml").write_text("mine: 1\n")
    (conf / "promoted" / "linked").symlink_to(elsewhere)
    with pytest.raises(ValueError, match="promoted/linked is a symbolic link: promote writes only"):
        promote(collect([source]), 1, "best_eval_reward", "linked", conf_dir=conf, overwrite=True)
    assert [p.name for p in elsewhere.iterdir()] == ["keep.yaml"]
    (conf / "experiment" / "promoted" / "x.yaml").symlink_to(elsewhere / "keep.yaml")
    with pytest.raises(ValueError, match="x.yaml is a symbolic link"):
        promote(collect([source]), 1, "best_eval_reward", "x", conf_dir=conf, overwrite=True)
    assert (elsewhere / "keep.yaml").read_text() == "mine: 1\n"
    with pytest.raises(SystemExit, match="--name is 300 characters long; give a name of at most 100"):
        main(["promote", "--sweep", str(source), "--top-k", "1", "--name", "n" * 300,
              "--conf-dir", str(conf)])
