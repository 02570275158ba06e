"""Shared fixtures: the warmed-up tiny model (built once per test session) and sample data."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from grpo.tiny import build_tiny_model

DATA_DIR = Path(__file__).parent / "data"
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the tiny model built as conf/model/tiny.yaml builds it (its build_seed and
    warmup_steps), shared by the whole session; treat it as read-only."""
    conf = OmegaConf.load(CONF_DIR / "model" / "tiny.yaml")
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "tiny-qwen2",
        seed=conf.build_seed, warmup_steps=conf.warmup_steps,
    )


@pytest.fixture
def tiny_model_cfg(tiny_model_dir: Path) -> DictConfig:
    """A `model` config (as in conf/model/tiny.yaml) that loads the session's tiny model."""
    return OmegaConf.create({
        "name": "tiny",
        "path": str(tiny_model_dir),
        "build": None,
        "dtype": "float32",
        "attn_implementation": None,
        "gradient_checkpointing": False,
        "max_seq_len": 64,
    })


@pytest.fixture
def math_sample_path() -> Path:
    """A MATH-format jsonl of 8 problems; lines 3, 4, 5 and 7 have no `answer` field (line 4's
    solution has two \\boxed{}, the last one, 42, is the answer)."""
    return DATA_DIR / "math_sample.jsonl"
