"""Rollouts with transformers `generate` in a process of its own: `rollout=hf_process`.

The `hf` engine samples with the trained policy module itself, so generation and training take
turns. This engine runs the same sampling code (`grpo.rollout.hf.HFRolloutEngine`) in a spawned
child process that holds its own copy of the weights and runs on its own `rollout.threads`
cores (pinned to the last ones of the job's, the trainer keeping the others), so a generation can
run while the trainer trains: the CPU layout of `off_policy.staleness=1`.

`sync_weights` sends the policy's state dict to the child as safetensors bytes over a pipe (no
pickled tensors; a tied weight is sent as a copy of its own), between two generations only;
`generate` sends the prompts and sampling settings and waits for the child's rollouts. An error
in the child comes back as the same exception type where it is one of the engine's
(`NonFiniteLogitsError`), else as a RuntimeError naming it. The child is a daemon: it dies with
the trainer.
"""

from __future__ import annotations

import multiprocessing.connection
import os
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from transformers import (
    AutoModelForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from grpo.rollout.base import NonFiniteLogitsError, Rollout, RolloutEngine, SamplingSettings
from grpo.rollout.hf import HFRolloutEngine, min_length_end_ids
from grpo.rollout.specs import HF_PROCESS_NOT_ON_GPU, HFProcessSpec


class HFProcessRolloutEngine(RolloutEngine):
    """`HFRolloutEngine` in a child process with its own weights and `threads` cores.

    policy: the trained causal LM on the CPU; its config and weights are copied to the child.
    tokenizer: the policy's tokenizer (sent to the child).
    batch_size, max_model_len: as for `HFRolloutEngine`.
    threads: torch threads (and cores) of the child.
    """

    spec = HFProcessSpec

    def __init__(
        self,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        batch_size: int,
        max_model_len: int,
        threads: int,
    ) -> None:
        if next(policy.parameters()).device.type != "cpu":
            raise ValueError(HF_PROCESS_NOT_ON_GPU)
        if threads < 1:
            raise ValueError(f"rollout.threads must be >= 1, got {threads}")
        context = torch.multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_serve,
            args=(child_conn, policy.config, tokenizer, batch_size, max_model_len, threads,
                  next(policy.parameters()).dtype),
            daemon=True, name="hf_process-rollouts",
        )
        self._process.start()
        child_conn.close()
        self._policy, self._tokenizer = policy, tokenizer
        self._trainer_cores = _keep_first_cores(threads)
        self._call("ready")
        self.sync_weights(policy)

    @classmethod
    def from_config(
        cls,
        rollout_cfg: Mapping[str, Any],
        *,
        policy: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        model_path: str,
        seed: int,
        max_model_len: int,
    ) -> HFProcessRolloutEngine:
        """The engine for `rollout=hf_process` (keys: batch_size, threads)."""
        return cls(policy, tokenizer, batch_size=int(rollout_cfg["batch_size"]),
                   max_model_len=max_model_len, threads=int(rollout_cfg["threads"]))

    def _call(self, *message: Any) -> Any:
        """Send `message` to the child and return its answer, re-raising its error."""
        if self._process is None:
            raise RuntimeError("the hf_process rollout engine is closed")
        try:
            self._conn.send(message)
            status, payload = self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError) as err:
            raise RuntimeError(f"the hf_process rollout engine's process ended "
                               f"(exit code {self._process.exitcode})") from err
        if status == "ok":
            return payload
        kind, text = payload
        raise (NonFiniteLogitsError if kind == NonFiniteLogitsError.__name__ else RuntimeError)(
            text if kind == NonFiniteLogitsError.__name__ else f"{kind} in the rollout process: {text}")

    def min_length_end_ids(self, stop: Sequence[str]) -> tuple[int, ...]:
        """As the hf engine's, whose code the child runs."""
        return min_length_end_ids(self._policy, self._tokenizer, stop)

    def _generate(self, prompts: list[str], n: int, sampling: SamplingSettings) -> list[list[Rollout]]:
        """Sample `n` responses per prompt in the child; len(prompts) groups of `n` Rollouts."""
        return self._call("generate", prompts, n, sampling)

    def sync_weights(self, policy: torch.nn.Module) -> None:
        """Copy `policy`'s current weights into the child's model."""
        weights = {name: tensor.detach().to("cpu").clone()
                   for name, tensor in policy.state_dict().items()}
        self._call("sync", save_safetensors(weights))

    def close(self) -> None:
        """Stop the child process."""
        if self._process is None:
            return
        try:
            self._conn.send(("close",))
        except (BrokenPipeError, OSError):
            pass
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        self._process = None
        if self._trainer_cores is not None:
            os.sched_setaffinity(0, self._trainer_cores)


def _keep_first_cores(threads: int) -> set[int] | None:
    """Run this process (the trainer) on its cores but the last `threads` (the child's); returns
    the cores it had, which `close` gives back; None where it cannot choose or has too few."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= threads:
        return None
    os.sched_setaffinity(0, cores[:-threads])
    return set(cores)


def _pin_last_cores(threads: int) -> None:
    """Run this process on the last `threads` of the cores it may use (where it may choose)."""
    if not hasattr(os, "sched_getaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > threads:
        os.sched_setaffinity(0, cores[-threads:])


def _serve(
    conn: multiprocessing.connection.Connection,
    config: PretrainedConfig,
    tokenizer: PreTrainedTokenizerBase,
    batch_size: int,
    max_model_len: int,
    threads: int,
    dtype: torch.dtype,
) -> None:
    """The child: build the model, then answer ready / sync / generate / close messages."""
    _pin_last_cores(threads)
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.eval()
    engine = HFRolloutEngine(model, tokenizer, batch_size=batch_size, max_model_len=max_model_len)
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        if kind == "close":
            return
        try:
            if kind == "ready":
                answer = None
            elif kind == "sync":
                model.load_state_dict(load_safetensors(message[1]))
                answer = None
            elif kind == "generate":
                answer = engine.generate(*message[1:])
            else:
                raise ValueError(f"unknown message {kind!r}")
        except NonFiniteLogitsError as err:
            conn.send(("error", (type(err).__name__, str(err))))
            continue
        except Exception as err:  # sent back to the trainer, which raises it with the child's traceback
            conn.send(("error", (type(err).__name__, f"{err}\n{traceback.format_exc()}")))
            continue
        conn.send(("ok", answer))
