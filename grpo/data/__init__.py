"""What the policy is asked: datasets, the toy task and the prompt templates.

`datasets` (jsonl datasets, the generated toy task as examples, the resumable prompt sampler),
`toy_task` (the toy addition problems), `prompts` (templates under `templates/` and the reward
function each one pairs with, `PROMPT_REWARD_PAIRS`).

Imports: `grpo.grading` (ground truths are extracted and prompts paired with reward functions)
and below.
"""
