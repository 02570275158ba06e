"""Grade a final answer against a ground truth as a careful person would, in bounded time.

Both answers are first rewritten into canonical parts (`answer_parts`):

1. Unicode math becomes LaTeX: ½ -> 1/2, √2 -> \\sqrt{2}, x² -> x^{2}, ∞, π, ≤, − (minus), ...
2. Typography goes: `$`, `\\left`/`\\right`, spacing commands, `\\text{}`-like wrappers and
   `\\boxed{}` (their content stays), percent and degree signs, thousands separators;
   `\\dfrac`/`\\tfrac` become `\\frac`, `\\frac12` becomes `\\frac{1}{2}`.
3. Numbers written in words become digits ("twenty-one" -> 21, "two thirds" -> 2/3), and mixed
   numbers become fractions ("2 1/2" and MATH's `2\\frac{1}{2}` -> 5/2).
4. The answer is split into alternatives at the words "or" and "and" and at top-level commas.
5. Each part: a number among plain words is that number ("12 apples", "The answer is 42."); a
   leading "x =" or "x \\in" goes; an inequality in one variable becomes its interval
   ("x > 2" -> (2,\\infty)), parts that are all inequalities join into one union; spaces go.

Then, cheapest first:

- Several parts against a ground truth that is a single answer is a hedge ("2 or 3",
  "\\boxed{2}, \\boxed{3}", "2, 3, 4") and is wrong even when one part is right. Several parts
  are right only against a ground truth that is itself a list or a set (all the solutions), and
  are compared with it as sets.
- Equal parts are right.
- Plain numbers on both sides (integers, decimals, fractions, repeating decimals `0.\\overline{3}`,
  `0.(3)`, `0.333...`, e notation `1.5e3`) are compared exactly as rationals, and that decides:
  0.5 = \\frac{1}{2}, but 0.333 != \\frac{1}{3}.
- Anything else goes to math-verify (`grpo.grading.math_verify_process`: a helper process, bounded by
  `timeout_s` CPU seconds), where a plain-number prediction never equals an irrational ground truth
  (1.41421356 is not \\sqrt{2}).

Time: an answer longer than `MAX_ANSWER_CHARS` is wrong without being read, and every regular
expression here is linear in its input (no two quantifiers can match the same characters), so a
call costs well under a millisecond per hundred characters besides math-verify's bounded time.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from grpo.grading.math_verify_process import DEFAULT_TIMEOUT_S, math_verify_equal

MAX_ANSWER_CHARS = 1000
"""Longest answer, in characters, that can be graded correct (predicted or ground truth, after
extraction from the response). Final answers in MATH and GSM8K are far shorter (long matrices
and expressions are a few hundred characters at most), so a longer one is wrong without being
read; the bound also caps the cost of every normalization step and of math-verify's parse."""

# ----------------------------------------------------------------------------------------------
# Unicode math to LaTeX.

_UNICODE_SYMBOLS = {
    "\u2212": "-",  # minus sign
    "\u2013": "-",  # en dash
    "\u2044": "/",  # fraction slash
    "∞": "\\infty ",
    "π": "\\pi ",
    "θ": "\\theta ",
    "≤": "\\le ",
    "≥": "\\ge ",
    "≠": "\\ne ",
    "×": "\\times ",
    "·": "\\cdot ",
    "⋅": "\\cdot ",
    "÷": "\\div ",
    "±": "\\pm ",
    "∓": "\\mp ",
    "∪": "\\cup ",
    "∩": "\\cap ",
    "∈": "\\in ",
    "°": "^\\circ ",
}
_ROOT_INDEX = {"√": "", "∛": "[3]", "∜": "[4]"}
_CLOSING = {"(": ")", "{": "}", "[": "]"}


def _unicode_char(char: str) -> str:
    """LaTeX for one non-ASCII character (its compatibility form when it has no symbol entry)."""
    if char in _UNICODE_SYMBOLS:
        return _UNICODE_SYMBOLS[char]
    compatible = unicodedata.normalize("NFKC", char)
    return _UNICODE_SYMBOLS.get(compatible, compatible)


def _matching_brackets(text: str) -> dict[int, int]:
    """Index of the closing bracket that matches each opening "(", "[" or "{" of `text` (one
    linear pass; an unmatched bracket has no entry)."""
    matches: dict[int, int] = {}
    open_at: dict[str, list[int]] = {opening: [] for opening in _CLOSING}
    closing_to_opening = {closing: opening for opening, closing in _CLOSING.items()}
    for i, char in enumerate(text):
        if char in open_at:
            open_at[char].append(i)
        elif char in closing_to_opening and open_at[closing_to_opening[char]]:
            matches[open_at[closing_to_opening[char]].pop()] = i
    return matches


def _root_argument(text: str, start: int, brackets: dict[int, int]) -> tuple[str, int]:
    """The radicand written after a root sign at text[start:], and the index just past it: a
    bracketed group (`brackets` from `_matching_brackets`), a run of digits, a LaTeX command name
    or one letter ("" if none)."""
    if start >= len(text):
        return "", start
    first = text[start]
    if first in _CLOSING:
        end = brackets.get(start)
        return ("", start) if end is None else (text[start + 1 : end], end + 1)
    end = start + 1
    if first.isdigit():
        while end < len(text) and (text[end].isdigit() or text[end] == "."):
            end += 1
    elif first == "\\":
        while end < len(text) and text[end].isalpha():
            end += 1
    elif not first.isalpha():
        return "", start
    return text[start:end], end


def _unicode_to_latex(text: str) -> str:
    """Rewrite unicode math as LaTeX: symbols from `_UNICODE_SYMBOLS`, root signs with their
    radicand, super/subscript runs as ^{...}/_{...}, vulgar fractions as a/b (after a digit, as
    the fraction part of a mixed number: 2½ -> 2 1/2), anything else by NFKC."""
    if text.isascii():
        return text
    out: list[str] = []
    brackets = _matching_brackets(text) if any(root in text for root in _ROOT_INDEX) else {}
    i = 0
    while i < len(text):
        char = text[i]
        i += 1
        if char.isascii():
            out.append(char)
            continue
        if char in _ROOT_INDEX:
            argument, i = _root_argument(text, i, brackets)
            out.append(f"\\sqrt{_ROOT_INDEX[char]}{{{argument}}}")
            continue
        kind = unicodedata.decomposition(char).split(" ")[0]
        if kind in ("<super>", "<sub>"):
            run = [char]
            while i < len(text) and unicodedata.decomposition(text[i]).startswith(kind):
                run.append(text[i])
                i += 1
            script = "".join(_unicode_char(c) for c in run)
            out.append(("^{" if kind == "<super>" else "_{") + script + "}")
        elif kind == "<fraction>":
            if out and out[-1][-1:].isdigit():
                out.append(" ")
            out.append(unicodedata.normalize("NFKC", char).replace("\u2044", "/"))
        else:
            out.append(_unicode_char(char))
    return "".join(out)


# ----------------------------------------------------------------------------------------------
# Typography, numbers in words, mixed numbers.

_SPACING = re.compile(r"(\\\\)|\\[,;:> ]|\\q?quad(?![A-Za-z])|~")  # keeps a row break \\
_DELETED = (
    "\\!",
    "\\left",
    "\\right",
    "\\displaystyle",
    "\\$",
    "$",
    "\\%",
    "%",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "\\degree",
)
_WRAPPER = re.compile(
    r"\\(?:text|textbf|textit|textrm|textsf|textnormal|mathrm|mathbf|mathit|mathsf|mbox"
    r"|operatorname|boxed|fbox)\s*\{([^{}]*)\}"
)
_MAX_WRAPPER_NESTING = 4
_FRAC_SHORT = re.compile(r"\\frac(\d)(\d)")
_FRAC_SHORT_NUMERATOR = re.compile(r"\\frac(\d)\{")
_FRAC_SHORT_DENOMINATOR = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\w)")
_THOUSANDS = re.compile(r"(?<![\d.,(\[])\d{1,3}(?:(?:,|\\,)\d{3})+(?![\d)\]]|,\d)")
_SCALE_AND = re.compile(r"\b(hundred|thousand|million|billion)\s+and\b", re.IGNORECASE)

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = {
    word: 10 * k
    for k, word in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)
}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}
_DENOMINATORS = {"half": 2, "halves": 2, "quarter": 4, "quarters": 4} | {
    form: k
    for k, word in enumerate("third fourth fifth sixth seventh eighth ninth tenth".split(), 3)
    for form in (word, word + "s")
}
_NUMBER_WORD = "|".join(
    sorted([*_UNITS, *_TENS, "hundred", *_SCALES, *_DENOMINATORS], key=len, reverse=True)
)
_NUMBER_WORDS = re.compile(rf"\b(?:{_NUMBER_WORD})\b(?:[\s-]+(?:{_NUMBER_WORD})\b)*", re.IGNORECASE)

_MIXED_SLASH = re.compile(r"(?<![\w.\\/^_])(-?)(\d+)\s+(\d+)\s*/\s*(\d+)(?![\w./])")
_MIXED_FRAC = re.compile(r"(?<![\w.\\/^_}])(-?)(\d+)\s*\\frac\{(\d+)\}\{(\d+)\}")


def _words_to_number(match: re.Match) -> str:
    """Digits for a run of number words ("twenty-one" -> "21", "two thirds" -> "2/3"); the run
    itself when it is not one number ("one two", "third")."""
    words = re.split(r"[\s-]+", match.group().lower())
    denominator = _DENOMINATORS.get(words[-1])
    if denominator is not None:
        words.pop()
    total = current = 0
    previous = ""
    for word in words:
        if word in _UNITS:
            value = _UNITS.index(word)
            if previous == "unit" or (previous == "tens" and value >= 10):
                return match.group()
            current, previous = current + value, "unit"
        elif word in _TENS and previous not in ("unit", "tens"):
            current, previous = current + _TENS[word], "tens"
        elif word == "hundred":
            current, previous = (current or 1) * 100, "hundred"
        elif word in _SCALES:
            total, current, previous = total + (current or 1) * _SCALES[word], 0, "scale"
        else:  # a denominator inside the run, or tens after a unit ("five twenty")
            return match.group()
    if not words:
        return match.group()
    value = total + current
    return f"{value}/{denominator}" if denominator else str(value)


def _mixed_number(match: re.Match) -> str:
    """The value of a mixed number ("2 1/2" -> "5/2"); unchanged unless the fraction is proper."""
    sign, whole, numerator, denominator = match.groups()
    if not 0 < int(numerator) < int(denominator):
        return match.group()
    value = int(whole) + Fraction(int(numerator), int(denominator))
    return str(-value if sign else value)


def _clean(answer: str) -> str:
    """Steps 1-3 of the module docstring (spaces kept)."""
    s = _unicode_to_latex(answer).replace("{,}", ",")
    s = _THOUSANDS.sub(lambda m: m.group().replace("\\,", "").replace(",", ""), s)
    s = _SPACING.sub(lambda m: m.group(1) or " ", s)
    for token in _DELETED:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for _ in range(_MAX_WRAPPER_NESTING):
        s, n_unwrapped = _WRAPPER.subn(r" \1 ", s)
        if not n_unwrapped:
            break
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_SHORT_NUMERATOR.sub(r"\\frac{\1}{", s)
    s = _FRAC_SHORT_DENOMINATOR.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _SCALE_AND.sub(r"\1", s)
    s = _NUMBER_WORDS.sub(_words_to_number, s)
    s = _MIXED_SLASH.sub(_mixed_number, s)
    s = _MIXED_FRAC.sub(_mixed_number, s)
    return s.strip()


# ----------------------------------------------------------------------------------------------
# Alternatives, and each part on its own.

_ALTERNATIVE_WORD = re.compile(r"\b(?:or|and)\b", re.IGNORECASE)
_EITHER = re.compile(r"\beither\b", re.IGNORECASE)
_SEPARATOR = "\x00"


def _split_alternatives(text: str) -> list[str]:
    """Split at the words "or"/"and" (anywhere) and at commas and semicolons outside brackets."""
    text = _ALTERNATIVE_WORD.sub(_SEPARATOR, _EITHER.sub(" ", text))
    parts, start, depth = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{" or text.startswith("\\begin{", i):
            depth += 1
        elif char in ")]}" or text.startswith("\\end{", i):
            depth = max(depth - 1, 0)
        elif char == _SEPARATOR or (char in ",;" and depth == 0):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


_ANSWER_PREFIX = re.compile(
    r"(?:(?:so|thus|therefore|hence),?\s+)?(?:the\s+)?(?:final\s+)?answer\s*(?:is|:)\s*:?",
    re.IGNORECASE,
)
_ASSIGNMENT = re.compile(r"[A-Za-z]\s*=([^=]+)")
_MEMBERSHIP = re.compile(r"[A-Za-z]\s*\\in(?![A-Za-z])")
_NUMBER_TOKEN = re.compile(r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)(?:/\d+)?")
_WORD_TOKEN = re.compile(r"[A-Za-z][A-Za-z']*(?:/[A-Za-z]+)?(?:\^\{?\d\}?)?|\^\{?\d\}?")
_NOT_UNIT_WORDS = frozenset(
    {"pi", "sqrt", "inf", "infinity", "ln", "log", "sin", "cos", "tan", "mod", "squared", "cubed"}
    | {"not", "no", "never", "except", "than", "least", "most", "over", "under", "minus"}
    | {"negative", "about", "around", "approximately", "roughly", "nearly", "almost", "maybe"}
    | {"perhaps", "possibly", "probably"}
)
"""Words that change the meaning of a number next to them (math words, bounds, negations,
estimates): a phrase with one of them is not just its number."""
_ONE_LETTER_WORDS = frozenset({"a", "A", "I"})


def _number_among_words(part: str) -> str | None:
    """The number in a phrase of one number and plain words ("12 apples", "She has 7 left."),
    or None (no number, several numbers, a variable, an operator or a word of
    `_NOT_UNIT_WORDS` in the way)."""
    tokens = [token.rstrip(".,;:!?") for token in part.split()]
    tokens = [token for token in tokens if token]
    numbers = [i for i, token in enumerate(tokens) if _NUMBER_TOKEN.fullmatch(token)]
    if len(numbers) != 1 or len(tokens) < 2:
        return None
    number = tokens.pop(numbers[0])
    for word in tokens:
        if not _WORD_TOKEN.fullmatch(word) or word.lower() in _NOT_UNIT_WORDS:
            return None
        if len(word) == 1 and word not in _ONE_LETTER_WORDS:
            return None
    return number


_RELATION = re.compile(r"(<=|>=|<|>|\\(?:leqslant|geqslant|leq|geq|le|ge|lt|gt)(?![A-Za-z]))")
_LESS = frozenset({"<", "<=", "\\le", "\\leq", "\\leqslant", "\\lt"})
_STRICT = frozenset({"<", ">", "\\lt", "\\gt"})
_VARIABLE = re.compile(r"[A-Za-z]|\\(?:alpha|beta|gamma|theta|phi|lambda|mu|omega)")


def _inequality_interval(part: str) -> str | None:
    """The interval that an inequality in one variable describes, e.g. "x > 2" -> "(2,\\infty)",
    "-1 < x \\le 3" -> "(-1,3]", "3 > x" -> "(-\\infty,3)"; None if `part` is not one."""
    pieces = ["".join(piece.split()) for piece in _RELATION.split(part)]
    if len(pieces) == 3:
        left, relation, right = pieces
        if _VARIABLE.fullmatch(left) and right and not _VARIABLE.fullmatch(right):
            bound, below = right, relation in _LESS  # variable < bound
        elif _VARIABLE.fullmatch(right) and left:
            bound, below = left, relation not in _LESS  # bound < variable
        else:
            return None
        strict = relation in _STRICT
        if below:
            return f"(-\\infty,{bound}{')' if strict else ']'}"
        return f"{'(' if strict else '['}{bound},\\infty)"
    if len(pieces) == 5:
        low, first, variable, second, high = pieces
        if not (_VARIABLE.fullmatch(variable) and low and high):
            return None
        if (first in _LESS) != (second in _LESS):
            return None
        if first not in _LESS:  # high > x > low, written from the top
            low, high, first, second = high, low, second, first
        return f"{'(' if first in _STRICT else '['}{low},{high}{')' if second in _STRICT else ']'}"
    return None


def _normalize_part(part: str) -> tuple[str, bool]:
    """Step 5 of the module docstring for one alternative: (canonical text, is an interval made
    from an inequality)."""
    part = part.strip()
    prefix = _ANSWER_PREFIX.match(part)
    if prefix is not None:
        part = part[prefix.end() :].strip()
    assignment = _ASSIGNMENT.fullmatch(part)
    if assignment is not None:
        part = assignment.group(1).strip()
    part = _number_among_words(part) or part
    if part.endswith(".") and not part.endswith("..."):
        part = part[:-1]
    interval = _inequality_interval(part)
    if interval is not None:
        return interval, True
    part = "".join(part.split())  # math-verify reads "\\pir" as pi*r, but "\\theta t" as theta
    membership = _MEMBERSHIP.match(part)
    return (part[membership.end() :] if membership else part), False


# ----------------------------------------------------------------------------------------------
# Exact values of plain numbers.

_DECIMAL = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)")
_SLASH_FRACTION = re.compile(r"([-+]?\d+)/(\d+)")
_LATEX_FRACTION = re.compile(r"([-+]?)\\frac\{([-+]?\d+)\}\{([-+]?\d+)\}")
_SCIENTIFIC = re.compile(
    r"([-+]?(?:\d+(?:\.\d*)?|\.\d+))(?:[eE]|\\times10\^|\\cdot10\^)(?:([-+]?\d{1,3})|\{([-+]?\d{1,3})\})"
)
_REPEATING = re.compile(
    r"([-+]?)(\d*)\.(\d*)(?:\\overline\{(\d+)\}|\\overline(\d)|\\dot\{(\d)\}|\\dot(\d)|\((\d+)\))"
)
_ELLIPSIS = re.compile(r"([-+]?)(\d*)\.(\d+)(?:\.\.\.|\\ldots|\\dots|\\cdots)")


def _repeating_decimal(sign: str, whole: str, fixed: str, period: str) -> Fraction:
    """The value of sign whole.fixed(period)(period)..., e.g. ("", "0", "1", "6") -> 1/6."""
    shift = 10 ** len(fixed)
    value = int(whole or "0") + Fraction(int(fixed or "0"), shift)
    value += Fraction(int(period), shift * (10 ** len(period) - 1))
    return -value if sign == "-" else value


_MAX_ELLIPSIS_PERIOD = 100
"""Longest period, in digits, recognised in a decimal that ends with an ellipsis."""


def _ellipsis_period(digits: str) -> tuple[str, str] | None:
    """(fixed digits, period) of digits written before an ellipsis: the shortest block (of at most
    _MAX_ELLIPSIS_PERIOD digits) repeated at least twice at the end ("1666" -> ("1", "6"));
    None when no block repeats."""
    for size in range(1, min(len(digits) // 2, _MAX_ELLIPSIS_PERIOD) + 1):
        period = digits[-size:]
        if digits.endswith(period, 0, len(digits) - size):
            end = len(digits) - size
            while end >= size and digits.startswith(period, end - size):
                end -= size
            return digits[:end], period
    return None


def _as_rational(part: str) -> Fraction | None:
    """The exact value of a canonical part that is a plain number, or None."""
    try:
        if _DECIMAL.fullmatch(part):
            return Fraction(part)
        if match := _SLASH_FRACTION.fullmatch(part):
            return Fraction(int(match.group(1)), int(match.group(2)))
        if match := _LATEX_FRACTION.fullmatch(part):
            value = Fraction(int(match.group(2)), int(match.group(3)))
            return -value if match.group(1) == "-" else value
        if match := _SCIENTIFIC.fullmatch(part):
            return Fraction(match.group(1)) * Fraction(10) ** int(match.group(2) or match.group(3))
        if match := _REPEATING.fullmatch(part):
            period = next(group for group in match.groups()[3:] if group)
            return _repeating_decimal(match.group(1), match.group(2), match.group(3), period)
        if match := _ELLIPSIS.fullmatch(part):
            split = _ellipsis_period(match.group(3))
            if split is not None:
                return _repeating_decimal(match.group(1), match.group(2), *split)
    except (ValueError, ZeroDivisionError):  # zero denominator, or too many digits to convert
        return None
    return None


# ----------------------------------------------------------------------------------------------
# Grading.


_Key = Fraction | str
"""A canonical part as compared: its exact value if it is a plain number, else its text."""


def _canonical(answer: str) -> dict[_Key, str]:
    """The distinct canonical parts of an answer, by key (steps 1-5 of the module docstring)."""
    normalized = [_normalize_part(raw) for raw in _split_alternatives(_clean(answer))]
    normalized = [(part, is_interval) for part, is_interval in normalized if part]
    if len(normalized) > 1 and all(is_interval for _, is_interval in normalized):
        normalized = [("\\cup".join(part for part, _ in normalized), True)]
    parts: dict[_Key, str] = {}
    for part, _ in normalized:
        value = _as_rational(part)
        parts.setdefault(part if value is None else value, part)
    return parts


def answer_parts(answer: str) -> list[str]:
    """The distinct canonical parts of an answer (several for a list or a hedge).

    Args:
        answer: a final answer, e.g. "$\\dfrac{1}{2}$", "x = 2 \\text{ or } x = 3", "x > 2".

    Returns:
        Its parts, e.g. ["\\frac{1}{2}"], ["2", "3"], ["(2,\\infty)"] (empty if nothing is left).
    """
    return list(_canonical(answer).values())


def normalize_answer(answer: str) -> str:
    """Canonical string form of a final answer: its parts (`answer_parts`) joined by commas.

    Args:
        answer: a final answer, e.g. "$\\dfrac{1}{2}$", "10\\text{ cm}", "x = 5", "45^\\circ".

    Returns:
        The normalized string, e.g. "\\frac{1}{2}", "10", "5", "45" (empty if nothing is left).
    """
    return ",".join(answer_parts(answer))


def grade_answer(predicted: str, ground_truth: str, timeout_s: float = DEFAULT_TIMEOUT_S) -> bool:
    """Whether `predicted` is a correct final answer for `ground_truth` (see the module docstring).

    Safe to call from any thread and from worker processes. A call uses at most about
    `timeout_s` CPU seconds when it reaches math-verify (plus the helper's start-up, about a second, on a
    process's first such call and after a timeout), and milliseconds otherwise.

    Args:
        predicted: the model's final answer, already extracted from the response (several boxed
            answers joined by commas count as several parts).
        ground_truth: the reference answer.
        timeout_s: bound in CPU seconds of the math-verify stage; exceeding it grades as incorrect.

    Returns:
        True if the answers match; False otherwise (including hedges, empty answers, answers
        longer than `MAX_ANSWER_CHARS` and math-verify timeouts).
    """
    predicted, ground_truth = str(predicted).strip(), str(ground_truth).strip()
    if not (0 < len(predicted) <= MAX_ANSWER_CHARS and 0 < len(ground_truth) <= MAX_ANSWER_CHARS):
        return False
    pred_value, gold_value = _as_rational(predicted), _as_rational(ground_truth)
    if pred_value is not None and gold_value is not None:  # plain numbers, already canonical
        return pred_value == gold_value
    pred, gold = _canonical(predicted), _canonical(ground_truth)
    if not pred or not gold:
        return False
    gold_is_collection = len(gold) > 1 or next(iter(gold.values())).startswith("\\{")
    if len(pred) > 1 and not gold_is_collection:
        return False
    if pred.keys() == gold.keys():
        return True
    if all(isinstance(key, Fraction) for key in (*pred, *gold)):
        return False
    exact_prediction = len(pred) == 1 and isinstance(next(iter(pred)), Fraction)
    pred_latex, gold_latex = (",".join(map(str, keys)) for keys in (pred, gold))
    return math_verify_equal(gold_latex, pred_latex, exact_prediction, timeout_s)
