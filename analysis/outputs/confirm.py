"""Confirm a sweep's pick on problems and seeds that played no part in choosing it:

    python -m analysis confirm --sweep S --top-k N --seeds M [--placebo] [--no-retrain] [--dry-run]
        [overrides]

Every figure a sweep's report prints of its winner was measured on the problems and the seeds that
chose it, and so reads high (the winner's curse: the pick of the best of 9 equal configs reads
+1.7 points above its truth with one seed, +1.0 with three, ``bench/confirm_calibration.py``). A
confirmation measures the top ``N`` configs of S's ranking (its order: the ranking the report,
promote and the chain pick by) again:

* **trained again** (the default): each finalist is trained as S trained it (its config, and S's
  steps, evaluation, health guards and metric) with ``M`` seeds no run of S used (the smallest
  above S's largest), and each final model is evaluated on held-out problems (``confirm.enabled``:
  MATH's validation problems after the first ``eval.n_examples``, up to ``confirm.n_examples``; the
  toy's ``data.holdout_size`` pairs, which S must have held out of its training and evaluation),
  ``confirm.samples_per_problem`` responses each;
* **not trained again** (``--no-retrain``): S's own final models of the finalists are evaluated on
  the held-out problems alone (``confirm.policy_from``): cheaper, and it removes the problems'
  part of the curse, not the seeds'.

With ``--placebo`` (retraining only) a placebo arm is trained beside the finalists: the best
finalist's config on ``reward=random`` (each response rewarded 1 with probability ``reward.p``,
whatever its answer), with the same fresh seeds, evaluated on the same held-out problems; the
Confirmed section then says how far each finalist stands above it and what it gained by itself
over the pre-RL evaluation (:mod:`analysis.stats.placebo`).

The confirmation is a sweep of its own beside S (``<S>-confirm``, ``<S>-confirm-no-retrain``:
:func:`analysis.readers.confirmation.confirmation_dir`), launched as any sweep through
``launch.py -m`` (:func:`grpo.run.launching.launch_sweep`): the overrides after the options choose
where its jobs run (``cluster=slurm``, ``cluster.detach=true``) and set ``confirm.n_examples`` and
``confirm.samples_per_problem``; nothing that defines a config or how S measured it may be
overridden. Its finalists are the options of a config group written into its own directory
(``<C>/conf/promoted/confirm/top1.yaml``, passed with ``--config-dir``: nothing is written into
the project's ``conf/``), each option what :func:`analysis.outputs.promote.carried_settings`
carries of its source run plus S's measurement settings (:data:`MEASURED`). The same command again
resumes it (finished runs are not trained again); ``--dry-run`` prices it as any dry run does and
leaves nothing behind. Refused in one line, before anything is written: ``--top-k`` or ``--seeds``
below 1, a confirmation of a confirmation, a sweep without a finished, ranked run, one whose
outcome files do not name their problems one by one, held-out problems that overlap the
selection's (problem by problem: the fingerprints of every outcome file of S), or none at all.
Its report is the Confirmed section (:mod:`analysis.decisions.confirm`).
"""

from __future__ import annotations

import math
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from analysis.decisions.race.looks import still_in
from analysis.decisions.ranking import rank
from analysis.outputs.promote import carried_settings
from analysis.readers.collect import CONFIRM_RECORD, LABEL, collect, run_values
from analysis.readers.confirmation import (
    GROUP,
    PLACEBO_OPTION,
    ConfirmRecord,
    Finalist,
    confirmation_dir,
    placebo_arm,
    read_record,
    selection_fingerprints,
)
from analysis.readers.jobs import override_key
from grpo.config.rules import SEED_MAX
from grpo.data.datasets import HELDOUT, Example, load_examples, run_data_config
from grpo.grading.rewards import PLACEBO
from grpo.run.checkpoint_names import FINAL_MODEL
from grpo.run.files import atomic_write_text, subdir
from grpo.run.launching import launch_sweep, sweep_began
from grpo.run.lock import RunDirLocked, confirm_lock
from grpo.run.outcomes import problem_fingerprints, shared_problems
from grpo.run.run_config import defines_config

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
MEASURED = ("n_grpo_steps", "eval.eval_every", "eval.n_examples", "eval.samples_per_problem",
            "eval.temperature", "eval.top_p", "health.zero_reward_patience",
            "health.min_mean_response_length", "analysis.metric")
"""What of the source sweep's runs says how a config was trained and measured beyond what defines
it: a confirmation trains and evaluates each finalist as they did."""
SET_HERE = ("seed", "pruning", "race", "experiment_name", "hydra.sweep.dir", "dry_run",
            "confirm.enabled", "confirm.policy_from", "checkpoint.save_final_model", *MEASURED)
"""Keys (and sections) the confirmation sets for its jobs itself: not to be overridden."""
SETTINGS = ("confirm.n_examples", "confirm.samples_per_problem")
"""The confirmation's own settings on its command line: a re-run must give the same."""
PLAIN = re.compile(r"[\w.+\-/]+")


def check_counts(top_k: int, seeds: int | None, retrain: bool, placebo: bool = False) -> None:
    """Refuse (ValueError, naming the option) ``--top-k`` or ``--seeds`` that is no whole number
    or out of range, or ``--placebo`` without retraining, asked before the sweep is read (also
    for the chain's ``confirm`` block, whose yaml may give any value)."""
    if placebo and not retrain:
        raise ValueError("--placebo with --no-retrain: a placebo arm is trained (on reward=random, "
                         "with the fresh seeds), there is no final model of it to evaluate; drop "
                         "one of the two")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"--top-k is {top_k}; give how many configs of the sweep's ranking to "
                         "confirm, at least 1 (its best first)")
    if not retrain and seeds is not None:
        raise ValueError("--seeds with --no-retrain: the sweep's own final models are evaluated, "
                         "with the seeds they trained with; drop --seeds, or --no-retrain")
    if retrain and (isinstance(seeds, bool) or not isinstance(seeds, int) or not
                    1 <= seeds <= SEED_MAX):
        raise ValueError(f"--seeds is {seeds}; give how many fresh seeds each finalist is trained "
                         "with, a whole number at least 1 (2 or more give the confirmed figure an "
                         "interval)")


def refused_overrides(overrides: Sequence[str], sweep: Path) -> list[str]:
    """Why each override a confirmation cannot take is refused: one that sets what it sets itself
    (:data:`SET_HERE`) or what defines a config (it would confirm another config)."""
    errors = []
    for line in overrides:
        key = override_key(line).lstrip("+~")
        if any(key == k or key.startswith(k + ".") or key.startswith(k + "/") for k in SET_HERE) \
                or (key not in SETTINGS and defines_config(key)):
            errors.append(f"{line}: a confirmation trains and measures each finalist as {sweep} "
                          f"did and sets {key} itself; give only where and how its jobs run "
                          "(cluster, paths, logging, checkpoint.*) and confirm.n_examples, "
                          "confirm.samples_per_problem")
    return errors


@dataclass(frozen=True)
class Plan:
    """A confirmation about to launch: its directory (``target``), record, the finalists' option
    files (option -> yaml text), the held-out problems, the launch's arguments and the run of
    the best finalist its settings are resolved against (``source_run``)."""

    target: Path
    record: ConfirmRecord
    options: dict[str, str]
    heldout: list[Example]
    source_run: Path

    @property
    def arguments(self) -> list[str]:
        return list(self.record.arguments)


def _quoted(value: str) -> str:
    return value if PLAIN.fullmatch(value) else "'" + value.replace("'", "\\'") + "'"


def _settings(overrides: Sequence[str]) -> dict[str, str]:
    """The confirmation's own settings the overrides give (:data:`SETTINGS`), as written."""
    return {override_key(line).lstrip("+"): line.split("=", 1)[1] for line in overrides
            if "=" in line and override_key(line).lstrip("+") in SETTINGS}


def run_config(run_dir: Path) -> DictConfig:
    """The config the run in ``run_dir`` ran with (its ``.hydra/config.yaml``)."""
    return OmegaConf.load(run_dir / ".hydra" / "config.yaml")


def heldout_problems(run_dir: Path, overrides: Sequence[str]) -> list[Example]:
    """The held-out problems a confirmation of the run in ``run_dir`` evaluates: its data, its
    ``eval.n_examples`` and ``confirm.n_examples`` (:func:`confirm_settings`), as the trainer
    will read them (:data:`grpo.data.datasets.HELDOUT`)."""
    return heldout_of(run_config(run_dir), overrides)


def heldout_of(cfg: DictConfig, overrides: Sequence[str]) -> list[Example]:
    """The held-out problems a confirmation of a run of config ``cfg`` evaluates
    (:func:`heldout_problems`; also the chain's, of its last stage's config, before it runs)."""
    n_confirm = confirm_settings(cfg, overrides)["confirm.n_examples"]
    data = run_data_config(OmegaConf.to_container(cfg.data, resolve=True),
                           int(cfg.eval.n_examples), n_confirm)
    return load_examples(data, HELDOUT)


def confirm_settings(cfg: DictConfig, overrides: Sequence[str]) -> dict[str, int]:
    """The confirmation's own settings (:data:`SETTINGS`) as a confirmation of a run of config
    ``cfg`` resolves them: each the overrides' value, else ``cfg``'s, else its default (the
    evaluation's: ``eval.n_examples`` held-out problems at most, ``eval.samples_per_problem``
    responses each); whole numbers. Two command lines that resolve alike (one omits a setting,
    the other gives its default) are one confirmation. ValueError, naming the key, for a value
    that is no whole number."""
    given = _settings(overrides)
    resolved = {}
    for key in SETTINGS:
        value = given.get(key)
        if value is None:
            value = OmegaConf.select(cfg, key, default=None)
        if value is None:
            value = OmegaConf.select(cfg, "eval." + key.split(".", 1)[1])
        try:
            number = int(str(value))
        except ValueError:
            raise ValueError(f"{key}={value}: give a whole number (the default is the "
                             f"evaluation's, eval.{key.split('.', 1)[1]})") from None
        resolved[key] = number
    return resolved


def plan_confirmation(sweep: Path, top_k: int, seeds: int | None, retrain: bool,
                      overrides: Sequence[str], placebo: bool = False) -> Plan:
    """The confirmation of ``sweep``'s top ``top_k`` configs, with a placebo arm where
    ``placebo`` (module docstring); ValueError, in one line, for each refusal. Reads only."""
    check_counts(top_k, seeds, retrain, placebo)
    errors = refused_overrides(overrides, sweep)
    if errors:
        raise ValueError("; ".join(errors))
    if (theirs := read_record(sweep)) is not None:
        raise ValueError(f"{sweep} is a confirmation (of {theirs.source}): its runs were chosen by "
                         f"nothing, so there is no pick to confirm; confirm {theirs.source} itself")
    collection = collect([sweep])
    kept, _ = still_in(collection)
    ranking = rank(collection, labels=kept)
    runs = collection.runs
    if ranking.best is None:
        excluded = "; ".join(f"{label} ({why})" for label, why in ranking.excluded.items())
        raise ValueError(f"{sweep} has no finished run of a config to rank (every config's runs "
                         "are unfinished or stopped early"
                         + (f": {excluded}" if excluded else "") + "); nothing to confirm")
    ranked = list(ranking.table.index)
    if top_k > len(ranked):
        raise ValueError(f"--top-k {top_k}, but {sweep} ranks {len(ranked)} config"
                         f"{'s' if len(ranked) != 1 else ''}; give --top-k {len(ranked)} or less")
    chosen = ranked[:top_k]
    trained = runs[runs["steps_done"] > 0]
    found, unnamed = selection_fingerprints([Path(d) for d in trained["run_dir"]])
    if unnamed:
        raise ValueError(f"{len(unnamed)} run(s) of {sweep} keep outcome files that do not name "
                         f"their problems one by one ({unnamed[0]}; written before they were "
                         "kept): the held-out problems could not be shown apart from the "
                         "selection's; train the sweep again to confirm it")
    sources = {label: [Path(d) for d in trained.loc[trained[LABEL] == label, "run_dir"]]
               for label in chosen}
    heldout = heldout_problems(sources[chosen[0]][0], overrides)
    if not heldout:
        data = run_values(sources[chosen[0]][0], ["data.name", "data.holdout_size"])
        raise ValueError(
            f"{sweep}'s runs hold out no toy pair (data.holdout_size="
            f"{data['data.holdout_size'] or 0}): a confirmation needs problems the sweep neither "
            "trained nor evaluated on; run the sweep with data.holdout_size=N" if
            data["data.name"] == "toy" else
            f"no held-out problem: {sweep}'s validation file holds no problem after the "
            "eval.n_examples its runs evaluated; a confirmation needs more")
    shared = shared_problems(problem_fingerprints(heldout), found)
    if shared:
        raise ValueError(f"{len(shared)} of the {len(heldout)} held-out problems are problems "
                         f"{sweep}'s evaluations read (fingerprint {shared[0]}"
                         f"{', ...' if len(shared) > 1 else ''}: the same question and answer): "
                         "they would confirm nothing; remove the repeated problems from the "
                         "validation file, or lower confirm.n_examples")
    used = [int(s) for s in runs["seed"] if isinstance(s, int | float) and not isinstance(s, bool)
            and not (isinstance(s, float) and math.isnan(s))]
    fresh = tuple(range(max(used, default=-1) + 1, max(used, default=-1) + 1 + (seeds or 0)))
    if fresh and fresh[-1] > SEED_MAX:
        raise ValueError(f"the fresh seeds {fresh[0]}..{fresh[-1]} pass the largest seed {SEED_MAX}")
    options: dict[str, str] = {}
    finalists = []
    for number, label in enumerate(chosen, 1):
        estimate = ranking.uncertainty.estimates.get(label) if ranking.uncertainty else None
        about = (f"rank {number} of {sweep}: {label} [{ranking.criterion}="
                 f"{ranking.value(label):.4f}" + (f", 95% interval {estimate.interval()}"
                                                  if estimate and estimate.interval() else "") + "]")
        if retrain:
            options[f"top{number}"] = _option(sources[label][0], collection, label, about)
            finalists.append(Finalist(number, label, (f"top{number}",)))
            continue
        own = [d for d in sources[label] if (d / FINAL_MODEL / "config.json").is_file()
               and run_values(d, ["seed"])["seed"] is not None
               and trained.loc[trained["run_dir"] == str(d), "status"].iloc[0] == "completed"]
        if not own:
            raise ValueError(f"--no-retrain: no run of {label} in {sweep} completed with its final "
                             f"model ({FINAL_MODEL}/; checkpoint.save_final_model=false?): there "
                             "is nothing to evaluate; confirm with retraining (--seeds M)")
        names = []
        for run_dir in own:
            seed = int(run_values(run_dir, ["seed"])["seed"])
            names.append(f"top{number}_seed{seed}")
            options[names[-1]] = _option(run_dir, collection, label, about, {
                "seed": seed, "confirm.policy_from": str(run_dir.resolve()),
                "checkpoint.save_final_model": False})
        finalists.append(Finalist(number, label, tuple(names)))
    arm = _placebo_arm(sweep, chosen[0], sources[chosen[0]][0], collection, options) if placebo else None
    target = confirmation_dir(sweep, retrain)
    experiment = str(trained["experiment_name"].iloc[0])
    arguments = ("--config-dir", str((target / "conf").resolve()),
                 f"+{GROUP}={','.join(options)}",
                 *([f"seed={','.join(map(str, fresh))}"] if retrain else []),
                 "confirm.enabled=true", "pruning=off", "race.max_seeds=null",
                 f"experiment_name={_quoted(experiment)}",
                 f"hydra.sweep.dir={_quoted(str(target.resolve()))}", *overrides)
    record = ConfirmRecord(sweep.resolve(), retrain, tuple(finalists), fresh, GROUP,
                           collection.metric, arguments, arm)
    plan = Plan(target, record, options, heldout, sources[chosen[0]][0])
    check_target(plan, sweep)
    return plan


def check_target(plan: Plan, sweep: Path) -> None:
    """Refuse (ValueError, one line) a plan whose directory holds another confirmation of
    ``sweep`` (:func:`same_confirmation`) or something that is no confirmation."""
    target = plan.target
    old = read_record(target) if target.is_dir() else None
    if old is not None and (why := same_confirmation(old, plan.record,
                                                      run_config(plan.source_run))) is not None:
        raise ValueError(f"{target} holds another confirmation of {sweep} ({why}); run the "
                         "command it was made with, or move it away to confirm anew")
    if target.exists() and old is None and (not target.is_dir() or any(target.iterdir())):
        raise ValueError(f"{target} exists and holds no {CONFIRM_RECORD}: not a confirmation; "
                         "move it away")


def _placebo_arm(sweep: Path, label: str, run_dir: Path, collection, options: dict[str, str]
                 ) -> Finalist:
    """The placebo arm of ``sweep``'s best config ``label`` (its run ``run_dir``): its option
    file added to ``options`` (the config with ``reward=random``, ``reward.p`` its yaml's), and
    the arm as the record names it. ValueError where that config is a placebo already."""
    if run_values(run_dir, ["reward.name"])["reward.name"] == PLACEBO:
        raise ValueError(f"--placebo: {sweep}'s best config {label} trains on reward={PLACEBO} "
                         "already: it is a placebo itself, with nothing to stand above; drop "
                         "--placebo")
    options[PLACEBO_OPTION] = _option(
        run_dir, collection, label, f"the placebo arm of rank 1 of {sweep}: {label} trained on "
        f"reward={PLACEBO}", groups={"reward": PLACEBO})
    return placebo_arm(label)


def _option(run_dir: Path, collection, label: str, about: str,
            extra: dict[str, object] | None = None, groups: dict[str, str] | None = None) -> str:
    """A finalist's option file: what its source run (``run_dir``) carries
    (:func:`analysis.outputs.promote.carried_settings`), its config's values, S's measurement
    settings (:data:`MEASURED`), ``extra`` values and ``groups`` choices (the placebo's
    ``reward``: its yaml's keys replace the run's own of that group)."""
    settings = carried_settings(run_dir, CONF_DIR, collection.label_keys)
    for key, value in collection.configs[label].items():
        if key in collection.group_keys:
            settings.override[key] = value
        else:
            settings.values[key] = value
    settings.values.update({k: v for k, v in run_values(run_dir, MEASURED).items() if v is not None})
    settings.values.update(extra or {})
    for group, option in (groups or {}).items():
        settings.override[group] = option
        settings.values = {k: v for k, v in settings.values.items() if not k.startswith(group + ".")}
    return (f"# @package _global_\n# {about}\n# carried from {run_dir}\n" + settings.to_yaml())


def same_confirmation(old: ConfirmRecord, new: ConfirmRecord, cfg: DictConfig) -> str | None:
    """What differs between a confirmation's record and the one a new command would write, in
    words (the sweep it confirms, its finalists, seeds, mode or own settings, these as each
    command line resolves them for a run of config ``cfg``, the best finalist's source run:
    :func:`confirm_settings`); None: the same confirmation (it resumes)."""
    settings = [" ".join(f"{k}={v}" for k, v in confirm_settings(cfg, r.arguments).items())
                for r in (old, new)]
    for what, mine, theirs in (
            ("sweep", old.source.resolve(), new.source.resolve()),
            ("finalists", "; ".join(f.label for f in old.finalists),
             "; ".join(f.label for f in new.finalists)),
            ("seeds", old.seeds, new.seeds), ("retraining", old.retrain, new.retrain),
            ("placebo arm", old.placebo is not None, new.placebo is not None),
            ("settings", *settings)):
        if mine != theirs:
            return f"its {what} {'was' if what == 'sweep' else 'were'} {mine}, this command's {theirs}"
    return None


def launch_confirmation(plan: Plan, dry_run: bool, env: Mapping[str, str] | None = None) -> int:
    """Write the plan's option files (and, unless ``dry_run``, its record) into its directory and
    launch it (:func:`grpo.run.launching.launch_sweep`, ``env`` added to the launch's
    environment: the chain's dry run asks for its estimate so); a directory this call made is taken away
    again where the sweep did not begin (a dry run, a refusal; a detached launch has begun it:
    :func:`grpo.run.launching.sweep_began`)."""
    target = plan.target
    made = not target.exists()
    try:
        folder = target / "conf" / GROUP
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("*.yaml"):
            if stale.stem not in plan.options:
                stale.unlink()
        for option, text in plan.options.items():
            atomic_write_text(subdir(folder.parent, folder.name) / f"{option}.yaml", text)
        arguments = [*plan.arguments, *(["dry_run=true"] if dry_run else [])]
        return launch_sweep(arguments, target, CONFIRM_RECORD, plan.record.to_json(), dry_run, env)
    finally:
        if made and not sweep_began(target):
            shutil.rmtree(target, ignore_errors=True)


def confirm_and_report(sweep: Path, top_k: int, seeds: int | None, retrain: bool,
                       overrides: Sequence[str], dry_run: bool, placebo: bool = False,
                       env: Mapping[str, str] | None = None) -> int:
    """Plan, launch (or resume) and, once its runs have ended, report the confirmation of
    ``sweep`` (the Confirmed section, also written to ``<C>/confirmed.md``), with a placebo arm
    where ``placebo`` (``env``: added to its launch's environment); its exit status. ValueError
    for a refusal (nothing written), also where ``sweep``'s lock is held
    (:func:`grpo.run.lock.confirm_lock`: another confirmation of it, or a launch of it, runs
    now)."""
    plan = plan_confirmation(sweep, top_k, seeds, retrain, overrides, placebo)
    how = (f"trained again with fresh seeds {', '.join(map(str, plan.record.seeds))}" if retrain
           else "its own final models, not trained again")
    if plan.record.placebo is not None:
        how += f", beside a placebo arm ({plan.record.placebo.label})"
    with ExitStack() as held:
        if not dry_run:  # one confirmation of the sweep at a time, and no relaunch of it
            try:
                held.enter_context(confirm_lock(sweep))
            except RunDirLocked as err:
                raise ValueError(str(err)) from None
            check_target(plan, sweep)  # again: another may have written its record since
        print(f"confirmation of {sweep}: {plan.target} ({how}; {len(plan.heldout)} held-out "
              f"problems, none of them evaluated by {sweep})", flush=True)
        status = launch_confirmation(plan, dry_run, env)
    if status and not dry_run and sweep_began(plan.target):
        print(f"the confirmation's launch ended (exit status {status}) before its runs had all "
              "finished: the same command again resumes it, training only what is left",
              file=sys.stderr)
    if dry_run or status:
        return status
    from analysis.outputs.confirmed import report_confirmation

    conf, lines = report_confirmation(plan.target)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if conf.finished:
        atomic_write_text(plan.target / "confirmed.md", text)
        print(f"wrote {plan.target / 'confirmed.md'} (and `make plots SWEEP={sweep}` puts the "
              "section into its report)")
    else:
        print(f"the confirmation has not finished: run the same command again once its runs have "
              f"ended (follow them: `make watch SWEEP={plan.target}`)")
    return 0
