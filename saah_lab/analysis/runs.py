"""The one reading of a results root that the result set, the paired evidence and every output share.

:func:`read_runs` reads the folders once, applies the health rules once, and refuses two folders holding one run
(a copy would count twice in every mean and test).  Runs of one model whose settings differ from its reference
runs are never averaged with them: they get their own model label, ``tiny (steps=1)`` (:func:`run_variants`).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from saah_lab.analysis.frames import evals_frame, train_log_frame
from saah_lab.analysis.health import RunHealth, run_health
from saah_lab.rundir.reader import RunFolder, duplicate_runs, read_folders
from saah_lib.paths import in_repo
from saah_lib.rundir import layout
from saah_lib.training.profiles import (
    IDENTITY_SETTINGS,
    PROFILE_STEPS,
    RECORDED_FIELDS,
    default_run_id,
    setting_differences,
    variant_label,
)

#: Settings that the analysis keeps apart by other means (the top-K runs are their own arms and tables).
NOT_A_VARIANT = ("entropy_top_k",)


class DuplicateRunError(ValueError):
    """Two folders of one root hold the same run; the message names both folders."""


@dataclass
class StudyRuns:
    """A results root as read once: its run and baseline folders, the problems found, each run's health."""

    root: Path
    runs: list[RunFolder]  # readable run folders (flagged, not dropped, where damaged or incomplete)
    baselines: list[RunFolder]
    warnings: list[str] = field(default_factory=list)  # one line per problem; empty when read strictly
    health: dict[str, RunHealth] = field(default_factory=dict)  # by run folder name
    unreadable: list[str] = field(default_factory=list)  # run folders whose config could not be read

    def flagged(self, folder: RunFolder) -> bool:
        """Whether a run breaks a health rule: the one definition every table, figure and text uses."""
        return self.health[folder.path.name].flagged


def read_runs(root: str | Path, tolerate_problems: bool = False) -> StudyRuns:
    """Read ``root`` once; a damaged or incomplete run raises unless ``tolerate_problems`` (then it is kept,
    flagged, and named in ``warnings``); two folders with one run id always raise, naming both."""
    root = in_repo(root)
    runs, warnings = read_folders(root, layout.RUNS, tolerate_problems)
    runs = with_variant_labels(runs)
    baselines, baseline_warnings = read_folders(root, layout.BASELINES, tolerate_problems)
    copies = duplicate_runs(runs)  # an error tolerated reading or not: neither copy can be chosen
    if copies:
        raise DuplicateRunError("; ".join(copies) + ". A run counts once in every mean and test, so remove the "
                                "copy (or give it its own run id)")
    readable = {f.path.name for f in runs}
    unreadable = sorted(p.name for p in layout.folders(root, layout.RUNS) if p.name not in readable)
    study = StudyRuns(root, runs, baselines, warnings + baseline_warnings, unreadable=unreadable)
    study.health = {f.path.name: run_health(f.config["run_id"], evals_frame(f), train_log_frame(f)) for f in runs}
    return study


def _profile_steps(cfg: dict):
    return PROFILE_STEPS.get(cfg.get("profile"), {}).get(cfg.get("method"))


def differences(cfg: dict, reference: dict) -> dict:
    """The settings in which one run's config differs from another's.  Steps are a method's own (the paper
    profiles train SA-AH-GRPO longer): each at its profile's steps for its method is no difference, nor are the
    steps of two methods whose profile's steps are unknown."""
    found = {name: value for name, value in setting_differences(cfg, reference).items() if name not in NOT_A_VARIANT}
    if "max_steps" in found:
        own, theirs = _profile_steps(cfg), _profile_steps(reference)
        at_profile = own is not None and cfg.get("max_steps") == own
        if (at_profile and reference.get("max_steps") == theirs) or (
                cfg.get("method") != reference.get("method") and (at_profile or own is None or theirs is None)):
            del found["max_steps"]
    return found


def _made_with_defaults(cfg: dict) -> bool:
    """Whether a run's id is its profile's default one with no variant suffix (so it ran at the defaults)."""
    try:
        return cfg.get("run_id") == default_run_id(cfg["profile"], cfg["method"], float(cfg["alpha"]),
                                                   int(cfg["seed"]), cfg.get("model_name"))
    except (KeyError, TypeError, ValueError):
        return False


def _reference(configs: list[dict], model_configs: list[dict]) -> dict:
    """The reference settings of one method's runs of one model: of the runs at the profile's defaults (the
    method's, else the model's), else of its own, the settings most of its runs share; ties to the first run id."""
    candidates = ([c for c in configs if _made_with_defaults(c)] or [c for c in model_configs if _made_with_defaults(c)]
                  or configs)
    candidates = sorted(candidates, key=lambda c: str(c.get("run_id")))
    # runs of equal settings agree with every reference alike: each setting is counted once, with its runs
    # (thousands of runs of one method are a few settings, not thousands squared comparisons)
    by_settings: dict[str, list[dict]] = {}
    for c in configs:
        by_settings.setdefault(_settings_key(c), []).append(c)
    scores: dict[str, int] = {}

    def agreeing(ref: dict) -> int:
        key = _settings_key(ref)
        if key not in scores:
            scores[key] = sum(len(same) for same in by_settings.values() if not differences(same[0], ref))
        return scores[key]

    return max(candidates, key=agreeing)


def _settings_key(cfg: dict) -> str:
    """What :func:`differences` reads of a config, as text: configs of one key differ from any other alike."""
    read = [name for name in RECORDED_FIELDS if name not in IDENTITY_SETTINGS or name in ("method", "profile")]
    return json.dumps([[name, cfg.get(name)] for name in read], default=repr)


def run_variants(folders: list[RunFolder]) -> dict[str, str]:
    """Folder name -> what the run's settings differ in from the reference settings of its model and method
    (:func:`_reference`), as :func:`saah_lib.training.profiles.variant_label` writes it; ``""`` at the reference."""
    by_model: dict[tuple, list[RunFolder]] = {}
    for folder in folders:
        by_model.setdefault((folder.config.get("profile"), folder.config.get("model_label")), []).append(folder)
    out = {}
    for model_folders in by_model.values():
        model_configs = [f.config for f in model_folders]
        for method in dict.fromkeys(c.get("method") for c in model_configs):
            group = [f for f in model_folders if f.config.get("method") == method]
            reference = _reference([f.config for f in group], model_configs)
            out.update({f.path.name: variant_label({**_steps_off_profile(f.config), **differences(f.config, reference)})
                        for f in group})
    return out


def _steps_off_profile(cfg: dict) -> dict:
    """``{"max_steps": N}`` when a run of a known profile trained another number of steps than the profile's for its
    method: said even when its reference runs trained as many (runs of 1 step only are still ``steps=1``)."""
    own = _profile_steps(cfg)
    return {"max_steps": cfg.get("max_steps")} if own is not None and cfg.get("max_steps") != own else {}


def with_variant_labels(folders: list[RunFolder]) -> list[RunFolder]:
    """The folders, each variant's config given its own model label and a ``variant`` entry."""
    variants = run_variants(folders)
    return [f if not variants[f.path.name] else dataclasses.replace(f, config={
        **f.config, "model_label": f"{f.config.get('model_label')} ({variants[f.path.name]})",
        "variant": variants[f.path.name]}) for f in folders]
