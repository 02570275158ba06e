"""pass@k, pass@1, mean@k and maj@k of an evaluation (issue 60, item 1): the estimator, the
majority vote by the grader's equivalence, and a real run's logged values against a hand count of
its saved responses."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from test_trainer import read_metrics, toy_config

from grpo.grading.majority import majority_reward
from grpo.run.outcomes import EvalOutcomes, pass_at_k, read_outcomes, write_outcomes
from grpo.training.trainer import train


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    """1 - C(n-c, k)/C(n, k) on hand-counted cases whose errors do not cancel."""
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)=3, C(4,2)=6
    assert pass_at_k(5, 2, 3) == pytest.approx(1 - 1 / 10)  # C(3,3)=1, C(5,3)=10
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - 21 / 45)  # C(7,2)=21, C(10,2)=45
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # pass@1 = c/n
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(4, 1, 5)


def test_majority_groups_answers_by_the_graders_equivalence_and_breaks_ties_to_the_earliest() -> None:
    # 1/2, \frac{1}{2} and 0.5 are one answer to the grader: 3 votes against 3's 2
    assert majority_reward(["3", "1/2", "\\frac{1}{2}", "3", "0.5"], [0, 1, 1, 0, 1]) == 1.0
    # by exact text 3 would win (2 votes against 1 each)
    assert Counter(["3", "1/2", "\\frac{1}{2}", "3", "0.5"]).most_common(1)[0][0] == "3"
    # a tie (2 against 2): the group sampled first, whichever comes first
    assert majority_reward(["4", "3", "3", "4"], [0, 1, 1, 0]) == 0.0
    assert majority_reward(["3", "4", "4", "3"], [1, 0, 0, 1]) == 1.0
    # responses without an answer do not vote; none at all: 0
    assert majority_reward(["", "", "7", ""], [0, 0, 1, 0]) == 1.0
    assert majority_reward(["", ""], [0, 0]) == 0.0


def test_outcomes_keep_counts_and_recompute_every_metric(tmp_path: Path) -> None:
    """An outcomes file written with counts and majorities gives back each metric."""
    outcomes = EvalOutcomes(3, 4, "a" * 64, (0.25, 0.0, 1.0), (1, 0, 4), (0.0, 0.0, 1.0))
    write_outcomes(tmp_path, outcomes)
    kept = read_outcomes(tmp_path, 3)
    assert kept == outcomes
    assert kept.per_problem("pass@k") == (1.0, 0.0, 1.0)
    assert kept.per_problem("pass@1") == (0.25, 0.0, 1.0)
    assert kept.per_problem("maj@k") == (0.0, 0.0, 1.0)
    assert kept.means() == pytest.approx({"reward": 1.25 / 3, "mean@k": 1.25 / 3,
                                          "pass@1": 1.25 / 3, "pass@k": 2 / 3, "maj@k": 1 / 3})
    # a count above k is crafted: no record
    data = json.loads(kept.to_json())
    data["correct"] = [5, 0, 4]
    (tmp_path / "eval_outcomes" / "step_000003.json").write_text(json.dumps(data))
    assert read_outcomes(tmp_path, 3) is None
    # a file from before the counts: reward only, pass@k unknown
    del data["correct"], data["majority"]
    (tmp_path / "eval_outcomes" / "step_000003.json").write_text(json.dumps(data))
    old = read_outcomes(tmp_path, 3)
    assert old.per_problem("pass@k") is None and "pass@k" not in old.means()


def test_an_outcome_file_names_each_problem_by_its_fingerprint(tmp_path: Path) -> None:
    """Each problem's fingerprint (its question and answer) is kept problem by problem, so two
    sets of problems can be compared one problem at a time; a crafted list is refused naming it."""
    from grpo.data.datasets import Example
    from grpo.run.outcomes import (
        CONFIRM_DIR,
        checked_outcomes,
        problem_fingerprint,
        problem_fingerprints,
        shared_problems,
    )

    problems = [Example("1+2", "3"), Example("2+1", "3"), Example("1+2", "4")]
    prints = problem_fingerprints(problems)
    assert len(set(prints)) == 3 and all(len(p) == 16 for p in prints)
    assert problem_fingerprint(Example("1+2", "3", source="elsewhere:9")) == prints[0]
    assert shared_problems(prints, problem_fingerprints([Example("2+1", "3"), Example("9", "9")])) \
        == [prints[1]]
    outcomes = EvalOutcomes(4, 1, "c" * 64, (1.0, 0.0, 1.0), (1, 0, 1), (1.0, 0.0, 1.0), prints)
    write_outcomes(tmp_path, outcomes, CONFIRM_DIR)
    assert read_outcomes(tmp_path, 4) is None, "a confirmation is not an evaluation"
    assert read_outcomes(tmp_path, 4, CONFIRM_DIR) == outcomes
    path = tmp_path / CONFIRM_DIR / "step_000004.json"
    data = json.loads(path.read_text())
    for crafted, words in ((prints[:2], "problems is not a list of 3 fingerprints (one per reward)"),
                           ([prints[0], "XYZ", prints[2]], "problems[1]='XYZ' is not a problem's "
                            "fingerprint (16 hex digits)"),
                           ([prints[0], 7, prints[2]], "problems[1]=7 is not a problem's "
                            "fingerprint (16 hex digits)")):
        path.write_text(json.dumps({**data, "problems": crafted}))
        assert checked_outcomes(tmp_path, 4, CONFIRM_DIR) == words
    del data["problems"]  # a file from before fingerprints: still read, problems unknown
    path.write_text(json.dumps(data))
    assert read_outcomes(tmp_path, 4, CONFIRM_DIR).problems is None


def _toy_answer(response: str) -> str:
    """The hand count's reading of a toy answer: the text of the last <answer> pair, as an int."""
    close = response.rfind("</answer>")
    open_ = response.rfind("<answer>", 0, max(close, 0))
    text = response[open_ + len("<answer>"):close].strip() if close >= 0 and open_ >= 0 else ""
    return str(int(text)) if text.isdigit() else text


@pytest.mark.slow
def test_four_samples_a_problem_log_pass_and_majority_as_a_hand_count(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """eval.samples_per_problem=4 on the tiny model (sampled at temperature 1): every evaluation
    logs pass@4 >= pass@1, pass@1 the mean of the problems' mean@4, maj@4 from the answers; each
    equal to a count of the saved responses."""
    cfg = toy_config(tiny_model_dir, "n_grpo_steps=2", "eval.eval_every=1", "eval.temperature=1.0",
                     "eval.samples_per_problem=4", "eval.n_saved_samples=100",
                     "logging.wandb_mode=disabled")
    train(cfg, tmp_path)
    evaluations = [r for r in read_metrics(tmp_path) if "eval/reward" in r]
    assert [r["step"] for r in evaluations] == [0, 1, 2]
    spread = []
    for record in evaluations:
        samples = [json.loads(line) for line in
                   (tmp_path / "rollouts" / f"eval_step_{record['step']:06d}.jsonl").read_text().splitlines()]
        assert len(samples) == 100  # 25 problems x 4
        by_problem = [samples[4 * i:4 * i + 4] for i in range(25)]
        right = [sum(s["reward"] for s in group) for group in by_problem]
        majority = []
        for group in by_problem:
            votes = Counter(a for a in map(_toy_answer, (s["response"] for s in group)) if a)
            if not votes:
                majority.append(0.0)
                continue
            top = max(votes.values())
            first = next(a for a in map(_toy_answer, (s["response"] for s in group)) if votes.get(a) == top)
            majority.append(next(s["reward"] for s in group if _toy_answer(s["response"]) == first))
        assert record["eval/pass@1"] == pytest.approx(sum(right) / 100)
        assert record["eval/mean@k"] == pytest.approx(record["eval/reward"])
        assert record["eval/pass@k"] == pytest.approx(sum(c > 0 for c in right) / 25)
        assert record["eval/maj@k"] == pytest.approx(sum(majority) / 25)
        assert record["eval/pass@k"] >= record["eval/pass@1"]
        kept = read_outcomes(tmp_path, record["step"])
        assert list(kept.correct) == right
        assert list(kept.majority) == majority
        assert kept.per_problem("pass@1") == pytest.approx([c / 4 for c in right])
        spread.append(sum(0 < c < 4 for c in right))
    # the hand count is not trivial: some problems had both right and wrong responses
    assert sum(spread) > 0 and not math.isnan(evaluations[0]["eval/pass@k"])


def _metric_sweep(sweep: Path, metric: str) -> None:
    """Two configs x 2 seeds, 4 responses a problem: lr=1 has the higher mean reward, lr=2 the
    higher pass@k; outcome files keep counts that give exactly the logged values."""
    from analysis.readers.synthetic import BASE_CONFIG, config_with, write_multirun, write_run

    base = config_with({"analysis.metric": metric, "eval.samples_per_problem": 4}, BASE_CONFIG)
    write_multirun(sweep, ["learning_rate=1,2", "seed=0,1"], config=base)
    # per problem (8 problems): lr=1 right 2 of 4 on every problem; lr=2 right 4 of 4 on 3 of them
    correct = {1: [2] * 8, 2: [4, 4, 4, 0, 0, 0, 0, 0]}
    job = 0
    for lr in (1, 2):
        for seed in (0, 1):
            run = sweep / str(job)
            rows = []
            for step in (0, 10, 20):
                counts = correct[lr] if step else [0] * 8
                outcomes = EvalOutcomes(step, 4, "b" * 64, tuple(c / 4 for c in counts),
                                        tuple(counts), tuple(float(c > 2) for c in counts))
                write_outcomes(run, outcomes)
                means = outcomes.means()
                rows.append({"step": step, "eval/reward": means["reward"],
                             **{f"eval/{m}": v for m, v in means.items() if m != "reward"},
                             "time/elapsed_s": 1.0 + step, "time/elapsed_no_eval_s": float(step)})
            write_run(run, {"learning_rate": lr, "seed": seed}, rows,
                      {"status": "completed", "last_step": 20, "n_grpo_steps": 20},
                      base=config_with({"n_grpo_steps": 20}, base))
            job += 1


@pytest.mark.parametrize("metric", ["reward", "pass@k", "pass@1", "maj@k"])
def test_analysis_metric_picks_what_the_ranking_and_report_read(tmp_path: Path, metric: str) -> None:
    """The ranking reads each config's late value of analysis.metric, hand-counted: lr=1 (2 of 4
    right everywhere) reads 0.5 by reward and pass@1, 1.0 by pass@4 (any right), 0 by maj@4 (a
    majority needs 3); lr=2 (4 of 4 on 3 of 8 problems) reads 3/8 by each."""
    from analysis.decisions.ranking import rank
    from analysis.outputs.report import build_report
    from analysis.readers.collect import collect

    _metric_sweep(tmp_path / "s", metric)
    collection = collect([tmp_path / "s"])
    assert collection.metric == metric
    ranking = rank(collection)
    table = ranking.table
    expected = {"reward": (0.5, 3 / 8), "pass@k": (1.0, 3 / 8), "pass@1": (0.5, 3 / 8),
                "maj@k": (0.0, 3 / 8)}[metric]
    assert table.loc["learning_rate=1", "late_eval_reward"] == pytest.approx(expected[0])
    assert table.loc["learning_rate=2", "late_eval_reward"] == pytest.approx(expected[1])
    assert ranking.data_problems == []  # the outcome files agree with the logged metric
    # the per-run summary reads the same metric: lr=1's runs are jobs 0 and 1
    runs = collection.runs.set_index("job")
    for job, value in ((0, expected[0]), (1, expected[0]), (2, expected[1]), (3, expected[1])):
        assert runs.loc[job, "final_eval_reward"] == pytest.approx(value)
        assert runs.loc[job, "best_eval_reward"] == pytest.approx(value)
        assert runs.loc[job, "best_eval_step"] == 10
    report = build_report(collection, tmp_path / "s", ranking=ranking)
    assert ("Every evaluation is read as its" in report) == (metric != "reward")
    assert f"of each evaluation's {metric} (`analysis.metric={metric}`)" in report
    header = next(line for line in report.splitlines() if line.startswith("| run |"))
    assert f"| final eval {metric} | best eval {metric} (step) |" in header
    row = next(line for line in report.splitlines() if line.startswith(f"| `{tmp_path.name}/s/0` |"))
    assert f"| {expected[0]:.3f} | {expected[0]:.3f} (10) |" in row


CRAFTED_OUTCOMES = {
    # (field, what is written at index 0 of lr=1's seed-0 run at step 20, the message's words)
    "a count that contradicts its reward": ("correct", "4", "correct[0]=4 contradicts reward[0]=0.5: "
                                            "rewards are 0 or 1, so 4 right of 4 is a mean reward of 1"),
    "a count above k": ("correct", "5", "correct[0]=5 is not a count of right responses 0..4"),
    "a negative count": ("correct", "-1", "correct[0]=-1 is not a count of right responses 0..4"),
    "a fractional count": ("correct", "2.5", "correct[0]=2.5 is not a count of right responses 0..4"),
    "a float count": ("correct", "2.0", "correct[0]=2.0 is not a count of right responses 0..4"),
    "a nan count": ("correct", "NaN", "correct[0]=nan is not a count of right responses 0..4"),
    "an infinite count": ("correct", "Infinity", "correct[0]=inf is not a count of right responses 0..4"),
    "a count as a string": ("correct", '"2"', "correct[0]='2' is not a count of right responses 0..4"),
    "a majority above 1": ("majority", "1.5", "majority[0]=1.5 is not a reward in [0, 1]"),
    "a negative majority": ("majority", "-0.5", "majority[0]=-0.5 is not a reward in [0, 1]"),
    "a nan majority": ("majority", "NaN", "majority[0]=nan is not a reward in [0, 1]"),
    "a majority as a string": ("majority", '"1"', "majority[0]='1' is not a reward in [0, 1]"),
    "a true majority": ("majority", "true", "majority[0]=True is not a reward in [0, 1]"),
}


@pytest.mark.parametrize("case", CRAFTED_OUTCOMES)
def test_a_crafted_outcome_file_is_refused_naming_its_field(tmp_path: Path, case: str) -> None:
    """An outcome file crafted in one field (the logged means still agree: the reward is
    untouched) is no record, and the ranking says in one line which file and field, and what to
    do; the other runs' outcomes are still read."""
    from analysis.decisions.ranking import rank
    from analysis.readers.collect import collect

    field, text, words = CRAFTED_OUTCOMES[case]
    _metric_sweep(tmp_path / "s", "reward")
    crafted = tmp_path / "s" / "0" / "eval_outcomes" / "step_000020.json"
    data = json.loads(crafted.read_text())
    data[field][0] = "__CRAFTED__"
    crafted.write_text(json.dumps(data).replace('"__CRAFTED__"', text))
    assert read_outcomes(tmp_path / "s" / "0", 20) is None
    assert read_outcomes(tmp_path / "s" / "0", 10) is not None
    ranking = rank(collect([tmp_path / "s"]))
    assert ranking.data_problems == [
        f"`{tmp_path.name}/s/0`: eval_outcomes/step_000020.json: {words}: its outcomes are not "
        "used (the trainer writes none such); train the run again to compare it problem by problem"]
