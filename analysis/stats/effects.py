"""Linear models of a sweep's compared values over its swept keys (statsmodels' ``ols`` and
``anova_lm``): the seed variance a one-seed factorial grid can measure, and the main effects.

* :func:`additive_variance`: a grid with one seed a cell (two or more swept keys) fits the
  additive model ``value ~ C(key1) + C(key2) + ...``; its residual mean square estimates the seed
  variance plus any interaction of the keys (so comparisons of cells on it err on the safe side),
  on (levels1 - 1)(levels2 - 1)... degrees of freedom for a full grid. Tukey's one-degree-of-freedom
  test for non-additivity (the squared fitted values added as a covariate, compared by
  ``anova_lm``) is reported beside it as a diagnostic: a significant one is a sign of an
  interaction, which the residual the cell comparisons rest on then holds; it does not say the
  residual is larger than the seed noise (a residual small by chance fires it too), so it does
  not make those comparisons conservative.
* :func:`main_effects`: the n-way ANOVA of the swept keys (type II sums of squares) with F tests
  against the sweep's seed variance (:class:`analysis.stats.variance.SeedVariance`: the same error
  term as the comparisons; the sweep's own seeds on Satterthwaite's df of their pool,
  :func:`anova_error`), and each level's least-squares effect (from sum-to-zero contrasts:
  the level's fitted mean minus the grand mean of the fitted cells, which is not its marginal
  mean minus the grand mean where the grid is unbalanced) with a 95% interval. With seeds the
  model holds every interaction of the keys, and the interactions are tested too; with one seed a
  cell it is the additive model (the interaction is in the residual). With seeds and cells
  missing (a config left out) the full model cannot be fitted: the effects come from the
  additive model, and the interaction is tested as the cell-means model against it (one
  parameter a cell present: the interaction's df are the cells' df left by the main effects).

A frame holds one row per run: a column per key (the swept values, in config order) and ``value``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import special

from analysis.names.formatting import format_value, sort_key
from analysis.stats.critical import anova_df, t_quantile
from analysis.stats.levels import ALPHA
from analysis.stats.variance import ConfigData, SeedVariance, df_text

VALUE = "value"
"""The column of a run's compared value."""


@dataclass(frozen=True)
class Term:
    """One row of the ANOVA table: a key (or an interaction ``a × b``), its degrees of freedom,
    sum of squares, F and p against the seed variance; ``tested_df`` the numerator df the p rests
    on (Box's, :func:`box_df`, where the configs' own seed variances are the error term and
    differ; else ``df``)."""

    name: str
    df: float
    sum_sq: float
    f: float
    p: float
    tested_df: float = math.nan

    @property
    def numerator_df(self) -> float:
        """The numerator df of the F test: ``tested_df``, or ``df`` where that is not set."""
        return self.df if math.isnan(self.tested_df) else self.tested_df


@dataclass(frozen=True)
class LevelEffect:
    """A level of a key: its least-squares effect (sum-to-zero contrasts of the fitted model;
    not its marginal mean minus the grand mean in an unbalanced grid) with a 95% interval, and
    the runs at that level."""

    key: str
    level: str
    effect: float
    lo: float
    hi: float
    n_runs: int


@dataclass(frozen=True)
class MainEffects:
    """The ANOVA table (``terms``), each level's effect, the error term (``error``), the model
    (``additive``, ``full factorial``, or ``additive, interaction against cell means`` where
    seeds allow the test but cells are missing) and ``missing`` the cells of the grid no run
    holds (labels)."""

    terms: list[Term]
    levels: list[LevelEffect]
    error: SeedVariance
    model: str
    missing: tuple[str, ...] = ()

    def frame(self) -> pd.DataFrame:
        """``main_effects.csv``: one row per level (``term``, ``level``, ``effect``, ``ci_low``,
        ``ci_high``, ``runs``) after one row per term (``term``, ``df``, ``tested_df`` the
        numerator df its p rests on, ``sum_sq``, ``F``, ``p_value``), with the error term's source and df on every row."""
        rows = [{"term": t.name, "df": t.df, "tested_df": t.numerator_df, "sum_sq": t.sum_sq,
                 "F": t.f, "p_value": t.p} for t in self.terms]
        rows += [{"term": e.key, "level": e.level, "effect": e.effect, "ci_low": e.lo,
                  "ci_high": e.hi, "runs": e.n_runs} for e in self.levels]
        columns = ["term", "level", "df", "tested_df", "sum_sq", "F", "p_value", "effect", "ci_low", "ci_high",
                   "runs", "error_source", "error_df", "model"]
        return pd.DataFrame(rows).assign(error_source=self.error.source, error_df=self.error.df,
                                         model=self.model).reindex(columns=columns)


def _coded(frame: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """``frame`` with the keys renamed ``f0, f1, ...`` (formula-safe), as categories in config
    order (numbers by value), each level named as config labels write it."""
    coded = pd.DataFrame({VALUE: frame[VALUE].to_numpy(float)})
    for i, key in enumerate(keys):
        levels = [format_value(v) for v in sorted(set(frame[key]), key=sort_key)]
        coded[f"f{i}"] = pd.Categorical(frame[key].map(format_value), categories=levels)
    return coded


def _fit(coded: pd.DataFrame, n_keys: int, interactions: bool):  # noqa: ANN202 -- statsmodels' results
    """The ordinary least squares fit of the value on the keys (sum-to-zero coded), with every
    interaction of them when ``interactions``."""
    import statsmodels.formula.api as smf

    with warnings.catch_warnings():  # a rank-deficient design: the caller checks the rank
        warnings.simplefilter("ignore")
        return smf.ols(_formula(n_keys, interactions), data=coded).fit()


def least_squares_fit(frame: pd.DataFrame, keys: Sequence[str], interactions: bool):  # noqa: ANN201
    """The ordinary least squares fit `main_effects` makes of ``frame``'s values on ``keys``
    (statsmodels' results; the keys coded ``f0, f1, ...``), for a reader who tests its terms
    another way (a robust covariance: ``bench/unequal_variance_calibration.py``)."""
    return _fit(_coded(frame, keys), len(keys), interactions)


def _formula(n_keys: int, interactions: bool, extra: str = "") -> str:
    """``value ~ C(f0, Sum) + C(f1, Sum)`` (``*`` with ``interactions``), ``extra`` terms added."""
    terms = (" * " if interactions else " + ").join(f"C(f{i}, Sum)" for i in range(n_keys))
    return f"{VALUE} ~ {terms}" + (f" + {extra}" if extra else "")


def _full_rank(fit) -> bool:  # noqa: ANN001
    return int(np.linalg.matrix_rank(fit.model.exog)) == fit.model.exog.shape[1]


def varying_keys(frame: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """The keys of ``keys`` with two or more values in ``frame``."""
    return [k for k in keys if frame[k].map(format_value).nunique() > 1]


def additive_variance(frame: pd.DataFrame, keys: Sequence[str]) -> SeedVariance | None:
    """The residual mean square of the additive model of a one-seed grid over ``keys`` (two or
    more that vary) as a :class:`SeedVariance` (source ``additive``) with Tukey's non-additivity
    test in its notes; None where there is none (:func:`additive_or_why` says why)."""
    found = additive_or_why(frame, keys)
    return found if isinstance(found, SeedVariance) else None


def additive_or_why(frame: pd.DataFrame, keys: Sequence[str]) -> SeedVariance | str:
    """:func:`additive_variance`, or why a one-seed sweep of ``frame`` (a row a run) over
    ``keys`` has no additive model to measure its seed variance with, in words that follow
    "one seed per config and": no run, fewer than two keys that vary, keys that vary together
    (the runs cannot separate their effects), or a grid whose additive model fits its runs
    exactly (no residual df left: a cell missing, or a 2-level grid of 2 keys with a cell out)."""
    if not len(frame):
        return "no grid of runs given (no additive model to measure it with)"
    keys = varying_keys(frame, keys)
    if len(keys) < 2:
        return (f"{'one swept key' if keys else 'no swept key that varies'} (no additive model "
                "to measure it with)")
    coded = _coded(frame, keys)
    fit = _fit(coded, len(keys), interactions=False)
    shape = " x ".join(str(coded[f"f{i}"].nunique()) for i in range(len(keys)))
    cells = f"{len(frame)} run{'s' * (len(frame) != 1)} of a {shape} grid ({' + '.join(keys)})"
    if not _full_rank(fit):
        return (f"{cells} whose keys vary together: the runs cannot separate their effects, so "
                "there is no additive model to measure it with")
    if fit.df_resid < 1:
        return (f"{cells} that leaves the additive model no residual df (its "
                f"{fit.model.exog.shape[1]} parameters fit the {len(frame)} runs exactly: a cell "
                "missing, or too few levels)")
    return SeedVariance(float(fit.scale), float(fit.df_resid), "additive",
                        f"the residual of the additive model of the {shape} one-seed grid "
                        f"({' + '.join(keys)}; it holds any interaction too)",
                        (_tukey_note(coded, fit, len(keys)),))


def _tukey_note(coded: pd.DataFrame, fit, n_keys: int) -> str:  # noqa: ANN001
    """Tukey's one-degree-of-freedom test for non-additivity of ``fit``, in words."""
    if fit.df_resid < 2:
        return "Tukey's test for non-additivity: not possible (fewer than 2 residual df)"
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm

    with_square = coded.assign(square=fit.fittedvalues.to_numpy() ** 2)
    with warnings.catch_warnings():  # a rank-deficient design: checked below
        warnings.simplefilter("ignore")
        tukey = smf.ols(_formula(n_keys, False, "square"), data=with_square).fit()
    if not _full_rank(tukey):
        return ("Tukey's test for non-additivity: not possible (the squared fitted values are a "
                "function of the keys: the cells hardly differ)")
    row = anova_lm(fit, tukey).iloc[1]
    f, p = float(row["F"]), float(row["Pr(>F)"])
    head = (f"Tukey's one-degree-of-freedom test for non-additivity: F = {f:.2f} on (1, "
            f"{fit.df_resid - 1:.0f}) df, p {p:.2g}")
    if p < ALPHA:
        return (f"{head}: a sign that the keys interact. The cell comparisons rest on the "
                "residual, which then holds the interaction beside the seed noise; the test does "
                "not say that the residual is larger than the seed noise alone (one small by "
                "chance fires it too), so the comparisons are not known to be conservative")
    return f"{head}: no sign of interaction"


def main_effects(frame: pd.DataFrame, keys: Sequence[str], error: SeedVariance,
                 replicated: bool) -> MainEffects | None:
    """The ANOVA of ``frame``'s values over ``keys`` (those that vary) against ``error``, with
    interactions when ``replicated`` (some config has two or more runs); None without a key that
    varies or a usable error variance."""
    keys = varying_keys(frame, keys)
    if not keys or not error.usable:
        return None
    from statsmodels.stats.anova import anova_lm

    coded = _coded(frame, keys)
    error = anova_error(error, coded, keys)
    interactions = replicated and len(keys) > 1
    fit = _fit(coded, len(keys), interactions)
    cell_test = None
    if interactions and not _full_rank(fit):  # cells missing (a config left out)
        interactions = False
        fit = _fit(coded, len(keys), interactions)
        cell_test = _cell_means_test(coded, fit, len(keys))
    if not _full_rank(fit):
        return None
    if fit.df_resid > 0:
        table = anova_lm(fit, typ=2).drop(index="Residual")
    elif len(keys) == 1:  # one run a level: saturated, its sum of squares against the mean alone
        import statsmodels.formula.api as smf

        mean_only = smf.ols(f"{VALUE} ~ 1", data=coded).fit()
        row = anova_lm(mean_only, fit, scale=error.variance).iloc[1]
        table = pd.DataFrame({"sum_sq": [row["ss_diff"]], "df": [row["df_diff"]]},
                             index=["C(f0, Sum)"])
    else:  # as many parameters as runs with two or more keys: nothing to test a key with
        return None
    names = {f"C(f{i}, Sum)": key for i, key in enumerate(keys)}
    spread = run_variances(coded, keys, error)
    terms = []
    for term, row in table.iterrows():
        name = " × ".join(names[part] for part in str(term).split(":"))
        box = (box_df(_type2_projection(fit, str(term)), spread)
               if spread is not None and fit.df_resid > 0 else math.nan)
        terms.append(_term(name, float(row["df"]), float(row["sum_sq"]), error, box))
    if cell_test is not None:
        box = (box_df(_cell_means_projection(coded, fit, len(keys)), spread)
               if spread is not None else math.nan)
        terms.append(_term(" × ".join(keys) + " (cell means against the additive model)",
                           *cell_test, error, box))
    cov = fit.cov_params(scale=error.variance).to_numpy()
    params = list(fit.params.index)
    half_width = t_quantile(error.df)
    levels = []
    for i, key in enumerate(keys):
        names_of = [p for p in params if p.startswith(f"C(f{i}, Sum)[S.") and ":" not in p]
        for j, level in enumerate(coded[f"f{i}"].cat.categories):
            contrast = np.zeros(len(params))
            if j < len(names_of):  # sum-to-zero coding: the last level is minus the others' sum
                contrast[params.index(names_of[j])] = 1.0
            else:
                contrast[[params.index(n) for n in names_of]] = -1.0
            effect = float(contrast @ fit.params.to_numpy())
            half = half_width * math.sqrt(float(contrast @ cov @ contrast))
            levels.append(LevelEffect(key, str(level), effect, effect - half, effect + half,
                                      int((coded[f"f{i}"] == level).sum())))
    grid = [tuple(levels_) for levels_ in
            pd.MultiIndex.from_product([coded[f"f{i}"].cat.categories for i in range(len(keys))])]
    present = set(zip(*(coded[f"f{i}"].astype(str) for i in range(len(keys))), strict=True))
    missing = tuple(", ".join(f"{k}={v}" for k, v in zip(keys, cell, strict=True))
                    for cell in grid if tuple(map(str, cell)) not in present)
    model = ("full factorial" if interactions else
             "additive, interaction against cell means" if cell_test is not None else "additive")
    return MainEffects(terms, levels, error, model, missing)


def _term(name: str, df: float, sum_sq: float, error: SeedVariance, box: float = math.nan) -> Term:
    """A row of the ANOVA table: its F against ``error`` and the p-value on (``box``, the error's
    df), ``box`` Box's numerator df (:func:`box_df`; the term's ``df`` where NaN or larger)."""
    f = sum_sq / df / error.variance
    tested = df if math.isnan(box) else min(box, df)
    return Term(name, df, sum_sq, f, float(special.fdtrc(tested, error.df, f)),
                math.nan if tested == df else tested)


def _factors(column: str) -> frozenset[str]:
    """The factors of a design column named as statsmodels names it (``C(f0, Sum)[S.a]:C(f1,
    Sum)[S.x]``: {``C(f0, Sum)``, ``C(f1, Sum)``}; the intercept none)."""
    if column == "Intercept":
        return frozenset()
    return frozenset(part.split("[")[0] for part in column.split(":"))


def _projection(x: np.ndarray) -> np.ndarray:
    """(runs, runs): the orthogonal projection onto the columns of ``x`` (full column rank)."""
    q, _ = np.linalg.qr(x)
    return q @ q.T


def _type2_projection(fit, term: str) -> np.ndarray:  # noqa: ANN001 -- statsmodels' results
    """(runs, runs): A with the term's type II sum of squares y'Ay (``anova_lm(typ=2)``): the
    projection onto the columns of every term not containing ``term`` (a row name of the ANOVA
    table) and ``term``'s, less the projection onto the former."""
    exog, columns = np.asarray(fit.model.exog), list(fit.model.exog_names)
    own = _factors(term)
    small = [j for j, c in enumerate(columns) if not _factors(c) >= own]
    big = small + [j for j, c in enumerate(columns) if _factors(c) == own]
    return _projection(exog[:, big]) - _projection(exog[:, small])


def _cell_means_projection(coded: pd.DataFrame, additive, n_keys: int) -> np.ndarray:  # noqa: ANN001
    """(runs, runs): A with the interaction's sum of squares of :func:`_cell_means_test` y'Ay:
    the projection onto the cells (each run's cell mean) less the additive fit's."""
    cell = coded[[f"f{i}" for i in range(n_keys)]].astype(str).agg("|".join, axis=1).to_numpy()
    means = (cell[:, None] == cell[None, :]).astype(float)
    means /= means.sum(axis=1, keepdims=True)
    return means - _projection(np.asarray(additive.model.exog))


def box_df(projection: np.ndarray, run_variance: np.ndarray) -> float:
    """Box's (1954) numerator df of a sum of squares y'Ay (``projection`` A, (runs, runs)) where
    run i has seed variance ``run_variance[i]`` (Sigma diagonal): tr(A Sigma)^2 / tr((A Sigma)^2),
    the df of the chi-square whose first two moments the sum of squares has; the term's df where
    the variances are equal, towards 1 as one config's outweighs the others'. For one key it is
    Mehrotra's (1997) correction of Brown and Forsythe's test (statsmodels'
    ``anova_oneway(use_var="bf").df[0]``; for a balanced grid's main effect
    :func:`analysis.stats.critical.mehrotra_df`). One key of 3 levels, one 10x noisier: the F on
    the key's 2 df calls equal levels different in 6.1% of 5-seed sweeps, on Box's df (and the
    shrunk denominator df, :func:`analysis.stats.critical.anova_df`) 4.7%
    (``bench/main_effect_ratio_scan.py``). Rounded down to a tenth."""
    a_sigma = projection * run_variance[None, :]
    df = float(np.trace(a_sigma)) ** 2 / float((a_sigma * a_sigma.T).sum())
    return math.floor(round(10 * df, 6)) / 10


def run_variances(coded: pd.DataFrame, keys: Sequence[str], error: SeedVariance) -> np.ndarray | None:
    """(runs,): each run's seed variance as the ANOVA's Box df (:func:`box_df`) reads it where
    ``error`` is the sweep's own seeds (``anova_error``'s): its config's own sample variance, or
    ``error``'s pool where its config cannot measure one (one seed, or every seed one value: the
    pool leaves those out); None for any other error term (one variance for every run)."""
    if error.source != "seeds":
        return None
    def own(values: pd.Series) -> float:
        seeds = SeedVariance.pooled([ConfigData("cell", values.to_numpy(float))])
        return seeds.variance if seeds.usable else error.variance

    groups = coded.groupby([f"f{i}" for i in range(len(keys))], observed=True)[VALUE]
    return groups.transform(own).to_numpy(float)


def anova_error(error: SeedVariance, coded: pd.DataFrame, keys: Sequence[str]) -> SeedVariance:
    """``error`` as the ANOVA's F tests and level intervals use it. Where it is the sweep's own
    seeds (other sources unchanged):

    * some configs of ``coded`` gave one value on every seed (a floor or a ceiling: no learning,
      a collapse to reward 0) beside configs whose seeds vary: pooled over the varying ones only,
      the others named in a note. A floor's zero spread is no measure of the seed noise of the
      configs that learn: pooled with it, one variance understates theirs, and the other key's
      and the interaction's F tests call a difference that is not there in 8.0% and 8.5% of 3x3
      grids with two seeds a config whose first key has a floor level (2.9% and 2.0% with the
      floor left out; ``bench/unequal_variance_calibration.py --main-effects``).
    * on Satterthwaite's df of that pool (:func:`~analysis.stats.critical.pooled_df`), not its
      sum of the configs' df, where their seed variances differ (a note says so): the pool is
      then a weighted sum of chi-squares with fewer effective df, and the F on the summed df
      calls equal configs different where their spreads differ (2 configs x 3 seeds of seed sd
      0.04 and 0.001: 11.9% on 4 df, 5.0% on Satterthwaite's, the pair verdict's
      Welch df; ``bench/main_effect_calibration.py``)."""
    if error.source != "seeds":
        return error
    groups = coded.groupby([f"f{i}" for i in range(len(keys))], observed=True)[VALUE]
    cells = [ConfigData(", ".join(f"{k}={v}" for k, v in zip(
        keys, cell if isinstance(cell, tuple) else (cell,), strict=True)), values.to_numpy(float))
        for cell, values in groups]
    own = [SeedVariance.pooled([cell]) for cell in cells]
    flat = [cell.label for cell, seeds in zip(cells, own, strict=True) if seeds.degenerate]
    varying = [cell for cell, seeds in zip(cells, own, strict=True) if seeds.usable]
    if not varying:
        return error
    if flat:
        pool = SeedVariance.pooled(varying)
        error = SeedVariance(pool.variance, pool.df, error.source, error.text, (
            *error.notes, f"the ANOVA's seed variance leaves out {len(flat)} config"
            f"{'s' if len(flat) != 1 else ''} whose seeds all gave one value (a floor or ceiling: "
            f"{'; '.join(flat)}): pooled over the {len(varying)} whose seeds vary, on their "
            f"{df_text(pool.df)} df"), error.inflation)
    df = float(anova_df([seeds.variance for seeds in own if seeds.usable],
                        [seeds.df for seeds in own if seeds.usable]))
    if not df < error.df:
        return error
    return SeedVariance(error.variance, df, error.source, error.text, (
        *error.notes, f"tested on {df_text(df)} df, not the pool's {df_text(error.df)}: the "
        "configs' seed variances differ (Brown and Forsythe's test: Satterthwaite's df of the pool "
        "shrunk towards one config's, and Box's numerator df where they differ)"),
        error.inflation)


def _cell_means_test(coded: pd.DataFrame, additive, n_keys: int  # noqa: ANN001 -- statsmodels' fit
                     ) -> tuple[float, float] | None:
    """(df, sum of squares) of the interaction where cells are missing: the cell-means model
    (one mean a cell present) against the additive ``additive`` fit; None where it leaves no df."""
    import statsmodels.formula.api as smf

    cells = coded.assign(cell=pd.Categorical(
        coded[[f"f{i}" for i in range(n_keys)]].astype(str).agg("|".join, axis=1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        means = smf.ols(f"{VALUE} ~ C(cell)", data=cells).fit()
    df = float(additive.df_resid - means.df_resid)
    if df < 1 or not _full_rank(additive):
        return None
    return df, float(additive.ssr - means.ssr)
