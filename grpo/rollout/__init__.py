"""Rollout engines: sample responses to prompts from the current policy.

`specs` (what each engine provides and needs, `ENGINE_SPECS`: torch-free, read by the config
validator and the dry run), `base` (the engine interface, `RolloutEngine`), `engines` (`ENGINES`
and `build_engine`, which builds one from the `rollout` config group), the engines `hf`,
`hf_process` and `vllm`, and `vllm_adapter` (the vLLM internals the project relies on, behind one
adapter with a version test).

Imports: `grpo.run` and below. This package's `__init__` imports nothing, so that importing
`grpo.rollout.specs` does not import torch.
"""
