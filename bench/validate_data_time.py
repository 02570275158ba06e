"""Seconds the config validator spends on a MATH-sized dataset (12,000 train + 500 validation
problems, written to a temporary folder): reading the jsonl with grpo.data.datasets's loader and
tokenizing every prompt against model.max_seq_len - sampling.max_new_tokens.

    python bench/validate_data_time.py                      # the tiny model's tokenizer
    python bench/validate_data_time.py --tokenizer DIR      # e.g. Qwen2.5-Math-1.5B's folder

With --tokenizer, DIR's tokenizer files are copied into a stand-in model folder (config.json with
4096 positions) and the r1_zero prompt is used; the questions are MATH-like LaTeX. Without it, the
tiny model's character tokenizer and the toy prompt, with questions of its characters. Prints the
first (cold) and a second (warm: the jobs of a sweep share the cached read and token counts)
`check_config` time.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from grpo.config.validation import check_config, load_splits

ROOT = Path(__file__).resolve().parents[1]
N_TRAIN, N_VALIDATION = 12_000, 500


def latex_question(rng: random.Random) -> str:
    """A MATH-like problem of 150-700 characters."""
    a, b, c = rng.randint(1, 9), rng.randint(1, 99), rng.randint(1, 20)
    parts = [f"Let $f(x) = \\frac{{{a} x^2 + {b}}}{{x - {a}}}$.",
             f"Find the sum of all real $x$ such that $\\sqrt{{x^2 + {b}}} = {c}$.",
             f"A circle of radius ${c}$ is inscribed in a square; what is the area between them?"]
    return " ".join(rng.choice(parts) for _ in range(rng.randint(1, 5)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", type=Path, help="folder holding tokenizer files")
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.tokenizer:
            model_dir = folder / "model"
            shutil.copytree(args.tokenizer, model_dir)
            (model_dir / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
            question = lambda: latex_question(rng)  # noqa: E731
            overrides = [f"model.path={model_dir}", "prompt=r1_zero", "cluster=slurm"]
        else:
            question = lambda: "+".join(str(rng.randint(0, 99)) for _ in range(rng.randint(1, 6)))  # noqa: E731
            overrides = ["model=tiny", "rollout=hf", "rollout_batch_size=16",
                         "train_batch_size=16", "micro_batch_size=16", "sampling.max_new_tokens=8",
                         f"paths.cache_dir={folder / 'cache'}"]
        for split, n in (("train", N_TRAIN), ("validation", N_VALIDATION)):
            with (folder / f"{split}.jsonl").open("w") as f:
                f.writelines(json.dumps({"problem": question(), "answer": "1"}) + "\n"
                             for _ in range(n))
        overrides += ["data=math", f"data.train_path={folder / 'train.jsonl'}",
                      f"data.validation_path={folder / 'validation.jsonl'}", "eval.n_examples=500"]
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        start = time.perf_counter()
        load_splits(cfg)
        read = time.perf_counter() - start
        timings = []
        for _ in range(2):
            start = time.perf_counter()
            report = check_config(cfg)
            timings.append(time.perf_counter() - start)
        assert report.errors == [], report.errors
        name = args.tokenizer or "tiny model (characters)"
        print(f"tokenizer: {name}; {N_TRAIN} train + {N_VALIDATION} validation problems")
        print(f"read both splits (grpo.data.datasets.load_examples): {read:.2f} s")
        print(f"check_config, cold tokenizer and token counts (data read cached): {timings[0]:.2f} s")
        print(f"check_config, warm (next job of a sweep): {timings[1]:.2f} s")


if __name__ == "__main__":
    main()
