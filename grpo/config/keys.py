"""Every config key as a user types it (``eval.samples_per_problem``), with what the config tree
says of it: its one-line meaning (the comment above it, or at its end, in its yaml file), the
file that sets it, its default and its rule (``grpo.config.rules``; the batch sizes':
``grpo.training.batch_plan``). The documentation site's reference pages are generated from it
(``docs/gen_pages.py``), and a test fails where a key has no meaning or no rule.

Which files: ``conf/config.yaml`` and every option of the groups (``conf/<group>/<option>.yaml``,
under the group's name unless the file says ``# @package _global_``). Presets
(``experiment``, ``recipe``, ``chain``, ``local``, the ``promoted`` and ``variants`` configs) and Hydra's own files set keys documented
elsewhere and are left out; so are Hydra's keys (``hydra.*``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from grpo.config.rules import LOSS_HYPERPARAMETER, REGISTRY_KEYS, RULES, TEXT_RULES
from grpo.training.batch_plan import CONFIG_KEYS, MAX_INT

PROMOTED_GROUP = "promoted"
"""The group ``python -m analysis promote`` writes: ``<conf>/promoted/<NAME>/top1.yaml`` is a whole
config (``+promoted/<NAME>=top1``), swept by the preset ``<conf>/experiment/promoted/<NAME>.yaml``."""
VARIANTS_GROUP = "variants"
"""The group of the shipped lists of configs: ``<conf>/variants/<NAME>/<option>.yaml`` is a whole
config, as a promoted one, swept by a preset (``variants/field_axes: base,gspo,...`` in
``conf/experiment/field_axes.yaml``): Hydra's sweeper makes grids, and a list of configs (one axis
changed at a time) is one config group swept."""
PRESET_GROUPS = ("experiment", "recipe", "chain", "local", "hydra", PROMOTED_GROUP, VARIANTS_GROUP)
"""Folders of ``conf/`` whose files are presets of other keys, not keys of their own."""
ROOT_CONFIG = "config.yaml"
_KEY = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w.\-]*):(?P<rest>.*)$")
_GLOBAL = "# @package _global_"


@dataclass
class KeyDoc:
    """One config key: its dotted ``key``, ``meaning`` (its yaml comment, one line), the files
    that set it (``files``: ``config.yaml``, ``loss/grpo_clip.yaml``) with the value each writes
    (``values``, as written) and its rule in words (``rule``; empty where none)."""

    key: str
    meaning: str = ""
    files: list[str] = field(default_factory=list)
    values: list[str] = field(default_factory=list)
    rule: str = ""


@dataclass(frozen=True)
class GroupOption:
    """One option of a config group: ``group``/``name`` and what its file says it is (its first
    comment lines)."""

    group: str
    name: str
    about: str


def _comment(lines: list[str], i: int) -> str:
    """The comment of the key on line ``i``: the comment lines right above it, or at its end."""
    above = []
    j = i - 1
    while j >= 0 and lines[j].strip().startswith("#") and not lines[j].strip().startswith("# @"):
        above.append(lines[j].strip().lstrip("#").strip())
        j -= 1
    if above:
        return " ".join(reversed(above))
    return _value_and_comment(lines[i].split(":", 1)[1])[1]


def _value_and_comment(rest: str) -> tuple[str, str]:
    """``rest`` of a ``key: rest`` line split into its value and its end comment (a ``#`` after
    a space, outside quotes)."""
    quote = None
    for k, ch in enumerate(rest):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote == ch else ch
        if ch == "#" and quote is None and (k == 0 or rest[k - 1] == " "):
            return rest[:k].strip(), rest[k + 1:].strip()
    return rest.strip(), ""


def file_keys(path: Path, prefix: str) -> Iterator[tuple[str, str, str]]:
    """(dotted key, value as written, meaning) of each leaf key in the yaml file ``path``, its
    keys under ``prefix`` (``loss.``, or empty); ``defaults:`` and ``hydra:`` skipped."""
    lines = path.read_text().splitlines()
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings the line is inside
    skip_indent: int | None = None
    for i, line in enumerate(lines):
        match = _KEY.match(line)
        if not match or line.lstrip().startswith(("#", "-")):
            continue
        indent = len(match["indent"])
        if skip_indent is not None and indent > skip_indent:
            continue
        skip_indent = None
        while stack and stack[-1][0] >= indent:
            stack.pop()
        key = match["key"]
        value = _value_and_comment(match["rest"])[0]
        if not stack and key in ("defaults", "hydra"):
            skip_indent = indent
            continue
        if not value:  # a mapping: its keys follow, indented
            stack.append((indent, key))
            continue
        dotted = prefix + ".".join([*(k for _, k in stack), key])
        yield dotted, value, _comment(lines, i)


def _rule(key: str) -> str:
    """``key``'s rule in words, from the table that owns it (empty where none)."""
    if key in RULES:
        return RULES[key].describe() + (f" ({RULES[key].note})" if RULES[key].note else "")
    if key in REGISTRY_KEYS:
        return (f"a name of the {REGISTRY_KEYS[key]} registry"
                + (" or null (a downloaded model at model.path)" if TEXT_RULES[key].nullable else "")
                + " (grpo.config.validation checks it against the registry)")
    if key in TEXT_RULES:
        text = TEXT_RULES[key]
        return text.describe() + (f" ({text.note})" if text.note else "")
    if key in CONFIG_KEYS.values():
        return (f"an integer in [1, {MAX_INT}]" if key != "model.micro_batch_tokens"
                else f"null or an integer in [1, {MAX_INT}]") + " (grpo.training.batch_plan)"
    if key.startswith("loss.") and key != "loss.name":
        return LOSS_HYPERPARAMETER.describe()
    return ""


def _package(path: Path, conf: Path) -> str:
    """The prefix of ``path``'s keys: its group's name, nothing for ``_global_`` files."""
    if path.parent == conf or path.read_text().lstrip().startswith(_GLOBAL):
        return ""
    return ".".join(path.parent.relative_to(conf).parts) + "."


def config_files(conf: Path) -> list[Path]:
    """The root config, then every option file of the groups (not the presets)."""
    options = sorted(p for p in conf.rglob("*.yaml") if p.parent != conf
                     and p.relative_to(conf).parts[0] not in PRESET_GROUPS)
    return [conf / ROOT_CONFIG, *options]


def config_keys(conf: Path) -> dict[str, KeyDoc]:
    """Every key of ``conf``'s root config and group options, in the order first met; its meaning
    from the root config or the group's default option where they comment it (``std_norm.enabled``
    is ``on``'s, not ``off``'s), else from the first option that does; a group's name key
    (``loss.name``, ``rollout.engine``) says what the group is (its defaults-list comment)."""
    default_files = {f"{group}/{option}.yaml" for group, (option, _) in group_defaults(conf).items()}
    docs: dict[str, KeyDoc] = {}
    for path in config_files(conf):
        shown = str(path.relative_to(conf))
        for key, value, meaning in file_keys(path, _package(path, conf)):
            doc = docs.setdefault(key, KeyDoc(key, rule=_rule(key)))
            if meaning and (not doc.meaning or shown in default_files):
                doc.meaning = meaning
            doc.files.append(shown)
            doc.values.append(value)
    for group, (_, about) in group_defaults(conf).items():  # a group's name key: the group's own
        for key in (f"{group}.name", f"{group}.engine"):
            if key in docs and about:
                docs[key].meaning = f"the chosen option's name: {about}"
    return docs


def undocumented(conf: Path) -> list[str]:
    """The keys without a meaning or without a rule, one line each naming its file and the fix."""
    missing = []
    for doc in config_keys(conf).values():
        if not doc.meaning:
            missing.append(f"{doc.key} ({doc.files[0]}): no comment above it in its yaml file")
        if not doc.rule:
            missing.append(f"{doc.key} ({doc.files[0]}): no rule in grpo/config/rules.py")
    return missing


def yours(path: Path, conf: Path) -> bool:
    """Whether ``path``, under ``conf``, is the user's rather than the checkout's: a
    machine's own settings (``local/<name>.yaml``, git-ignored; ``local/example.yaml`` ships) or
    what ``python -m analysis promote`` wrote (``experiment/promoted/``, ``promoted/``). The
    reference pages and the tests leave them out."""
    parts = path.relative_to(conf).parts
    return parts[0] == "local" and parts[1:] not in ((), ("example.yaml",)) or PROMOTED_GROUP in parts[:2]


def group_options(conf: Path) -> list[GroupOption]:
    """Every option of every config group (presets included; not Hydra's, nor yours: your
    `local/default.yaml` and what `python -m analysis promote` wrote), with its file's opening
    comment (the comment lines before its first blank or key line: where a key follows at once,
    they are that key's comment too)."""
    options = []
    for path in sorted(conf.rglob("*.yaml")):
        if path.parent == conf or path.relative_to(conf).parts[0] == "hydra" or yours(path, conf):
            continue
        head = []
        for line in path.read_text().splitlines():  # the comment lines up to the first other line
            stripped = line.strip()
            if stripped.startswith("# @"):
                continue
            if not stripped.startswith("#"):
                break
            head.append(stripped.lstrip("#").strip())
        group = "/".join(path.parent.relative_to(conf).parts)
        options.append(GroupOption(group, path.stem, " ".join(head)))
    return options


def group_defaults(conf: Path) -> dict[str, tuple[str, str]]:
    """Each group of the root config's defaults list: (its default option, the comment above
    its entry)."""
    lines = (conf / ROOT_CONFIG).read_text().splitlines()
    entry = re.compile(r"^\s*-\s*(?:override\s+|optional\s+)?(?P<group>[\w/]+):\s*(?P<option>\S+)")
    found = {}
    for i, line in enumerate(lines):
        match = entry.match(line)
        if match and not match["group"].startswith(("hydra", "_self_")):
            found[match["group"]] = (match["option"].strip("\"'"), _comment(lines, i))
    return found
