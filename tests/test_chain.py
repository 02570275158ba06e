"""The study chain (``python -m chain``): the stages in the assignment's order, winners read
from the latest sweep of each earlier stage (best validation reward, collapsed and diverged runs
left out, ties reported), overrides winning, the default where nothing has results, resuming at
the first unfinished stage. Crafted sweep directories (files as the trainer and Hydra write
them) where no training is needed; real runs of the tiny model for the carried learning rate and
for resuming."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from scipy import stats
from sweep_factory import BASE, write_matching_outcomes

from analysis.decisions.ranking import BEST_CRITERION, launch_variance, planned_design, rank
from analysis.outputs.promote import promote
from analysis.readers.collect import collect
from analysis.readers.synthetic import write_multirun, write_run
from chain.__main__ import budget_lines, confirm_last, planned_configs
from chain.__main__ import main as chain_main
from chain.plan import StagePlan, UserOverrides, compose_stage, plan_stage, winner_lookup
from chain.stages import ConfirmStage, load_chain
from grpo.run.driver import DRIVER_ENV

ROOT = Path(__file__).resolve().parents[1]
CPU = ("model=tiny", "data=toy", "rollout=hf")
# a real stage on the tiny model: a few steps, evaluated at steps 1 and 3 on 16 questions
SHORT = ("n_grpo_steps=4", "eval.eval_every=2", "eval.n_examples=16",
         "checkpoint.checkpoint_every=2")
# crafted runs: the batch plan of the tiny recipe's rollout batch (64)
CRAFTED = {**BASE, "rollout_batch_size": 64, "train_batch_size": 64}


def chain(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m chain *args`` (stdout and stderr kept apart)."""
    return subprocess.run([sys.executable, "-m", "chain", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def craft(out: Path, experiment: str, jobs: Sequence[tuple[Mapping[str, Any], Sequence[float],
                                                             str]],
          groups: Mapping[str, str] | None = None, stamp: str = "2025-01-01_00-00-00",
          base: Mapping[str, Any] = CRAFTED) -> Path:
    """A sweep of ``experiment`` under ``out``: per job its overrides, eval rewards (one per
    GRPO step from step 1, after the step-0 evaluation of the initial policy at 0.05) and final
    status; ``groups`` are the config-group choices every run had; ``base`` the config every
    run had besides its overrides."""
    sweep = out / experiment / stamp
    keys = list(dict.fromkeys(k for overrides, _, _ in jobs for k in overrides))
    write_multirun(sweep, [f"{k}={','.join(dict.fromkeys(str(o[k]) for o, _, _ in jobs))}"
                           for k in keys], config=base)
    for num, (overrides, rewards, status) in enumerate(jobs):
        rows = [{"step": s, "time/elapsed_s": 10.0 * (s + 1), "eval/reward": r}
                for s, r in enumerate([0.05, *rewards])]
        choices = {**(groups or {}), **{k: str(v) for k, v in overrides.items()
                                        if k in ("loss", "normalization", "std_norm", "prompt")}}
        write_run(sweep / str(num), overrides, rows,
                  {"status": status, "last_step": len(rows) - 1, "n_grpo_steps": len(rows)},
                  base={**base, "experiment_name": experiment}, choices=choices)
    return sweep


def plans(out: Path, *overrides: str) -> dict[str, list[str]]:
    """Each stage's plan lines, from the sweeps under ``out``."""
    cs336 = load_chain("cs336")
    user = UserOverrides.parse([*CPU, f"paths.output_root={out}", *overrides])
    lookup = winner_lookup(cs336, user)
    return {stage.experiment: plan_stage(cs336, i, user, lookup).lines
            for i, stage in enumerate(cs336.stages)}


def test_chain_follows_the_assignment() -> None:
    cs336 = load_chain("cs336")
    assert [(s.experiment, s.decides, s.off_policy_only) for s in cs336.stages] == [
        ("lr_sweep", ("learning_rate",), False),
        ("baselines", ("loss",), False),
        ("length_norm", ("normalization",), False),
        ("std_norm", ("std_norm",), False),
        ("off_policy_broad", ("off_policy.epochs", "train_batch_size", "loss"), False),
        ("off_policy_focused", ("off_policy.epochs", "train_batch_size", "loss"), False),
        ("clip_ablation", ("loss",), True),
        ("prompt_ablation", ("prompt",), False),
    ]


@pytest.mark.parametrize(("text", "error"), [
    ("stages:\n  - experiment: lr_sweep\n    decide: [learning_rate]\n",
     "stages[0]: unknown key(s) decide; a stage has experiment, decides, off_policy_only"),
    ("stages:\n  - experiment: lr_sweeps\n    decides: [learning_rate]\n",
     "stages[0]: experiment='lr_sweeps' is not a preset of"),
    ("stages:\n  - experiment: lr_sweep\n    decides: []\n",
     "stages[0] (lr_sweep): `decides` must be a non-empty list of keys"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n    race_max_seeds: 1\n",
     "stages[0] (lr_sweep): `race_max_seeds` must be an integer >= 2"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n    off_policy_only: \"no\"\n",
     "stages[0] (lr_sweep): `off_policy_only` must be true or false, not 'no'"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n  top_k: 0\n  seeds: 2\n",
     "confirm: top_k is 0; give how many configs of the sweep's ranking to confirm, at least 1"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n  top_k: 1\n  seeds: 0\n",
     "confirm: seeds is 0; give how many fresh seeds"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n  top_k: 1\n  seeds: 2\n  retrain: false\n",
     "confirm: seeds with retrain: false: the sweep's own final models are evaluated"),
    *((f"stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n  {body}\n", error)
      for body, error in (
          ("top_k: -1\n  seeds: 2", "confirm: top_k is -1; give how many configs"),
          ("top_k: x\n  seeds: 2", "confirm: top_k is x; give how many configs"),
          ("top_k: .nan\n  seeds: 2", "confirm: top_k is nan; give how many configs"),
          ("top_k: 1\n  seeds: x", "confirm: seeds is x; give how many fresh seeds each finalist "
           "is trained with, a whole number at least 1"),
          ("top_k: 1\n  seeds: .nan", "confirm: seeds is nan; give how many fresh seeds"),
          ("top_k: 1\n  seeds: 2.5", "confirm: seeds is 2.5; give how many fresh seeds"),
          ("top_k: 1\n  seeds: 2\n  placebo: 'yes'", "confirm.placebo must be true or false, not 'yes'"),
          # unquoted, YAML 1.1 reads these as booleans: refused all the same, not a placebo arm
          ("top_k: 1\n  seeds: 2\n  placebo: yes", "confirm.placebo must be true or false, not "
           "yes (which YAML 1.1 reads as true: write true)"),
          ("top_k: 1\n  seeds: 2\n  placebo: On", "confirm.placebo must be true or false, not On"),
          ("top_k: 1\n  retrain: no", "confirm.retrain must be true or false, not no (which YAML "
           "1.1 reads as false: write false)"),
          ("top_k: 1\n  retrain: false\n  placebo: true", "confirm: placebo: true with retrain: "
           "false: a placebo arm is trained"))),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n"
     "confirm: {top_k: 1, seeds: 2, placebo: off}\n", "confirm.placebo must be true or false, not off "),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n  top: 1\n",
     "`confirm` must be a mapping of top_k, seeds, retrain"),
    ("stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirms: {}\n",
     "unknown key(s) confirms; a chain has stages, budgets and confirm"),
])
def test_a_bad_chain_names_the_key(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "chain").mkdir()
    (tmp_path / "experiment").symlink_to(ROOT / "conf" / "experiment")
    (tmp_path / "chain" / "bad.yaml").write_text(text)
    with pytest.raises(ValueError, match=error.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        load_chain("bad", tmp_path)


def test_a_chain_may_end_with_a_confirmation_of_its_last_stage(tmp_path: Path) -> None:
    (tmp_path / "chain").mkdir()
    (tmp_path / "experiment").symlink_to(ROOT / "conf" / "experiment")
    (tmp_path / "chain" / "c.yaml").write_text(
        "stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n"
        "confirm:\n  top_k: 2\n  seeds: 3\n")
    assert load_chain("c", tmp_path).confirm == ConfirmStage(2, 3, True)
    (tmp_path / "chain" / "c.yaml").write_text(
        "stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n"
        "confirm:\n  top_k: 1\n  retrain: false\n")
    assert load_chain("c", tmp_path).confirm == ConfirmStage(1, None, False)
    assert load_chain("cs336").confirm is None, "the assignment's chain ends at its last study"


def toy_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, confirm: str) -> None:
    """`python -m chain --chain t`: lr_sweep alone, then its pick confirmed (``confirm``: the
    yaml's block), the chain's yaml read from ``tmp_path``."""
    (tmp_path / "conf" / "chain").mkdir(parents=True)
    (tmp_path / "conf" / "experiment").symlink_to(ROOT / "conf" / "experiment")
    (tmp_path / "conf" / "chain" / "t.yaml").write_text(
        f"stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\nconfirm:\n{confirm}")
    monkeypatch.setattr("chain.__main__.load_chain", lambda name: load_chain(name, tmp_path / "conf"))


TOY = (*CPU, "data.holdout_size=8", "n_grpo_steps=4", "eval.eval_every=2", "eval.n_examples=16",
       "logging.wandb_mode=disabled")


def finished_toy_sweep(out: Path, rewards: Mapping[float, float]) -> Path:
    """A finished lr_sweep of the tiny model on the toy task (:data:`TOY`), one seed a learning
    rate: each run's config composed as its job's, its evaluations at steps 0, 2, 4 (the late
    ones ``rewards[lr]``) with per-problem outcomes naming the 16 validation pairs."""
    from hydra import compose, initialize_config_dir

    from grpo.data.datasets import load_examples, run_data_config
    from grpo.run.outcomes import (
        EvalOutcomes,
        problem_fingerprints,
        problems_digest,
        write_outcomes,
    )

    sweep = out / "lr_sweep" / "2025-01-01_00-00-00"
    write_multirun(sweep, [f"learning_rate={','.join(map(str, rewards))}"])
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        for job, (lr, reward) in enumerate(rewards.items()):
            cfg = compose("config", overrides=["+experiment=lr_sweep", *TOY, f"learning_rate={lr}",
                                               f"paths.output_root={out}"], return_hydra_config=True)
            run = sweep / str(job)
            (run / ".hydra").mkdir(parents=True)
            plain = OmegaConf.to_container(cfg, resolve=False)
            choices = plain.pop("hydra")["runtime"]["choices"]
            OmegaConf.save(OmegaConf.create(plain), run / ".hydra" / "config.yaml")
            OmegaConf.save(OmegaConf.create([f"learning_rate={lr}"]), run / ".hydra" / "overrides.yaml")
            OmegaConf.save(OmegaConf.create({"hydra": {"runtime": {"choices": choices}}}),
                           run / ".hydra" / "hydra.yaml")
            evaluated = load_examples(run_data_config(
                OmegaConf.to_container(cfg.data, resolve=True), 16), "validation")
            rows = []
            for step, value in ((0, 0.0), (2, reward), (4, reward)):
                rows.append({"step": step, "eval/reward": value, "time/elapsed_s": 1.0 + step})
                right = round(value * len(evaluated))
                write_outcomes(run, EvalOutcomes(
                    step, 1, problems_digest(evaluated),
                    (1.0,) * right + (0.0,) * (len(evaluated) - right),
                    problems=problem_fingerprints(evaluated)))
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            (run / "status.json").write_text(json.dumps(
                {"status": "completed", "last_step": 4, "n_grpo_steps": 4}))
    return sweep


def test_a_confirm_stage_without_held_out_problems_is_refused_before_any_stage(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    toy_chain(tmp_path, monkeypatch, "  top_k: 1\n  seeds: 2\n")
    out = tmp_path / "out"
    for dry in ([], ["dry_run=true"]):
        assert chain_main(["--chain", "t", *CPU, f"paths.output_root={out}", *dry]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "error: the chain's confirm block confirms lr_sweep's pick on held-out problems, but "
            "its toy data holds out no pair (data.holdout_size=0): give data.holdout_size=N on "
            "the chain's command line (each stage then keeps N pairs out of its training and "
            "evaluation), or drop `confirm` from the chain's yaml", "nothing was run"]
        assert not out.exists()


def test_a_confirm_stage_of_more_configs_than_the_last_stage_plans_is_refused_before_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """lr_sweep plans 5 learning rates (its preset), 2 where the command line sweeps them, 1
    where it sets one: top_k 3 is refused before any stage runs where fewer are planned."""
    toy_chain(tmp_path, monkeypatch, "  top_k: 3\n  seeds: 2\n")
    out = tmp_path / "out"
    cfg = compose_stage(load_chain("t", tmp_path / "conf").stages[0], UserOverrides.parse(TOY))
    assert planned_configs(cfg, UserOverrides.parse(TOY)) == 5
    for given, planned in (("learning_rate=1e-4,3e-4", "2 configs"), ("learning_rate=1e-4", "1 config")):
        assert chain_main(["--chain", "t", *TOY, given, f"paths.output_root={out}"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: the chain's confirm block confirms the top 3 configs of lr_sweep, which plans "
            f"{planned}: give top_k {planned.split()[0]} or less in the `confirm` block of the "
            "chain's yaml", "nothing was run"]
        assert not out.exists()


def test_the_chain_s_dry_run_of_its_confirm_stage_is_the_confirmation_s_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture) -> None:
    """Before its last stage has run, the dry run says what the confirm stage will do; once it
    has finished, it is the confirmation's own dry run: the finalists, fresh seeds and held-out
    problems the report will show, its jobs priced; nothing written."""
    from analysis.outputs.confirm import plan_confirmation

    toy_chain(tmp_path, monkeypatch, "  top_k: 2\n  seeds: 2\n  placebo: true\n")
    out = tmp_path / "out"
    args = ["--chain", "t", *TOY, f"paths.output_root={out}", "dry_run=true"]
    assert confirm_last(load_chain("t", tmp_path / "conf"), UserOverrides.parse(args[2:]), True) == 0
    assert ("confirm lr_sweep's pick: its top 2 config(s) trained again with 2 fresh seed(s) each "
            "(4 runs, and 2 of the best one's config trained on reward=random: a placebo arm), "
            "evaluated on held-out problems (`python -m analysis confirm`; planned and priced once "
            "lr_sweep has finished)") in capfd.readouterr().out.splitlines()
    sweep = finished_toy_sweep(out, {3e-4: 0.25, 1e-3: 0.75, 3e-3: 0.5})
    before = sorted(out.rglob("*"))
    assert chain_main(args) == 0
    lines = capfd.readouterr().out.splitlines()
    record = plan_confirmation(sweep, 2, 2, True, [], placebo=True).record
    assert [f.label for f in record.finalists] == ["learning_rate=0.001", "learning_rate=0.003"]
    assert record.seeds == (1, 2), "the sweep's runs had seed 0"
    head = lines.index(f"stage 1/1 lr_sweep: finished: {sweep} (3 runs: 3 completed)")
    assert lines[head + 1].startswith("confirm lr_sweep's pick: its top 2 config(s) trained again "
                                      "with 2 fresh seed(s) each (4 runs, and 2 of")
    assert lines[head + 1].endswith("not passed on to it (it trains and measures each finalist as "
                                    "lr_sweep did): model=tiny data=toy rollout=hf "
                                    "data.holdout_size=8 n_grpo_steps=4 eval.eval_every=2 "
                                    "eval.n_examples=16")
    assert lines[head + 2] == (
        f"confirmation of {sweep}: {sweep}-confirm (trained again with fresh seeds 1, 2, beside a "
        "placebo arm (learning_rate=0.001 on reward=random (placebo)); 8 held-out problems, none "
        f"of them evaluated by {sweep})")
    assert "+promoted/confirm=top1,top2,placebo seed=1,2 " in lines[head + 3]
    assert "dry run: 6 jobs, nothing submitted" in lines
    # the chain's budget counts the confirmation, priced by its own dry run's estimate
    (cost,) = [line for line in lines if line.startswith("cost: 6 jobs, ")]
    priced = cost.split()[3]
    assert lines[-4:-1] == [
        f"  {'lr_sweep':<32}       -  of    -",
        "  " + f"{'confirm lr_sweep' + chr(39) + 's pick':<32}{priced:>8}  of    -  (in no study's budget)",
        f"  {'whole chain':<32}{priced:>8}  of    0"]
    assert sorted(out.rglob("*")) == before, "a dry run writes nothing"


def test_a_confirm_stage_the_finished_stage_cannot_give_is_refused_by_the_dry_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """top_k 4 of a stage that ranks 3 configs: the dry run says the confirmation's refusal in
    the yaml's words, counts it among what would be refused, and writes nothing."""
    toy_chain(tmp_path, monkeypatch, "  top_k: 4\n  seeds: 2\n")
    out = tmp_path / "out"
    sweep = finished_toy_sweep(out, {3e-4: 0.25, 1e-3: 0.75, 3e-3: 0.5})
    before = sorted(out.rglob("*"))
    assert chain_main(["--chain", "t", *TOY, f"paths.output_root={out}", "dry_run=true"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: confirm lr_sweep's pick: top_k 4, but {sweep} ranks 3 configs; give "
                   "top_k 3 or less (the `confirm` block of the chain's yaml)",
                   "error: 1 stage(s) would be refused as planned: confirm lr_sweep's pick (exit 2) "
                   "(their errors above); nothing was run"]
    assert sorted(out.rglob("*")) == before


def test_ties_are_reported_and_collapsed_runs_left_out(tmp_path: Path) -> None:
    """Two seeds per config: the seed variance pooled over the 4 ranked configs (4 degrees of
    freedom) decides which configs the data cannot tell from the best one."""
    out = tmp_path / "out"
    lr = craft(out, "lr_sweep", [
        ({"learning_rate": lr, "seed": seed}, rewards, status)
        for lr, per_seed, status in [
            (3e-6, ([0.25], [0.28125]), "completed"),
            (1e-5, ([0.5], [0.53125]), "completed"),
            (2e-5, ([0.484375], [0.546875]), "completed"),   # ties with 1e-5 (mean 0.515625)
            (3e-5, ([0.46875], [0.5]), "completed"),         # 0.03125 below the best
            (5e-5, ([0.9], [0.9]), "collapsed"),         # highest reward, but collapsed
            (1e-4, ([0.95], [0.95]), "diverged")]
        for seed, rewards in enumerate(per_seed)])
    ranking = rank(collect([lr]))
    assert ranking.best == "learning_rate=1e-05"
    # pooled variance: (3 x 0.00048828 + 0.0019531) / 4 = 0.00085449; a difference of two
    # 2-seed means has standard error sqrt(0.00085449) = 0.02923; the simultaneous intervals over
    # the 4 ranked configs: the studentized range q(0.95, 4, 4) = 5.757, / sqrt(2) = 4.071. 2e-05
    # and 1e-05 vary more than the pool: their own variance, Welch's (0.00048828 + 0.0019531) / 2,
    # on the Welch-Satterthwaite df 0.0012207^2 / (0.00024414^2 + 0.00097656^2) = 1.47, which
    # a 2-seed pair shrinks to 1 + 0.47^3 = 1.10 (rounded down to 1.1), q(0.95, 4, 1.1) / sqrt(2)
    # = 18.43: half-width 18.43 x sqrt(0.0012207) = 0.644, on the pair's own df (named: they are
    # not the seed variance line's 4)
    assert ranking.near_ties == {
        "learning_rate=2e-05": "not distinguishable from the best config: Δ +0.000 "
                               "[-0.644, +0.644] (simultaneous 95%, on the pair's own variance (1.1 df)), p 1 "
                               "(Tukey-adjusted 1)",
        "learning_rate=3e-05": "not distinguishable from the best config: Δ -0.031 "
                               "[-0.150, +0.088] (simultaneous 95%), p 0.35 (Tukey-adjusted 0.72)"}
    worse = ranking.uncertainty.against_best()[-1]
    assert (worse.config, worse.verdict) == ("learning_rate=3e-06", "worse")
    assert worse.diff == pytest.approx(-0.25) and worse.se == pytest.approx(0.029232, abs=1e-6)
    # p 0.0010 on 4 df; Tukey-adjusted over the 4 ranked configs
    assert worse.p_value < 0.0011 and worse.p_adjusted == pytest.approx(
        stats.studentized_range.sf(0.25 / worse.se * math.sqrt(2), 4, 4))
    assert ranking.excluded == {"learning_rate=5e-05": "collapsed",
                                "learning_rate=0.0001": "diverged"}

    # promote ranks the same way and reports the same near-ties and verdict
    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    promotion = promote(collect([lr]), 1, BEST_CRITERION, "lr_top1", conf_dir=conf)
    # the best config's own interval: the larger of the pool (0.00085449) and its own variance
    # (0.00048828) on its own 1 df: 0.515625 +- t(0.975, 1) x sqrt(0.00085449 / 2) = +-12.706 x 0.02067
    assert promotion.descriptions[0].startswith(
        "learning_rate=1e-05  [late_eval_reward=0.5156, 95% interval [0.253, 0.778]]")
    assert promotion.near_ties == ranking.near_ties
    preset = promotion.preset.read_text()
    assert ("# learning_rate=2e-05: not distinguishable from the best config: Δ +0.000 "
            "[-0.644, +0.644] (simultaneous 95%, on the pair's own variance (1.1 df)), p 1 "
            "(Tukey-adjusted 1) (top1)\n") in preset
    assert "# Could still be the best (3 configs, 95%, Hsu's comparisons with the best): learning_rate=1e-05; " in preset

    lines = plans(out)["baselines"]
    assert lines[0] == (f"  learning_rate=1e-05  carried from lr_sweep: best config "
                        f"learning_rate=1e-05 (late_eval_reward 0.5156 [0.2530, 0.7783] at step 1, "
                        f"4 of 6 configs ranked) of sweep {lr}")
    taken = ("learning_rate=1e-05 was taken (the highest late_eval_reward, first in config order "
             "on an exact tie: the chain must go on); override the key to choose")
    assert lines[1:3] == [
        f"    warning: lr_sweep: learning_rate=2e-05 is not distinguishable from the best config: "
        f"Δ +0.000 [-0.644, +0.644] (simultaneous 95%, on the pair's own variance (1.1 df)), p 1 "
        f"(Tukey-adjusted 1); {taken}",
        f"    warning: lr_sweep: learning_rate=3e-05 is not distinguishable from the best config: "
        f"Δ -0.031 [-0.150, +0.088] (simultaneous 95%), p 0.35 (Tukey-adjusted 0.72); {taken}"]
    assert lines[3] == ("    lr_sweep: Seed variance: seed sd 0.0292 (variance 0.000854) from "
                        "seeds in this sweep, pooled over the 4 configs with 2 or more (4 df).")
    assert lines[4].startswith("    lr_sweep: Verdicts: Tukey-Kramer simultaneous 95% intervals")
    # the runner-up is 2e-05 at the same mean: no amount of data resolves a difference of 0
    assert lines[5] == ("    lr_sweep: Could still be the best (3 configs, 95%, Hsu's comparisons with the best): learning_rate=1e-05; "
                        "learning_rate=2e-05; learning_rate=3e-05. What would decide: the observed "
                        "difference is 0: no number of seeds would resolve it.")
    assert lines[6:8] == [
        "    lr_sweep: learning_rate=5e-05 left out (a run collapsed)",
        "    lr_sweep: learning_rate=0.0001 left out (a run diverged)",
    ]
    # lr_sweep is the first stage with two seeds a config, but compared at step 1: a 200-step
    # stage cannot borrow its seed variance (the report would refuse it), and the plan says so
    # instead of carrying it (issue 52, item 8); nothing borrowed, no check seed
    assert lines[8:] == [f"  analysis.seed_variance_from: not lr_sweep's sweep: none: cannot "
                         f"borrow from {lr} (named by analysis.seed_variance_from): its compared "
                         "step is 1, this sweep's 200",
                         "  analysis.seed_variance_from: nothing to borrow (no earlier stage has 2 "
                         "or more seeds a config and this stage's model, data, validation "
                         "problems, evaluation steps and compared step): a one-dimensional "
                         "one-seed stage gives no verdict"]
    all_plans = plans(out)
    assert not any("check_seeds" in line for line in all_plans["off_policy_broad"])
    assert not any("check_seeds=1" in line for line in all_plans["std_norm"])
    assert plans(out, "analysis.check_seeds=0")["baselines"][-1] == (
        "  analysis.check_seeds=0  from the command line")


def test_a_seed_variance_is_carried_where_the_designs_match_and_refused_where_not(
        tmp_path: Path) -> None:
    """lr_sweep ran the tiny model on the toy task with 2 seeds a config, 3 steps evaluated each
    step, on the validation problems baselines will evaluate (outcome files of their digest):
    baselines (3 steps, evaluated each step: the same compared step and late evaluations)
    borrows its seed variance, the plan says so and the stage's launch carries it, with a check
    seed of its first config to test it. With 8 validation problems instead of all, the
    problems differ: the plan says that stage's sweep is refused and why, and carries nothing."""
    out = tmp_path / "out"
    same = ("n_grpo_steps=3", "eval.eval_every=1")
    cs336 = load_chain("cs336")
    cfg = compose_stage(cs336.stages[1], UserOverrides.parse([*CPU, f"paths.output_root={out}", *same]))
    design, at_step = planned_design([cfg])
    (digest,) = design.digests
    node = OmegaConf.to_container(cfg)
    del node["hydra"]
    base = OmegaConf.to_container(OmegaConf.create(node), resolve=True)  # as the runs record it
    rewards = {(1e-5, 0): [0.25, 0.375, 0.5], (1e-5, 1): [0.25, 0.5, 0.625],
               (3e-5, 0): [0.125, 0.25, 0.25], (3e-5, 1): [0.25, 0.25, 0.375]}
    lr = craft(out, "lr_sweep", [({"learning_rate": lr, "seed": seed}, r, "completed")
                                 for (lr, seed), r in rewards.items()], base=base)
    for run in range(4):
        write_matching_outcomes(lr / str(run), n_problems=8, digest=digest)
    ranking = rank(collect([lr]))
    assert (ranking.at_step, ranking.design.digests) == (at_step, design.digests) == (3, {digest})
    assert ranking.uncertainty.seeds.source == "seeds" and ranking.uncertainty.seeds.df == 2

    lines = plans(out, *same)["baselines"]
    (carried,) = [line for line in lines if "analysis.seed_variance_from" in line]
    assert carried.startswith(f"  analysis.seed_variance_from={lr}  the seed variance of lr_sweep, "
                              "the first stage with 2 or more seeds a config whose design matches "
                              "this stage's (seed sd 0.0589 (variance 0.00347) from seeds in "
                              "this sweep, pooled over the 2 configs with 2 or more (2 df)):")
    # by hand: each config's late values (steps 1-3) are 0.375 and 0.4583, 0.2083 and 0.2917: a
    # difference of 1/12 each, so a variance of (1/12)^2 / 2 = 0.00347 a config, pooled on 2 df
    assert "analysis.check_seeds=1  one swept key, one seed a config" in lines[-1]
    # what the stage launches borrows it, as its report will
    lookup = winner_lookup(cs336, UserOverrides.parse([*CPU, f"paths.output_root={out}", *same]))
    plan = plan_stage(cs336, 1, UserOverrides.parse([*CPU, f"paths.output_root={out}", *same]), lookup)
    assert f"analysis.seed_variance_from={lr}" in plan.overrides(UserOverrides.parse([]))
    assert launch_variance(lr, [cfg]).source == "borrowed"

    fewer = plans(out, *same, "eval.n_examples=8")["baselines"]
    refused = [line for line in fewer if "analysis.seed_variance_from" in line]
    assert refused[0].startswith(f"  analysis.seed_variance_from: not lr_sweep's sweep: none: cannot "
                                 f"borrow from {lr} (named by analysis.seed_variance_from): its "
                                 "validation problems (outcome digests) {" + digest[:12])
    assert refused[1].startswith("  analysis.seed_variance_from: nothing to borrow")
    assert not any("check_seeds" in line for line in fewer)


def test_pruned_configs_are_left_out_and_the_rest_compared_at_a_common_step(tmp_path: Path) -> None:
    """The winner of a pruned broad sweep: the configs the pruner stopped (however well they had
    started) are left out, like collapsed ones, and the others are compared at the largest step
    every one of them reached, so that a config is not ranked by steps another never trained."""
    out = tmp_path / "out"
    broad = craft(out, "off_policy_broad", [
        ({"off_policy.epochs": 1, "train_batch_size": 64}, [0.1, 0.3, 0.5], "completed"),
        ({"off_policy.epochs": 2, "train_batch_size": 64}, [0.1, 0.95], "pruned"),
        ({"off_policy.epochs": 4, "train_batch_size": 64}, [0.1, 0.2, 0.45, 0.99], "completed"),
        ({"off_policy.epochs": 4, "train_batch_size": 32}, [0.1, 0.6], "collapsed"),
    ], groups={"loss": "grpo_clip"})
    ranking = rank(collect([broad]))
    # epochs 1 stopped at step 3, epochs 4 (batch 64) at 4: both compared up to step 3, where
    # epochs 4 has the mean of 0.1, 0.2, 0.45 (its 0.99 at step 4 does not count) and epochs 1
    # that of 0.1, 0.3, 0.5
    assert ranking.at_step == 3
    assert ranking.best == "off_policy.epochs=1, train_batch_size=64"
    assert ranking.value("off_policy.epochs=4, train_batch_size=64") == pytest.approx(0.25)
    assert ranking.excluded == {"off_policy.epochs=2, train_batch_size=64": "pruned",
                                "off_policy.epochs=4, train_batch_size=32": "collapsed"}
    # one seed a config and one key left that varies: no seed variance, so the other config is
    # undecided, and could still be the best
    assert list(ranking.near_ties) == ["off_policy.epochs=4, train_batch_size=64"]
    assert ranking.near_ties["off_policy.epochs=4, train_batch_size=64"].startswith(
        "undecided against the best config: Δ -0.050 (none: one seed per config")
    prompt = plans(out)["prompt_ablation"]  # the best config overall is carried there
    assert (f"  off_policy.epochs=1  carried from off_policy_broad: best config "
            f"off_policy.epochs=1, train_batch_size=64 (late_eval_reward 0.3000 at step 3, 2 of 4 "
            f"configs ranked) of sweep {broad} (off_policy_focused has no results: no sweep under "
            f"{out / 'off_policy_focused'})") in prompt
    assert "    off_policy_broad: off_policy.epochs=2, train_batch_size=64 left out (a run pruned)" \
        in prompt


def test_a_config_whose_runs_did_not_reach_the_compared_step_is_named(tmp_path: Path) -> None:
    """A run cancelled at step 2 is not compared at step 4 (where the other completed): its
    config is neither ranked nor silently dropped from the plan."""
    out = tmp_path / "out"
    craft(out, "lr_sweep", [({"learning_rate": 3e-4}, [0.1, 0.3, 0.4, 0.5], "completed"),
                            ({"learning_rate": 1e-4}, [0.1, 0.9], "cancelled")])
    lines = plans(out)["baselines"]
    assert "    lr_sweep: learning_rate=0.0001 not compared (no run reached step 4: run " \
           "lr_sweep/2025-01-01_00-00-00/1 cancelled at step 2)" in lines


def test_the_near_ties_are_hsu_s_comparisons_with_the_best_not_tukey_s_pairs(
        tmp_path: Path) -> None:
    jobs = [({"learning_rate": lr, "seed": seed}, [reward], "completed")
            for lr, seed, reward in [(1e-5, 0, 0.48), (1e-5, 1, 0.52), (2e-5, 0, 0.37),
                                     (2e-5, 1, 0.55), (3e-5, 0, 0.10), (3e-5, 1, 0.20)]]
    ranking = rank(collect([craft(tmp_path, "lr_sweep", jobs)]))
    assert ranking.best == "learning_rate=1e-05"  # mean 0.50 over 0.46 and 0.15
    # pooled seed variance (0.0008 + 0.0162 + 0.005) / 3 = 0.00733 on 3 df: standard error of a
    # difference sqrt(0.00733) = 0.0856. Tukey's pairwise intervals (q(0.95, 3, 3) / sqrt(2) =
    # 4.18) cannot tell even 3e-05's 0.35 from the best (half-width 0.358, adjusted p 0.053), but
    # Hsu's comparisons with the best (one-sided Dunnett d = 2.94 for 2 comparisons on 3 df) bound
    # 3e-05's mean minus the best's by -0.350 + 2.94 x 0.0856 = -0.098 < 0: it cannot be the best.
    # 2e-05 against the best rests on the two configs' own variance, Welch's (0.0008 + 0.0162)
    # / 2 = 0.0085, larger than the pool, on the Welch-Satterthwaite df 0.0085^2 / (0.0004^2 +
    # 0.0081^2) = 1.1 (shrunk for a 2-seed pair to 1.001, rounded down to 1.0, named as the
    # pair's own): Tukey's interval, -0.040 -+ 1.76, is wider than two rewards can differ and is
    # written so
    assert ranking.near_ties == {
        "learning_rate=2e-05": "not distinguishable from the best config: Δ -0.040 "
                               "[-1.000, +1.000] (no information: wider than two rewards can "
                               "differ) (simultaneous 95%, on the pair's own variance (1 df)), "
                               "p 0.74 (Tukey-adjusted 0.91)"}
    bound = ranking.uncertainty.bounds["learning_rate=3e-05"]
    assert bound.critical == pytest.approx(2.9383, abs=1e-4)
    assert bound.upper == pytest.approx(-0.35 + 2.9383 * math.sqrt(0.022 / 3), abs=1e-4)
    assert bound.against == "learning_rate=1e-05"
    assert ranking.uncertainty.against_best()[1].verdict == "not distinguishable"  # Tukey's


def test_a_raced_stage_runs_its_sweep_as_a_race(tmp_path: Path) -> None:
    (tmp_path / "chain").mkdir()
    (tmp_path / "experiment").symlink_to(ROOT / "conf" / "experiment")
    (tmp_path / "chain" / "r.yaml").write_text(
        "stages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n    race_max_seeds: 3\n")
    (stage,) = load_chain("r", tmp_path).stages
    assert stage.race_max_seeds == 3
    plan = StagePlan(stage, 1, 1, tmp_path)
    # the user's overrides come last and win (race.max_seeds=null runs the plain grid)
    assert plan.overrides(UserOverrides.parse(["race.max_seeds=null"])) == [
        "+experiment=lr_sweep", "race.max_seeds=3", "race.max_seeds=null"]


def test_each_key_comes_from_the_latest_stage_with_results(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lr = craft(out, "lr_sweep", [({"learning_rate": 3e-4}, [0.5], "completed")])
    base = craft(out, "baselines", [({"loss": "no_baseline"}, [0.2], "completed"),
                                    ({"loss": "reinforce_with_baseline"}, [0.4], "completed")],
                 groups={"loss": "reinforce_with_baseline"})
    # the on-policy config (1, 64) is best; among the off-policy ones (2, 32) is
    grid = [((1, 64), 0.9), ((2, 32), 0.6), ((2, 64), 0.5), ((4, 16), 0.7)]
    broad = craft(out, "off_policy_broad", [
        ({"off_policy.epochs": e, "train_batch_size": t}, [r], "diverged" if t == 16 else
         "completed") for (e, t), r in grid], groups={"loss": "grpo_clip"})
    got = plans(out)
    # no results from length_norm or std_norm: their keys keep the stage's default
    # baselines has one seed a config and one key: no seed variance, no verdict; its second seed
    # for both configs is what would decide (priced at what its runs cost)
    assert got["std_norm"][2].startswith("    warning: baselines: loss=no_baseline is undecided "
                                         "against the best config: Δ -0.200 (none: one seed")
    assert got["std_norm"][3] == ("    baselines: Seed variance: none: one seed per config and one "
                                  "swept key (no additive model to measure it with); nothing "
                                  "borrowed (analysis.seed_variance_from is not set).")
    assert got["std_norm"][4].startswith(
        "    baselines: Undecided: no config-level verdict without a seed variance; a second seed "
        "for the best 2 configs (loss=reinforce_with_baseline; loss=no_baseline) would measure the "
        "seed variance (2 df): 2 more runs, about ")
    assert got["std_norm"][-1] == ("  analysis.seed_variance_from: nothing to borrow (no earlier "
                                   "stage has 2 or more seeds a config and this stage's model, "
                                   "data, validation problems, evaluation steps and compared "
                                   "step): a one-dimensional one-seed stage gives no verdict")
    assert got["std_norm"][5] == (
        f"  normalization=mean  the stage's default: no earlier stage that decides it has "
        f"results (length_norm has no results: no sweep under {out / 'length_norm'})")
    assert got["length_norm"][1].startswith(
        f"  loss=reinforce_with_baseline  carried from baselines: best config "
        f"loss=reinforce_with_baseline (late_eval_reward 0.4000 at step 1, 2 of 2 configs ranked) of "
        f"sweep {base}")
    # the off-policy sweeps decide the loss themselves (GRPO-Clip), not the baselines winner
    assert "  loss: not carried, this stage decides it" in got["off_policy_broad"]
    # clip_ablation: the best off-policy config of broad, since focused has no results
    clip = got["clip_ablation"]
    focused_missing = f"off_policy_focused has no results: no sweep under {out / 'off_policy_focused'}"
    assert (f"  off_policy.epochs=2  carried from off_policy_broad: best config "
            f"off_policy.epochs=2, train_batch_size=32 (late_eval_reward 0.6000 at step 1, 2 of 3 configs "
            f"ranked) of sweep {broad} ({focused_missing})") in clip
    assert any(line.startswith("  train_batch_size=32  carried from off_policy_broad") for line
               in clip)
    assert "    off_policy_broad: off_policy.epochs=4, train_batch_size=16 left out (a run " \
           "diverged)" in clip
    # the prompt ablation takes the best config overall (on-policy here) and the clip loss
    prompt = got["prompt_ablation"]
    assert any(line.startswith("  off_policy.epochs=1  carried from off_policy_broad: best "
                               "config off_policy.epochs=1, train_batch_size=64") for line in prompt)
    assert any(line.startswith("  loss=grpo_clip  carried from off_policy_broad") for line in prompt)
    # a sweep of one config is labelled by its experiment
    assert prompt[0] == (f"  learning_rate=0.0003  carried from lr_sweep: best config lr_sweep "
                         f"(late_eval_reward 0.5000 at step 1, 1 of 1 configs ranked) of sweep {lr}")

    # once focused has results, clip_ablation takes its best off-policy config instead
    focused = craft(out, "off_policy_focused", [
        ({"off_policy.epochs": 2, "train_batch_size": 64}, [0.8], "completed"),
        ({"off_policy.epochs": 1, "train_batch_size": 64}, [0.7], "completed")],
        groups={"loss": "grpo_clip"})
    clip = plans(out)["clip_ablation"]
    assert f"  train_batch_size=64  carried from off_policy_focused: best config " \
           f"off_policy.epochs=2 (late_eval_reward 0.8000 at step 1, 1 of 1 configs ranked) of sweep " \
           f"{focused}" in clip


def test_override_wins_and_the_plan_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    lr = craft(out, "lr_sweep", [({"learning_rate": 3e-4}, [0.5], "completed")])
    lines = plans(out, "learning_rate=1e-4")["length_norm"]
    assert lines[0] == ("  learning_rate=0.0001  from the command line (an override wins; not "
                        f"carried: lr_sweep's best learning_rate=0.0003 from {lr})")


def test_no_results_and_resume_in_the_dry_run(tmp_path: Path) -> None:
    """lr_sweep finished; baselines' latest sweep has a failed run and was started by the chain
    with the overrides it would use now: the dry run skips lr_sweep and resumes baselines in
    that sweep directory; length_norm's predecessor has no results, so it keeps the default."""
    out = tmp_path / "out"
    lr = craft(out, "lr_sweep", [({"learning_rate": 3e-4}, [0.5], "completed")])
    args = [*CPU, f"paths.output_root={out}"]
    base = craft(out, "baselines", [({"loss": "no_baseline"}, [0.2], "failed"),
                                    ({"loss": "reinforce_with_baseline"}, [0.4], "completed")],
                 stamp="2025-01-02_00-00-00")
    (base / "chain.json").write_text(json.dumps({"overrides": [
        "+experiment=baselines", "learning_rate=0.0003", *args, "dry_run=true"]}))
    done = chain("--stages", "lr_sweep,baselines,length_norm", *args, "dry_run=true")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == f"stage 1/8 lr_sweep: finished: {lr} (1 runs: 1 completed)"
    assert lines[2:6] == [
        "stage 2/8 baselines:",
        f"  learning_rate=0.0003  carried from lr_sweep: best config lr_sweep "
        f"(late_eval_reward 0.5000 at step 1, 1 of 1 configs ranked) of sweep {lr}",
        "  analysis.seed_variance_from: nothing to borrow (no earlier stage has 2 or more seeds a "
        "config and this stage's model, data, validation problems, evaluation steps and compared "
        "step): a one-dimensional one-seed stage gives no verdict",
        f"  resuming its unfinished sweep {base} (2 runs: 1 completed, 1 failed)"]
    assert lines[6].endswith(f"'hydra.sweep.dir=${{paths.output_root}}/${{experiment_name}}/"
                             f"{base.name}'")
    # length_norm takes baselines' best config so far (the failed run's evaluations count)
    stage3 = lines.index("stage 3/8 length_norm:")
    assert lines[stage3 + 2] == (
        f"  loss=reinforce_with_baseline  carried from baselines: best config "
        f"loss=reinforce_with_baseline (late_eval_reward 0.4000 at step 1, 2 of 2 configs ranked) of "
        f"sweep {base}")
    assert not list(out.glob("length_norm")), "a dry run wrote nothing"


def test_chain_refuses_what_it_sets_and_typos(tmp_path: Path) -> None:
    done = chain("experiment_name=x", "learning_rat=1e-5", f"paths.output_root={tmp_path}")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: experiment_name=x: the chain sets experiment_name for each stage",
        "error: learning_rat=1e-5: no config or config group defines 'learning_rat'; did you "
        "mean learning_rate=1e-5?",
        "nothing was run"]
    assert not list(tmp_path.iterdir())


def test_a_stage_still_running_is_followed_only_by_the_chain_s_driver_with_its_overrides(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A stage whose sweep has a running run: a chain launched attached is refused (follow it,
    run the chain again when it has ended), and so is the chain's own driver where the sweep
    ran with other overrides (its chain.json); only the driver asking what the sweep ran with
    follows it (the slow test_detach test of a requeued chain driver)."""
    out = tmp_path / "out"
    sweep = craft(out, "lr_sweep", [({"learning_rate": 3e-4}, [0.1], "running")])
    args = ["--stages", "lr_sweep", *CPU, f"paths.output_root={out}"]
    (sweep / "chain.json").write_text(json.dumps(
        {"overrides": ["+experiment=lr_sweep", *args[2:], "seed=1"]}))
    refusal = (f"error: stage 1/8 lr_sweep: its sweep {sweep} is still running{{}} (1 runs: 1 "
               f"running); follow it with `make watch SWEEP={sweep}` and run the chain again when "
               "it has ended")
    assert chain_main(args) == 1
    assert capsys.readouterr().err.splitlines()[-1] == refusal.format("")
    monkeypatch.setenv(DRIVER_ENV, str(tmp_path / "chains" / "cs336" / "driver.json"))
    assert chain_main(args) == 1
    assert capsys.readouterr().err.splitlines()[-1] == refusal.format(
        " with other overrides (see its chain.json)")
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "chain.json", "multirun.yaml"]


@pytest.mark.slow
def test_second_stage_carries_the_learning_rate_of_a_real_sweep_and_resumes(
        tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "out"
    common = [*CPU, f"model.path={tiny_model_dir}", *SHORT, f"paths.output_root={out}"]
    # a real lr sweep of the tiny model: 3e-4 learns, 3e-1 does not
    swept = subprocess.run([sys.executable, str(ROOT / "launch.py"), "-m", "+experiment=lr_sweep",
                            "learning_rate=3e-4,3e-1", *common], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert swept.returncode == 0, swept.stderr[-3000:]
    (lr,) = (out / "lr_sweep").iterdir()
    ranking = rank(collect([lr]))
    assert ranking.best == "learning_rate=0.0003", ranking.table

    dry = chain("--stages", "baselines", *common, "dry_run=true")
    assert dry.returncode == 0, dry.stderr
    print(dry.stdout)  # the report shows it
    lines = dry.stdout.splitlines()
    assert lines[1] == "stage 2/8 baselines:"
    assert lines[2].startswith("  learning_rate=0.0003  carried from lr_sweep: best config "
                               "learning_rate=0.0003 (late_eval_reward ")
    assert lines[2].endswith(f", 2 of 2 configs ranked) of sweep {lr}")
    # then how sure the pick is: one seed a config and one swept key, so no seed variance and no
    # verdict (3e-1 is undecided, a warning line says), and what a second seed would cost
    launch = next(i for i, line in enumerate(lines) if line.startswith("  $ python launch.py"))
    (source,) = [line for line in lines[3:launch] if "Seed variance" in line]
    assert source == ("    lr_sweep: Seed variance: none: one seed per config and one swept key "
                      "(no additive model to measure it with); nothing borrowed "
                      "(analysis.seed_variance_from is not set).")
    (undecided,) = [line for line in lines[3:launch] if "Undecided" in line]
    assert ("a second seed for the best 2 configs (learning_rate=0.0003; learning_rate=0.3) would "
            "measure the seed variance (2 df): 2 more runs, about ") in undecided
    assert undecided.endswith("CPU-hours at what their runs cost here.")
    assert lines[launch].startswith("  $ python launch.py -m +experiment=baselines "
                                    "learning_rate=0.0003 model=tiny")
    assert lines[launch - 1].startswith("  analysis.seed_variance_from: nothing to borrow")
    assert all(line.startswith("    ") for line in lines[3:launch - 1])
    assert "dry run: 2 jobs, nothing submitted" in lines
    assert "warning: paths.output_root" not in dry.stderr
    assert not (out / "baselines").exists()

    overridden = chain("--stages", "baselines", *common, "learning_rate=1e-4", "dry_run=true")
    assert overridden.returncode == 0, overridden.stderr
    assert (f"  learning_rate=0.0001  from the command line (an override wins; not carried: "
            f"lr_sweep's best learning_rate=0.0003 from {lr})") in overridden.stdout.splitlines()

    # the chain runs lr_sweep (finished: skipped) and baselines for real
    ran = chain("--stages", "lr_sweep,baselines", *common)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f"stage 1/8 lr_sweep: finished: {lr} (2 runs: 2 completed)" in ran.stdout
    (base,) = (out / "baselines").iterdir()
    assert json.loads((base / "chain.json").read_text())["carried"] == [
        {"key": "learning_rate", "value": 0.0003, "stage": "lr_sweep", "sweep": str(lr)}]
    for run in ("0", "1"):
        config = (base / run / ".hydra" / "config.yaml").read_text()
        assert "learning_rate: 0.0003\n" in config
    assert "chain cs336: lr_sweep, baselines finished" in ran.stdout

    # a crash of one run: the re-run resumes baselines in its sweep, the other run is kept
    status = json.loads((base / "1" / "status.json").read_text())
    (base / "1" / "status.json").write_text(json.dumps({**status, "status": "failed",
                                                        "reason": "killed"}))
    kept = (base / "0" / "metrics.jsonl").read_text()
    again = chain("--stages", "lr_sweep,baselines", *common)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"  resuming its unfinished sweep {base} (2 runs: 1 completed, 1 failed)" \
        in again.stdout
    assert [p.name for p in (out / "baselines").iterdir()] == [base.name]
    assert json.loads((base / "1" / "status.json").read_text())["status"] == "completed"
    assert (base / "0" / "metrics.jsonl").read_text() == kept
    # all finished: a third run has nothing to do
    third = chain("--stages", "lr_sweep,baselines", *common)
    assert third.returncode == 0 and f"stage 2/8 baselines: finished: {base}" in third.stdout


def test_the_dry_run_totals_the_chain_beside_the_handouts_budget_per_study() -> None:
    chain = load_chain("cs336")
    budgets = dict(chain.budgets)
    assert budgets == {"grpo_learning_rate": 6, "grpo_baselines": 2, "grpo_length_normalization": 2,
                       "grpo_group_standard_deviation": 2, "grpo_off_policy_sweep": 12,
                       "grpo_off_policy_clip_ablation": 2, "grpo_prompt_ablation": 2}
    assert sum(budgets.values()) == 28
    # the broad and focused off-policy sweeps answer one problem: their estimates add up
    estimates = {i: {"planned": 1.5 * (i + 1), "unit": "GPU-hours"} for i in range(8)}
    estimates[0] = None  # a stage that wrote no estimate (finished, or refused) is not priced
    lines = budget_lines(chain, estimates)
    assert lines[1].split() == ["grpo_learning_rate", "-", "of", "6"]
    assert lines[2].split() == ["grpo_baselines", "3.00", "of", "2", "1.5x", "the", "budget"]
    assert lines[5].split() == ["grpo_off_policy_sweep", "16.50", "of", "12", "1.4x", "the", "budget"]
    assert lines[-1].split() == ["whole", "chain", "52.50", "of", "28", "1.9x", "the", "budget"]
    within = budget_lines(chain, {1: {"planned": 0.5, "unit": "GPU-hours"}})
    assert within[2].split()[1:] == ["0.50", "of", "2", "within", "budget"]
    assert within[-1].split()[2:] == ["0.50", "of", "28", "within", "budget"]


def test_the_dry_run_totals_the_confirm_stage_beside_the_studies() -> None:
    """A chain ending with a confirmation: its row, priced by the confirmation's own dry run
    (the sweep estimate `python -m analysis confirm --dry-run` prints), in no study's budget but
    in the whole chain's total; before its last stage has finished it is not priced yet."""
    chain = replace(load_chain("cs336"), confirm=ConfirmStage(1, 3))
    lines = budget_lines(chain, {1: {"planned": 3.0, "unit": "GPU-hours"}},
                         {"planned": 4.5, "unit": "GPU-hours"})
    assert lines[-2].split() == ["confirm", "prompt_ablation's", "pick", "4.50", "of", "-", "(in",
                                 "no", "study's", "budget)"]
    assert lines[-1].split() == ["whole", "chain", "7.50", "of", "28", "within", "budget"]
    unpriced = budget_lines(chain, {1: {"planned": 3.0, "unit": "GPU-hours"}})
    assert unpriced[-2].split()[3:] == ["-", "of", "-", "(in", "no", "study's", "budget;",
                                        "priced", "once", "its", "last", "stage", "has", "finished)"]
    assert unpriced[-1].split()[2] == "3.00"


def test_a_chain_names_a_budget_for_every_study(tmp_path: Path) -> None:
    (tmp_path / "chain").mkdir()
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "lr_sweep.yaml").write_text("# @package _global_\n")
    (tmp_path / "chain" / "c.yaml").write_text(
        "budgets: {a: 1}\nstages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n"
        "    study: b\n")
    with pytest.raises(ValueError, match="no budget for the stages' study b"):
        load_chain("c", tmp_path)
    (tmp_path / "chain" / "c.yaml").write_text(
        "budgets: {b: -1}\nstages:\n  - experiment: lr_sweep\n    decides: [learning_rate]\n")
    with pytest.raises(ValueError, match="GPU-hours"):
        load_chain("c", tmp_path)


@pytest.mark.slow
def test_the_readme_chain_dry_run_prints_every_stage_and_the_budget(tmp_path: Path) -> None:
    """README's `python -m chain model=tiny data=toy rollout=hf dry_run=true`: it once stopped
    at stage 5 (the off-policy presets took the toy recipe's rollout batch of 64, below their
    train batches); every stage is planned and priced, a stage whose own dry run refuses it is
    said at the end (prompt_ablation's r1_zero prompt on the tiny model's alphabet), and the
    chain's budget lines follow."""
    out = chain(*CPU, f"paths.output_root={tmp_path}", "dry_run=true")
    for n, stage in enumerate(load_chain("cs336").stages, 1):
        assert f"stage {n}/8 {stage.experiment}:" in out.stdout, out.stdout[-3000:]
    assert "must be <= rollout_batch_size" not in out.stderr
    assert "whole chain" in out.stdout and "grpo_off_policy_sweep" in out.stdout
    assert out.returncode == 2 and ("error: 1 stage(s) would be refused as planned: stage 8/8 "
                                    "prompt_ablation (exit 2)") in out.stderr
    assert not list(tmp_path.rglob("*")), "a dry run wrote nothing"


def test_an_unwritable_stage_directory_and_a_sweep_the_chain_did_not_start(tmp_path: Path) -> None:
    """A stage directory that cannot be made ends the chain in one line (it was a traceback);
    an unfinished sweep without the chain's record is said to be one, not one that "ran with
    other overrides"."""
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    out = chain("--stages", "lr_sweep", *CPU, f"paths.output_root={blocked}")
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert f"error: cannot write {blocked}" in out.stderr
    sweep = craft(tmp_path / "out", "lr_sweep", [({"learning_rate": 3e-4}, [0.5], "failed")])
    dry = chain("--stages", "lr_sweep", *CPU, f"paths.output_root={tmp_path / 'out'}", "dry_run=true")
    assert (f"its latest sweep {sweep} is unfinished (1 runs: 1 failed) and has no chain.json (the "
            "chain did not start it, or its record is unreadable)") in dry.stdout, dry.stdout[-2000:]


@pytest.mark.slow
def test_a_tiny_chain_ends_with_its_confirmation_as_its_dry_run_said(
        tmp_path: Path, tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture) -> None:
    """One stage (lr_sweep of one learning rate, 2 steps of the tiny model), then its pick
    confirmed with 2 fresh seeds and a placebo arm: the dry run's promise (2 runs and 2 of a
    placebo) is what ran, on held-out pairs no evaluation of the stage read, and the summary
    ends with the confirmed figure; the same command again trains nothing."""
    from analysis.readers.confirmation import confirmation_dir, confirmed_runs, read_record

    toy_chain(tmp_path, monkeypatch, "  top_k: 1\n  seeds: 2\n  placebo: true\n")
    out = tmp_path / "out"
    args = ["--chain", "t", *CPU, f"model.path={tiny_model_dir}", "data.holdout_size=8",
            "n_grpo_steps=2", "eval.eval_every=1", "eval.n_examples=16",
            "checkpoint.checkpoint_every=2", "logging.wandb_mode=disabled",
            "learning_rate=3e-4", f"paths.output_root={out}"]
    assert confirm_last(load_chain("t", tmp_path / "conf"),
                        UserOverrides.parse([*args[2:], "dry_run=true"]), True) == 0
    assert ("its top 1 config(s) trained again with 2 fresh seed(s) each (2 runs, and 2 of the "
            "best one's config trained on reward=random: a placebo arm)") in capfd.readouterr().out
    assert chain_main(args) == 0, capfd.readouterr().err[-3000:]
    ran = capfd.readouterr().out
    (sweep,) = [p for p in (out / "lr_sweep").iterdir() if not p.name.endswith("-confirm")]
    ranking = rank(collect([sweep]))
    target = confirmation_dir(sweep, True)
    record = read_record(target)
    assert [f.label for f in record.finalists] == [ranking.best] and record.seeds == (1, 2)
    runs = confirmed_runs(target, record)
    assert sorted((r.finalist == record.placebo, r.seed) for r in runs) == [
        (False, 1), (False, 2), (True, 1), (True, 2)]
    assert all(r.status == "completed" and r.outcomes is not None for r in runs)
    held = {p for r in runs for p in r.outcomes.problems}
    evaluated = {p for f in sweep.glob("*/eval_outcomes/*.json")
                 for p in json.loads(f.read_text())["problems"]}
    assert len(held) == 8 and len(evaluated) == 16 and not held & evaluated
    assert (out / "lr_sweep" / target.name).is_dir(), "beside the stage's sweep"
    section = ran[ran.index("## Confirmed"):]
    assert "each with 2 fresh seeds (1, 2: none of this sweep's runs used them)" in section
    assert f"Placebo: {ranking.best} on reward=random (placebo)" in section
    (summary,) = [line for line in ran.splitlines() if line.startswith("chain t: its final config")]
    assert summary.startswith(f"chain t: its final config {ranking.best}: confirmed reward ")
    assert "on 8 held-out problems, 2 fresh seeds; selection " in summary
    logged = {r.run_dir.name: (r.run_dir / "metrics.jsonl").read_text() for r in runs}
    assert chain_main(args) == 0
    again = capfd.readouterr().out
    assert f"stage 1/1 lr_sweep: finished: {sweep}" in again
    assert "4 finished (not submitted)" in again
    assert {r.run_dir.name: (r.run_dir / "metrics.jsonl").read_text() for r in runs} == logged
