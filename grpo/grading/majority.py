"""The majority answer of a problem's sampled responses (maj@k), answers grouped by the grader's
own equivalence.

Voting: each response's final answer (as its reward function grades it,
`grpo.grading.rewards.final_answer`) joins the first group, in response order, whose first answer
the grader takes it for (`same_answer(answer, first)`: the same normalization and math-verify
check as grading against a truth, so `1/2` and `\\frac{1}{2}` vote together); an answer no group
takes starts a group. Responses without an answer (not formatted, no gradable answer) do not
vote. The majority is the largest group; a tie goes to the group whose first response came first
(the earliest sampled). The problem's maj@k is that group's first response's reward (0 where no
response voted).
"""

from __future__ import annotations

from collections.abc import Sequence

from grpo.grading.rewards import same_answer


def majority_reward(answers: Sequence[str], rewards: Sequence[float]) -> float:
    """maj@k of one problem: the reward of the majority answer of its `k` responses.

    Args:
        answers: each response's final answer, in sampling order ("" = no answer, no vote).
        rewards: each response's reward (0-1), in the same order.

    Returns:
        The reward of the first response of the largest group of equivalent answers (ties: the
        group formed first); 0.0 where no response has an answer.
    """
    groups: list[list[int]] = []  # response indices, each group in response order
    for i, answer in enumerate(answers):
        if not answer:
            continue
        home = next((g for g in groups if same_answer(answer, answers[g[0]])), None)
        if home is None:
            groups.append([i])
        else:
            home.append(i)
    if not groups:
        return 0.0
    largest = max(groups, key=len)  # max keeps the first of equal sizes: the earliest group
    return float(rewards[largest[0]])
