"""The policy model: loading it and building the locally made ones.

`loading` (policy and tokenizer from `model.path` or a built model), `build` (the cache of built
models, `BUILDERS`, `python -m grpo.models.build`), `tiny` (the 125k-parameter Qwen2 with a
character tokenizer for the toy task) and `rehearsal` (the Qwen2.5-Math-shaped rehearsal model).

Imports: `grpo.data` (the builders' warm-up formats prompts) and below; not `grpo.rollout` or
`grpo.run`.
"""
