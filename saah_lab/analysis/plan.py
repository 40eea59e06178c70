"""A study's plan, ``<root>/study_plan.json``, written before it trains: the primary comparison and the other pairs::

    {"study": "extended",
     "primary": {"a": ARM, "b": ARM, "quantities": ["final", "train_var"]},
     "pairs": [[ARM, ARM], ...],            # every comparison the evidence tests, the primary first
     "warm_starts": ["tiny-warmstart", ...], "seeds": [0, 1, ...], "paper_matched_alpha": 5.9}

with ``ARM = {"method": "sa", "alpha": 0.5, "entropy_top_k": null}``.  A root without one gets :func:`default_plan`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from saah_lab.analysis.groups import method_label
from saah_lab.analysis.quantities import QUANTITIES
from saah_lib.jsonio import atomic_write_json, read_json
from saah_lib.method.methods import MAIN_ALPHA, check_alpha, check_method
from saah_lib.rundir.layout import STUDY_PLAN_FILE

#: The quantities of the primary comparison: the paper's two claims for SA-AH-GRPO over GRPO.
PRIMARY_QUANTITIES = ("final", "train_var")
#: The direction the paper claims for SA-AH-GRPO against GRPO on each primary quantity (its abstract and
#: conclusion: higher final Pass@1 and lower training-reward variance).
PAPER_CLAIM = {"final": "higher", "train_var": "lower"}


@dataclass(frozen=True)
class Arm:
    """One setting whose runs (one per warm start and seed) are compared with another's."""

    method: str
    alpha: float
    entropy_top_k: int | None = None
    model_label: str | None = None

    @property
    def label(self) -> str:
        text = method_label(self.method, self.alpha, show_grpo_alpha=False)
        if self.entropy_top_k is not None:
            text += f" top-{self.entropy_top_k}"
        return text

    def matches(self, run) -> bool:
        return (run.method == self.method and math.isclose(run.alpha, self.alpha, abs_tol=1e-9)
                and run.entropy_top_k == self.entropy_top_k
                and (self.model_label is None or run.model_label == self.model_label))

    def runs_by_unit(self, runs) -> dict[tuple[str, int], object]:
        """This arm's runs keyed by (warm start, seed), sorted."""
        found: dict[tuple[str, int], object] = {}
        for run in runs:
            if self.matches(run):
                if run.unit in found:
                    first = found[run.unit]
                    raise ValueError(f"{self.label}: runs {first.run_id!r} ({first.folder}) and {run.run_id!r} "
                                     f"({run.folder}) share warm start {run.unit[0]!r} and seed {run.unit[1]}; give "
                                     "a model_label or remove one")
                found[run.unit] = run
        return dict(sorted(found.items()))

    def to_dict(self) -> dict:
        return {"method": self.method, "alpha": self.alpha, "entropy_top_k": self.entropy_top_k}

    @classmethod
    def from_dict(cls, d, where: str) -> "Arm":
        if not isinstance(d, dict) or "method" not in d or "alpha" not in d:
            raise ValueError(f"{where}: an arm needs 'method' and 'alpha', got {d!r}")
        try:
            method = check_method(d["method"])
            alpha = 0.0 if method == "grpo" else check_alpha(d["alpha"])
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        top_k = d.get("entropy_top_k")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"{where}: entropy_top_k must be a positive integer or null, got {top_k!r}")
        return cls(method, alpha, top_k)


@dataclass(frozen=True)
class StudyPlan:
    study: str
    primary: tuple[Arm, Arm]
    pairs: tuple[tuple[Arm, Arm], ...]  # the primary pair first
    quantities: tuple[str, ...] = PRIMARY_QUANTITIES
    extra: dict = field(default_factory=dict)  # warm starts, seeds, alpha: recorded, not used by the tests

    def describe(self) -> str:
        what = " and ".join(QUANTITIES[q] for q in self.quantities)
        return f"{self.primary[0].label} vs {self.primary[1].label} on {what}"

    def to_dict(self) -> dict:
        return {"study": self.study,
                "primary": {"a": self.primary[0].to_dict(), "b": self.primary[1].to_dict(),
                            "quantities": list(self.quantities)},
                "pairs": [[a.to_dict(), b.to_dict()] for a, b in self.pairs], **self.extra}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> "StudyPlan":
        if not isinstance(d, dict) or not isinstance(d.get("primary"), dict):
            raise ValueError(f"{where}: no 'primary' comparison")
        p = d["primary"]
        primary = (Arm.from_dict(p.get("a"), f"{where}: primary.a"), Arm.from_dict(p.get("b"), f"{where}: primary.b"))
        quantities = tuple(p.get("quantities") or PRIMARY_QUANTITIES)
        unknown = [q for q in quantities if q not in QUANTITIES]
        if unknown:
            raise ValueError(f"{where}: primary.quantities: unknown {unknown}; expected some of {list(QUANTITIES)}")
        pairs = []
        for i, pair in enumerate(d.get("pairs") or []):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError(f"{where}: pairs[{i}] must be [arm, arm]")
            pairs.append((Arm.from_dict(pair[0], f"{where}: pairs[{i}][0]"),
                          Arm.from_dict(pair[1], f"{where}: pairs[{i}][1]")))
        pairs = [primary] + [pr for pr in pairs if pr != primary]
        extra = {k: v for k, v in d.items() if k not in ("study", "primary", "pairs")}
        return cls(str(d.get("study", "")), primary, tuple(pairs), quantities, extra)


def arms_pairs(sa: Arm, ah: Arm, grpo: Arm) -> tuple[tuple[Arm, Arm], ...]:
    """The paper's three comparisons at one alpha: SA against GRPO (primary), SA against AH, AH against GRPO."""
    return ((sa, grpo), (sa, ah), (ah, grpo))


def default_plan(study: str = "mini") -> StudyPlan:
    """The mini study's plan, also used for a root without ``study_plan.json``."""
    sa, ah, grpo = Arm("sa", MAIN_ALPHA), Arm("ah", MAIN_ALPHA), Arm("grpo", 0.0)
    return StudyPlan(study, (sa, grpo), arms_pairs(sa, ah, grpo))


def read_plan(root: str | Path) -> StudyPlan:
    """The root's plan, or :func:`default_plan` when it has none; an unreadable plan is an error naming the file."""
    path = Path(root) / STUDY_PLAN_FILE
    if not path.is_file():
        return default_plan("")
    try:
        record = read_json(path)
    except ValueError as err:
        raise ValueError(f"{path}: not valid JSON ({err})") from None
    return StudyPlan.from_dict(record, str(path))


def write_plan(root: str | Path, plan: StudyPlan) -> Path:
    path = Path(root) / STUDY_PLAN_FILE
    atomic_write_json(path, plan.to_dict())  # makes the root
    return path
