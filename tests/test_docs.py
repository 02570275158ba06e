"""The README and the documentation site stay true: every `launch.py` command they show is
dry-run (a renamed key or preset fails here, not on a reader's machine), every config key has its
documentation, and the reference pages are generated from the code that owns each fact."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import gen_pages, stand_in_real_paths
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from grpo.config.keys import config_keys, undocumented
from grpo.config.rules import leaf_keys

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND = re.compile(r"^\s*(?P<prompt>\$ )?(?:\.venv/bin/)?python launch\.py(?P<args>(?: .*)?)$")
INLINE = re.compile(r"`(?:\.venv/bin/)?python launch\.py(?P<args> [^`]*)`")
PLACEHOLDER = re.compile(r"\.\.\.|<[^>]*>")
MADE_BY_AN_EARLIER_STEP = ("+experiment=promoted/",)
"""A preset a page's earlier step writes (`python -m analysis promote`): not on a fresh clone."""
NOT_HERE = ("rollout=vllm needs the vllm package", "is not a sweep directory (no multirun.yaml in it)")
"""The refusals a valid command may get on a fresh clone: a command for a GPU node, for want of
vLLM (the CPU lock has none; the GPU lock has it, `make test-vllm` runs it on CPU in its own
venv); a command that borrows the seed variance of a sweep the page's earlier command runs."""


@dataclass(frozen=True)
class Shown:
    """A `launch.py` command a page shows: where, its arguments, and, for a transcript (`$ python
    launch.py ...` followed by its output), the output lines the page shows (but those it
    elides with `...`)."""

    where: str
    args: tuple[str, ...]
    output: tuple[str, ...] = ()

    @property
    def refused(self) -> bool:
        return any(line.startswith("error:") for line in self.output)


def shown_commands(page: Path) -> list[Shown]:
    """Every `python launch.py ...` in ``page``'s code blocks (continuation lines joined, the
    trailing comment dropped) and inline code (a paragraph's line breaks read as spaces), but
    those with a placeholder (`...`, `<ts>`)."""
    found, fence, paragraph = [], False, []
    lines = page.read_text().splitlines()
    where = lambda i: f"{page.relative_to(ROOT)}:{i + 1}"  # noqa: E731

    def inline() -> None:
        if paragraph:
            text = " ".join(line.strip() for _, line in paragraph)
            found.extend((where(paragraph[0][0]), m["args"], ()) for m in INLINE.finditer(text))
            paragraph.clear()

    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            inline()
            fence = not fence
            continue
        if not fence:
            if line.strip():
                paragraph.append((i, line))
            else:
                inline()
            continue
        match = COMMAND.match(line)
        if match is None:
            continue
        text, j = match["args"], i
        while text.rstrip().endswith("\\"):
            j += 1
            text = text.rstrip()[:-1] + " " + lines[j].strip()
        output = []
        if match["prompt"]:
            for out in lines[j + 1:]:
                if out.strip().startswith(("```", "$ ")):
                    break
                if "..." not in out and out.strip():
                    output.append(out.strip())
        found.append((where(i), text, tuple(output)))
    inline()
    shown = []
    for place, text, output in found:
        text = text.split(" # ")[0].split("  #")[0]
        if PLACEHOLDER.search(text):
            continue
        shown.append(Shown(place, tuple(shlex.split(text)), output))
    return shown


COMMANDS = [shown for page in PAGES for shown in shown_commands(page)]


def test_the_pages_show_the_commands_a_user_runs() -> None:
    """The extraction finds what the README shows: one run, a sweep, its dry run, a SLURM study,
    the strict-override transcript (whose error line it reads)."""
    readme = {" ".join(s.args): s for s in COMMANDS if s.where.startswith("README.md")}
    assert "model=tiny data=toy rollout=hf" in readme
    assert "-m off_policy.epochs=1,2,4 train_batch_size=64,128,256 dry_run=true" in readme
    assert "-m +experiment=off_policy_broad cluster=slurm" in readme
    assert any(s.refused and "did you mean learning_rate=1e-5" in s.output[0] for s in COMMANDS)
    assert len(COMMANDS) >= 20


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment a page's reader has set up: the real model and MATH where the config's
    `GRPO_MODEL_PATH` and `GRPO_DATA_DIR` say (stand-ins), and no SLURM client on PATH (a login
    node's scheduler is not this machine's 2-CPU test cluster: its check is the SLURM tests')."""
    folder = tmp_path_factory.mktemp("real")
    stand_in_real_paths(folder, n_validation=5000)  # MATH's 5000 (the dry run prices them)
    env = {key: value for key, value in os.environ.items() if key != "GRPO_OUTPUT_ROOT"}
    return {**env, "PATH": str(folder / "no-bin"), "GRPO_MODEL_PATH": str(folder / "Qwen2.5-Math-1.5B"),
            "GRPO_DATA_DIR": str(folder)}


@pytest.mark.parametrize("shown", COMMANDS, ids=lambda s: s.where)
def test_every_launch_command_on_the_pages_dry_runs(shown: Shown, stand_ins: dict[str, str],
                                                    tmp_path: Path) -> None:
    """Each command, with `dry_run=true` added, run as from a fresh checkout (its `data/`, no
    `outputs/` yet): accepted as written (exit 0, or refused only for what a fresh clone lacks:
    `NOT_HERE`) or, where the page shows it refused, refused; a transcript's output lines
    are printed as the page shows them (but those it elides with `...`)."""
    if any(shown.args and a.startswith(MADE_BY_AN_EARLIER_STEP) for a in shown.args):
        pytest.skip(f"{shown.where}: its preset is written by the page's earlier step")
    args = [*shown.args, *([] if any(a.startswith("dry_run=") for a in shown.args) else ["dry_run=true"])]
    (tmp_path / "data").symlink_to(ROOT / "data")  # the shipped data, at the paths presets name
    proc = subprocess.run([sys.executable, str(ROOT / "launch.py"), *args], cwd=tmp_path,
                          env=stand_ins, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    printed = {line.strip() for line in output.splitlines()}
    for line in shown.output:
        assert line in printed, f"{shown.where}: the page shows {line!r}; it printed:\n{output}"
    if shown.refused:
        assert proc.returncode != 0, f"{shown.where}: the page shows it refused, but it ran"
        return
    refusals = [line for line in output.splitlines() if line.startswith("  - ")]
    if proc.returncode != 0 and refusals and all(any(n in r for n in NOT_HERE) for r in refusals):
        return  # every job valid but for what a fresh clone of this machine lacks
    assert proc.returncode == 0, f"{shown.where}: python launch.py {' '.join(args)}\n{output}"


def test_every_config_key_has_its_meaning_and_rule() -> None:
    """A key added without a yaml comment or a rule fails here and stops `make docs`, naming it."""
    assert undocumented(CONF) == []


def test_the_key_reference_lists_exactly_the_keys_a_config_composes() -> None:
    """grpo.config.keys reads the yaml files itself: its keys are those Hydra composes with each
    group's options, no more and no fewer."""
    composed = set()
    options = [[], ["loss=grpo_clip"], ["loss=grpo_clip_higher"], ["loss=cispo"], ["cluster=slurm"],
               ["pruning=successive_halving"], ["rollout=hf_process"], ["reward=random"],
               ["model=tiny", "data=toy", "rollout=hf"], ["zero_variance=dynamic_sampling"]]
    for overrides in options:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        composed |= set(leaf_keys(OmegaConf.to_container(cfg, resolve=False)))
    assert set(config_keys(CONF)) == composed


def test_a_key_without_its_comment_is_named(tmp_path: Path) -> None:
    """A planted key without a comment, and one without a rule, are each named with the fix."""
    conf = tmp_path / "conf"
    (conf / "loss").mkdir(parents=True)
    (conf / "config.yaml").write_text("# the learning rate\nlearning_rate: 1.0\nstray_key: 3\n")
    (conf / "loss" / "x.yaml").write_text("# a loss\n\n# its name\nname: x\n# a weight\nw: 1\n")
    assert undocumented(conf) == [
        "stray_key (config.yaml): no comment above it in its yaml file",
        "stray_key (config.yaml): no rule in grpo/config/rules.py",
    ]
    keys = config_keys(conf)
    assert keys["loss.w"].meaning == "a weight" and keys["loss.w"].rule.startswith("a number > 0")
    assert keys["learning_rate"].meaning == "the learning rate"


def test_the_reference_pages_are_made_from_their_owners() -> None:
    """Each generated page holds what its owner says: a rule, a yaml comment, a metric's
    meaning, a parser's option, a registry's name."""
    gen = gen_pages()
    keys = gen.config_keys_page()
    assert ("| `eval.samples_per_problem` |" in keys and "| `learning_rate` | `1.0e-05` | a number > 0 | yes |"
            in keys)
    assert "| `seed` | `0` |" in keys and "| `logging.progress_every` | `" in keys
    assert keys.split("| `seed` |")[1].split("|")[2] == " yes "
    assert keys.split("| `logging.progress_every` |")[1].split("|")[2] == " no "
    assert "`loss=grpo_clip`: `0.2`" in keys  # a key only a non-default option sets
    groups = gen.config_groups_page()
    assert "| `reinforce_with_baseline` (default) |" in groups
    assert "| `grpo_clip` | GRPO-Clip: -min(ratio * A, clip(ratio, 1-eps, 1+eps) * A), the off-policy loss |" in groups
    metrics = gen.metrics_page()
    assert "`train/clip_fraction`" in metrics and "| `eval/reward` | Validation reward | 0-1 | 0 to 1 |" in metrics
    cli = gen.cli_page()
    assert "usage: python launch.py" in cli and "--multirun" in cli and "python -m analysis plots" in cli
    assert "--seed-variance-from" in cli and "usage: python -m chain" in cli
    registries = gen.registries_page()
    for name in ("grpo_clip_higher", "hf_process", "bf16-mixed", "successive_halving", "r1_zero_reward_fn"):
        assert f"`{name}`" in registries
    assert set(gen.PAGES) == {f"reference/{p}.md" for p in ("config-keys", "config-groups", "metrics",
                                                            "cli", "registries", "field-axes")}


def test_every_page_is_in_the_navigation() -> None:
    """mkdocs.yml's nav names every hand-written page and every generated one, and nothing else
    (`make docs` fails on a page left out too; this says which without mkdocs installed)."""
    nav = re.findall(r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    written = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert sorted(nav) == sorted(written | set(gen_pages().PAGES))


def test_the_page_names_the_pairs_that_get_an_interval() -> None:
    """Issue 52, item 15: compare_sweep computes each config against the best and each off-policy
    config against its on-policy baseline, not every pair; the explanation page says so (it said
    every pair of ranked configs gets an interval)."""
    import numpy as np

    from analysis.stats.comparisons import compare_sweep
    from analysis.stats.variance import ConfigData, SeedVariance

    configs = [ConfigData(label, np.array(values)) for label, values in (
        ("a", [0.60, 0.62, 0.61]), ("b", [0.50, 0.52, 0.51]), ("c", [0.40, 0.43, 0.41]),
        ("d", [0.30, 0.31, 0.33]))]
    u = compare_sweep(configs, "a", {"c": "d"}, 10, SeedVariance.pooled(configs))
    pairs = {(c.config, c.reference, c.role) for c in u.comparisons}
    assert pairs == {("b", "a", "best"), ("c", "a", "best"), ("d", "a", "best"),
                     ("c", "d", "on-policy")}  # 4 of the 6 pairs: not b-c, b-d
    page = " ".join((ROOT / "docs/explanations/how-sure.md").read_text().split())
    assert "Every pair of ranked configs gets a Tukey-Kramer" not in page
    assert "Only those pairs get an interval (the others are not computed)" in page


def test_the_figures_page_names_the_wall_clock_axis_the_figures_print() -> None:
    """The figures page quotes the wall-clock axis's label as a sweep shorter than two hours (every
    CPU sweep) gets it, in minutes, and says when it is in hours."""
    from types import SimpleNamespace

    import pandas as pd

    from analysis.names.metric_names import metric_name
    from analysis.outputs.plots import wall_clock_unit
    from analysis.readers.run_rows import TRAIN_CLOCK

    page = (ROOT / "docs" / "how-to" / "plots-and-report.md").read_text()
    short, long = (wall_clock_unit(SimpleNamespace(runs=pd.DataFrame({"wall_clock_s": [s]})))[0]
                   for s in (7199.0, 7200.0))
    assert f'"{metric_name(TRAIN_CLOCK).axis_label(short)}"' in " ".join(page.split())
    assert f"in {long} where the longest run took two hours or more" in " ".join(page.split())


def test_the_unattended_page_says_when_the_driver_is_signalled() -> None:
    """Issue 59, item 10: the SLURM driver is signalled `DRIVER_SIGNAL_DELAY_S` before its time
    limit and requeued then; the page says how long before (it did not), from the constant."""
    from grpo.run.driver import DRIVER_SIGNAL_DELAY_S

    page = " ".join((ROOT / "docs" / "how-to" / "run-unattended.md").read_text().split())
    assert (f"SLURM signals the driver (SIGUSR2) {DRIVER_SIGNAL_DELAY_S} s before its time limit "
            "(`grpo.run.driver.DRIVER_SIGNAL_DELAY_S`)") in page


def test_the_demo_dry_run_s_power_block_is_what_the_command_prints(tmp_path: Path) -> None:
    """How sure's "Before launch" block is the demo's dry run as it prints today: its command,
    run here, prints each of the block's lines (a change of the power or the race's levels that
    leaves the page behind fails here)."""
    page = (ROOT / "docs" / "explanations" / "how-sure.md").read_text()
    command = "python launch.py -m +experiment=demo dry_run=true analysis.assumed_seed_sd=0.125"
    block = page.split(f"(`{command}`):\n\n```\n", 1)[1].split("```\n", 1)[0].splitlines()
    assert block[0].startswith("cost: 4 jobs") and len(block) == 6
    out = subprocess.run([sys.executable, *shlex.split(command)[1:],
                          f"paths.output_root={tmp_path}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = out.stdout.splitlines()
    start = printed.index(block[0])
    assert printed[start:start + len(block)] == block
