"""Mutation check of the training path's quick tests: how many small changes to each module's
code (AST mutations) its quick test files catch.

    python bench/mutation_training.py                     # 20 mutants a module, seed 0
    python bench/mutation_training.py --per-module 40 --modules learner overlap
    python bench/mutation_training.py --list learner      # every mutation point of a module

Each module of `TARGETS` is parsed, and every point where one of these mutations applies is
listed: an arithmetic operator swapped (+ -, * /, // %), a comparison flipped (< <=, > >=, == !=,
is / is not, in / not in), a number moved by one (an int n -> n + 1, a float x -> 2x, 0.0 -> 1.0),
True <-> False, `and` <-> `or`, a `not` or a unary minus dropped, min <-> max, a min(a, b) or
max(a, b) replaced by its first argument, a `clamp(...)` call's bound dropped. Docstrings, f-strings
and other strings are not mutated. A seeded sample of `--per-module` points is drawn per module;
for each, the mutated module (`ast.unparse` of the changed tree) replaces the original in a copy
of the checkout, and the module's test files run on it (`-x -q -n 0`, one process forked from this
one, which has imported torch, transformers and pytest already, so each mutant costs the tests'
own time) under a time limit: a failing test (or the limit) kills the mutant. The unmutated
`ast.unparse` of each module must pass first (else the harness, not the tests, is wrong).

Surviving mutants are printed with their line, so that each can be judged: a mutant is
equivalent only where one can say why no input tells it apart (e.g. `x > 0` -> `x >= 0` where x
is never 0). The figures: killed / sampled, and killed / (sampled - equivalent) once judged.

Measured (seed 0, 25 a module, all points where a module has fewer; 2 shared cores; the test
files as `TARGETS` lists them), killed / sampled, then of the non-equivalent mutants:

    module      points  killed   non-equivalent   before (issue 61's sample, quick tier)
    learner        106   24/25   24/24  100%      55%
    behaviour       72   24/25   24/24  100%      91%
    importance       6    6/6     6/6   100%      75%
    rollouts        25   21/25   21/21  100%      85%
    overlap         31   24/25   24/25   96%      76%

The equivalent survivors: learner line 77 `warmup > 0` -> `warmup > 1` (with warmup_steps=1
min(1, (s + 1) / 1) is 1, the constant rate); behaviour line 48 `max(..., default=0)` -> 1 (with
no usable rollout a width of 1 gives the same all-NaN tensor as the early return); rollouts lines
60-61 `unsqueeze(-1)` -> `unsqueeze(1)` (the same on a 1-D tensor), lines 96-97 `zip(...,
strict=True)` -> False (score_batch returns one score per response, and
compute_group_normalized_rewards refuses responses and truths of unequal length either way).
The one survivor that is not equivalent: overlap line 52, CLOSE_WAIT_S 60 -> 120 (a tuning
constant that the close test sets to 0.5 s). All five: 99 of the 100 non-equivalent mutants of
the sample killed. The five quick test files together: 48 tests, 45 s in one process here.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TARGETS: dict[str, tuple[str, list[str]]] = {
    # module -> (its file, the quick test files that exercise it, with their pytest arguments)
    "learner": ("grpo/training/learner.py", ["tests/test_learner.py"]),
    "behaviour": ("grpo/training/behaviour.py",
                  ["tests/test_behaviour.py", "tests/test_importance.py", "tests/test_learner.py"]),
    "importance": ("grpo/core/importance.py", ["tests/test_importance.py", "tests/test_learner.py"]),
    "overlap": ("grpo/training/overlap.py", ["tests/test_overlap.py", "-m", "not slow"]),
    "rollouts": ("grpo/training/rollouts.py", ["tests/test_rollouts.py", "tests/test_learner.py"]),
}

SWAPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult,
    ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv,
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.And: ast.Or, ast.Or: ast.And,
}


@dataclass(frozen=True)
class Mutation:
    """The `index`-th node of an `ast.walk` of the module, changed as `kind` says."""

    index: int
    kind: str
    line: int
    description: str


def _strings(tree: ast.AST) -> set[int]:
    """ids of the constant nodes inside f-strings (not mutated)."""
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for n in ast.walk(node)}


def mutation_points(tree: ast.Module) -> list[Mutation]:
    """Every mutation that applies to the module, in walk order."""
    skip = _strings(tree)
    points: list[Mutation] = []
    for index, node in enumerate(ast.walk(tree)):
        line = getattr(node, "lineno", 0)
        op = getattr(node, "op", None)
        if isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)) and type(op) in SWAPS:
            points.append(Mutation(index, "op", line, f"{type(op).__name__} -> {SWAPS[type(op)].__name__}"))
        elif isinstance(node, ast.Compare):
            for k, cmp in enumerate(node.ops):
                if type(cmp) in SWAPS:
                    points.append(Mutation(index, f"cmp{k}", line,
                                           f"{type(cmp).__name__} -> {SWAPS[type(cmp)].__name__}"))
        elif isinstance(node, ast.Constant) and id(node) not in skip:
            value = node.value
            if isinstance(value, bool):
                points.append(Mutation(index, "const", line, f"{value} -> {not value}"))
            elif isinstance(value, (int, float)):
                points.append(Mutation(index, "const", line, f"{value!r} -> {_moved(value)!r}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            points.append(Mutation(index, "unary", line, f"drop {type(node.op).__name__}"))
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name in ("min", "max"):
                other = "max" if name == "min" else "min"
                points.append(Mutation(index, "minmax", line, f"{name} -> {other}"))
                if len(node.args) >= 2:
                    points.append(Mutation(index, "first", line, f"{name}(a, ...) -> a"))
            if isinstance(node.func, ast.Attribute) and node.func.attr == "clamp" and node.keywords:
                points.append(Mutation(index, "unclamp", line, "clamp(...) -> dropped"))
    return points


def _moved(value: int | float) -> int | float:
    if isinstance(value, int):
        return value + 1
    return 1.0 if value == 0 else value * 2


class _Apply(ast.NodeTransformer):
    def __init__(self, mutation: Mutation, nodes: list[ast.AST]) -> None:
        self.mutation = mutation
        self.target = nodes[mutation.index]

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            return self.generic_visit(node)
        kind = self.mutation.kind
        if kind == "op":
            node.op = SWAPS[type(node.op)]()
        elif kind.startswith("cmp"):
            k = int(kind[3:])
            node.ops[k] = SWAPS[type(node.ops[k])]()
        elif kind == "const":
            node.value = (not node.value) if isinstance(node.value, bool) else _moved(node.value)
        elif kind == "unary":
            return node.operand
        elif kind == "minmax":
            node.func.id = "max" if node.func.id == "min" else "min"
        elif kind == "first":
            return node.args[0]
        elif kind == "unclamp":
            return node.func.value
        return node


def mutate(source: str, mutation: Mutation) -> str:
    tree = ast.parse(source)
    nodes = list(ast.walk(tree))
    tree = _Apply(mutation, nodes).visit(tree)
    ast.fix_missing_locations(tree)
    return ast.unparse(tree)


def _preload() -> None:
    """Import the heavy third-party packages once, in this process, before any fork (not the
    project: each mutant imports its own copy)."""
    import hydra  # noqa: F401
    import numpy  # noqa: F401
    import omegaconf  # noqa: F401
    import pytest  # noqa: F401
    import safetensors.torch  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM  # noqa: F401


def run_tests(copy_root: Path, args: list[str], timeout: float, log: Path) -> tuple[str, float]:
    """Run pytest on `args` in `copy_root` in a forked child; ('passed' | 'failed' | 'timeout',
    seconds)."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: the copy's project first on the path, no bytecode written
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(copy_root)
            sys.path.insert(0, str(copy_root))
            sys.dont_write_bytecode = True
            import pytest

            code = pytest.main([*args, "-x", "-q", "-n", "0", "-p", "no:cacheprovider"])
            os._exit(int(code))
        except BaseException:  # noqa: BLE001
            import traceback

            traceback.print_exc()
            os._exit(99)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            return ("passed" if code == 0 else "failed"), time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.perf_counter() - start
        time.sleep(0.1)


def _copy_checkout(into: Path) -> Path:
    ignore = shutil.ignore_patterns(".venv*", ".git", "outputs", ".cache", "site", "__pycache__",
                                    ".ruff_cache", ".pytest_cache", "*.egg-info")
    target = into / "checkout"
    shutil.copytree(ROOT, target, ignore=ignore, symlinks=True)
    return target


def _write(copy_root: Path, relative: str, source: str) -> None:
    path = copy_root / relative
    path.write_text(source)
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)


def check(modules: list[str], per_module: int, seed: int, out: Path | None,
          lines: set[int] | None = None) -> dict:
    _preload()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="mutation-") as tmp:
        copy_root = _copy_checkout(Path(tmp))
        logs = Path(tmp) / "logs"
        logs.mkdir()
        for name in modules:
            relative, args = TARGETS[name]
            original = (ROOT / relative).read_text()
            points = mutation_points(ast.parse(original))
            sample = sorted(random.Random(f"{seed}-{name}").sample(points, min(per_module, len(points))),
                            key=lambda m: (m.line, m.index, m.kind))
            if lines:  # a rerun of the sampled mutants on these lines only
                sample = [m for m in sample if m.line in lines]
            _write(copy_root, relative, ast.unparse(ast.parse(original)))
            verdict, baseline = run_tests(copy_root, args, 900, logs / f"{name}-baseline.log")
            if verdict != "passed":
                raise SystemExit(f"{name}: the unmutated module fails its tests; see "
                                 f"{(logs / f'{name}-baseline.log').read_text()[-3000:]}")
            timeout = 2 * baseline + 30
            print(f"{name}: {len(points)} mutation points, {len(sample)} sampled; tests pass unmutated in "
                  f"{baseline:.1f} s (limit {timeout:.0f} s a mutant)", flush=True)
            rows = []
            for mutation in sample:
                _write(copy_root, relative, mutate(original, mutation))
                verdict, seconds = run_tests(copy_root, args, timeout, logs / "mutant.log")
                rows.append({"line": mutation.line, "mutation": mutation.description,
                             "verdict": verdict, "seconds": round(seconds, 1)})
                mark = "survived" if verdict == "passed" else "killed" + (" (time limit)" if verdict == "timeout" else "")
                print(f"  line {mutation.line:4d} {mutation.description:28s} {mark} ({seconds:.0f} s)", flush=True)
            _write(copy_root, relative, original)
            killed = sum(r["verdict"] != "passed" for r in rows)
            results[name] = {"file": relative, "tests": args, "points": len(points), "sampled": len(rows),
                             "killed": killed, "baseline_s": round(baseline, 1), "mutants": rows}
            print(f"{name}: {killed}/{len(rows)} killed ({killed / max(1, len(rows)):.0%})", flush=True)
    print("\nmodule       killed / sampled")
    for name, r in results.items():
        print(f"{name:12s} {r['killed']:3d} / {r['sampled']:3d}  {r['killed'] / max(1, r['sampled']):.0%}")
    if out is not None:
        out.write_text(json.dumps(results, indent=1))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--modules", nargs="+", default=list(TARGETS), choices=list(TARGETS))
    parser.add_argument("--per-module", type=int, default=20, help="mutants sampled per module")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--lines", type=int, nargs="+", default=None,
                        help="run only the sampled mutants on these lines (one module)")
    parser.add_argument("--list", choices=list(TARGETS), default=None,
                        help="print a module's mutation points and exit")
    args = parser.parse_args()
    if args.list:
        for m in mutation_points(ast.parse((ROOT / TARGETS[args.list][0]).read_text())):
            print(f"line {m.line:4d} {m.description}")
        return
    check(args.modules, args.per_module, args.seed, args.json, set(args.lines or ()))


if __name__ == "__main__":
    main()
