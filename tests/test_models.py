"""The tiny model build (grpo.models.tiny) and policy loading (grpo.models.loading)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig
from safetensors.torch import load_file
from transformers import PreTrainedTokenizerFast

from grpo.data.datasets import toy_examples
from grpo.models import build as model_build
from grpo.models import tiny
from grpo.models.loading import load_policy, load_tokenizer, tokenizer_pad_id

WELL_FORMED = re.compile(r"<answer>(\d+)</answer>")


def test_tiny_build_has_the_specified_size(tiny_model_cfg: DictConfig) -> None:
    model, tokenizer = load_policy(tiny_model_cfg, "cpu")
    assert sum(p.numel() for p in model.parameters()) == 124_672
    assert len(tokenizer) == model.config.vocab_size == 19
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.tie_word_embeddings
    # vLLM's CPU attention serves head sizes 32, 64, 80, ... only
    assert model.config.hidden_size // model.config.num_attention_heads == 32
    assert model.config.num_key_value_heads == 1


def test_tiny_builder_does_not_import_the_data_layer() -> None:
    code = "import sys, grpo.models.tiny; print(sorted(m for m in sys.modules if m.startswith('grpo')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "grpo.data.datasets" not in out.stdout and "grpo.models.tiny" in out.stdout


def test_build_command_builds_what_the_config_names(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    command = [sys.executable, "-m", "grpo.models.build", "model=tiny", "model.build_seed=1",
               "model.warmup_steps=1", "model.warmup_target_accuracy=null",
               f"paths.cache_dir={cache}"]
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    built = cache / "tiny-qwen2-seed1"
    assert out.stdout.strip() == f"tiny: {built}"
    info = json.loads((built / model_build.BUILD_INFO_FILE).read_text())
    assert (info["settings"]["seed"], info["warmup_steps_taken"]) == (1, 1)
    # built under the pinned CPU kernels (the command imports grpo first), and keyed by them: a
    # build cached under other kernels is not this model
    assert info["settings"]["cpu_capability"] == "AVX2"


def test_tiny_tokenizer_round_trip(tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(tiny_model_dir)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert type(tokenizer).__name__ != "Qwen2Tokenizer"
    text = "Q: 3+4 A:<answer>7</answer>"
    ids = tokenizer(text)["input_ids"]
    # 9 prompt characters + <answer> + 7 + </answer>: the tags are single tokens
    assert len(ids) == 12
    assert tokenizer.convert_ids_to_tokens(ids[9:]) == ["<answer>", "7", "</answer>"]
    assert tokenizer.decode(ids) == text
    # the tags are ordinary tokens: skipping special tokens drops only EOS / padding
    padded = [tokenizer.pad_token_id, *ids, tokenizer.eos_token_id]
    assert tokenizer.decode(padded, skip_special_tokens=True) == text
    assert tokenizer.padding_side == "left"
    assert tokenizer_pad_id(tokenizer) == 0 and tokenizer.eos_token_id == 1
    assert tiny.toy_prompt("3+4") == "Q: 3+4 A:"


def test_warmed_up_model_answers_well_formed_but_mostly_wrong(
    tiny_model_cfg: DictConfig, tiny_model_dir: Path
) -> None:
    model, tokenizer = load_policy(tiny_model_cfg, "cpu")
    prompts = [tiny.toy_prompt(ex.question) for ex in toy_examples()]
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    out = model.generate(**batch, do_sample=False, max_new_tokens=8)
    responses = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1]:],
                                       skip_special_tokens=True)
    assert all(WELL_FORMED.fullmatch(r) for r in responses), responses

    accuracy = tiny.greedy_accuracy(model, tokenizer)
    print(f"tiny model greedy accuracy after warm-up: {accuracy:.2f}")
    info = json.loads((tiny_model_dir / model_build.BUILD_INFO_FILE).read_text())
    assert accuracy == pytest.approx(info["greedy_accuracy"])
    # warmed up until it starts to use the operands, but mostly wrong: RL has room to improve
    settings = info["settings"]
    assert settings["warmup_steps"] <= info["warmup_steps_taken"] < settings["warmup_max_steps"]
    assert settings["warmup_target_accuracy"] <= accuracy < 0.5


@pytest.mark.parametrize("seed", [0, 1, 3])
def test_warm_up_stops_soon_after_the_model_starts_using_the_operands(
    tmp_path: Path, seed: int
) -> None:
    model_dir = tiny.build_tiny_model(tmp_path / "m", seed=seed)
    info = json.loads((model_dir / model_build.BUILD_INFO_FILE).read_text())
    # measured over seeds 0-7 (head size 32): 0.28-0.32 after 13-52 steps
    assert 0.25 <= info["greedy_accuracy"] <= 0.36
    assert 10 <= info["warmup_steps_taken"] < 300


def test_random_init_is_not_well_formed(tmp_path: Path) -> None:
    model_dir = tiny.build_tiny_model(tmp_path / "raw", warmup_steps=0, warmup_target_accuracy=None)
    model, tokenizer = load_policy({"path": str(model_dir)}, "cpu")
    assert tiny.greedy_accuracy(model, tokenizer) == 0.0


def test_build_is_deterministic_and_idempotent(tmp_path: Path) -> None:
    fixed = {"warmup_steps": 2, "warmup_target_accuracy": None}
    first = tiny.build_tiny_model(tmp_path / "a", seed=3, **fixed)
    second = tiny.build_tiny_model(tmp_path / "b", seed=3, **fixed)
    other_seed = tiny.build_tiny_model(tmp_path / "c", seed=4, **fixed)
    weights = [load_file(d / "model.safetensors") for d in (first, second, other_seed)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])

    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert tiny.build_tiny_model(first, seed=3, **fixed) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    # other settings replace a previous build in place
    tiny.build_tiny_model(first, seed=3, warmup_steps=1, warmup_target_accuracy=None)
    assert json.loads((first / model_build.BUILD_INFO_FILE).read_text())["warmup_steps_taken"] == 1
    assert not [p for p in tmp_path.iterdir() if ".build-" in p.name]  # no staging left over


def test_concurrent_builds_of_one_directory_build_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = []
    real_build_into = tiny._build_into

    def counting_build_into(directory, settings):
        builds.append(directory)
        return real_build_into(directory, settings)

    monkeypatch.setattr(tiny, "_build_into", counting_build_into)
    target = tmp_path / "shared"
    # flock locks belong to open file descriptions, so threads contend like processes do
    with ThreadPoolExecutor(max_workers=3) as pool:
        paths = list(pool.map(
            lambda _: tiny.build_tiny_model(target, warmup_steps=1, warmup_target_accuracy=None),
            range(3),
        ))
    assert paths == [target.resolve()] * 3
    assert len(builds) == 1
    assert (target / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".shared.lock", "shared"]


def test_build_leaves_the_callers_torch_state_alone(tmp_path: Path) -> None:
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    threads = torch.get_num_threads()
    tiny.build_tiny_model(tmp_path / "m", warmup_steps=1, warmup_target_accuracy=None)
    assert torch.equal(torch.rand(3), expected)
    assert torch.get_num_threads() == threads


def test_failed_build_leaves_nothing_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing_build_into(directory, settings):
        (directory / "partial.bin").write_bytes(b"half")
        raise RuntimeError("out of disk")

    monkeypatch.setattr(tiny, "_build_into", failing_build_into)
    with pytest.raises(RuntimeError, match="out of disk"):
        tiny.build_tiny_model(tmp_path / "m")
    assert [p.name for p in tmp_path.iterdir()] == [".m.lock"]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) - 100] ^= 0x10  # a weight's bit, far from the safetensors header
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_truncate, _flip_one_bit], ids=["truncated", "bit_flipped"])
@pytest.mark.parametrize("victim", ["model.safetensors", "tokenizer.json", model_build.BUILD_INFO_FILE])
def test_a_damaged_cached_build_is_rebuilt_not_loaded(
        tmp_path: Path, damage, victim: str, caplog: pytest.LogCaptureFixture) -> None:
    settings = {"warmup_steps": 1, "warmup_target_accuracy": None}
    built = tiny.build_tiny_model(tmp_path / "m", **settings)
    original = {p.name: p.read_bytes() for p in built.iterdir()}
    assert "manifest.json" in original
    damage(built / victim)
    with caplog.at_level("WARNING"):
        assert tiny.build_tiny_model(built, **settings) == built
    assert {p.name: p.read_bytes() for p in built.iterdir()} == original  # rebuilt bit-equal
    # a damaged build_info.json may no longer read as these settings: rebuilt without a word
    if victim != model_build.BUILD_INFO_FILE:
        assert f"the cached model in {built} fails its check ({victim}" in caplog.text


def test_build_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        tiny.build_tiny_model(tmp_path / "mine", warmup_steps=0)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_load_policy_builds_the_tiny_model_when_asked(tmp_path: Path) -> None:
    cfg = {"name": "tiny", "path": str(tmp_path / "built"), "build": "tiny",
           "build_seed": 1, "warmup_steps": 1, "warmup_target_accuracy": None, "precision": "bf16-true",
           "gradient_checkpointing": True, "max_seq_len": 64}
    model, _ = load_policy(cfg, torch.device("cpu"))
    info = json.loads((tmp_path / "built" / model_build.BUILD_INFO_FILE).read_text())
    assert (info["settings"]["seed"], info["warmup_steps_taken"]) == (1, 1)
    assert next(model.parameters()).dtype == torch.bfloat16
    # transformers >= 5.21 renamed it activation checkpointing; the locks hold 5.20 (vllm 0.33 pins < 5.21)
    assert getattr(model, "is_activation_checkpointing", None) or model.is_gradient_checkpointing
    assert not model.training


def test_missing_model_path_says_how_to_set_it(tmp_path: Path) -> None:
    cfg = {"name": "qwen2.5-math-1.5b", "path": str(tmp_path / "nowhere"), "build": None}
    with pytest.raises(FileNotFoundError) as err:
        load_policy(cfg, "cpu")
    message = str(err.value)
    assert "model.path" in message and str(tmp_path / "nowhere") in message
    assert "model.path=/path/to/Qwen2.5-Math-1.5B" in message and "conf/local" in message


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"max_seq_len": 257}, r"model\.max_seq_len=257 exceeds the 256 positions"),
        ({"precision": "fp64"}, r"unknown model\.precision 'fp64'"),
        ({"build": "huge"}, r"unknown model\.build 'huge'"),
    ],
)
def test_invalid_model_settings_name_the_key(
    tiny_model_cfg: DictConfig, override: dict, match: str
) -> None:
    tiny_model_cfg.merge_with(override)
    with pytest.raises(ValueError, match=match):
        load_policy(tiny_model_cfg, "cpu")
