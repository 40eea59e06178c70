"""The profiles give the trainer the same settings, field for field, as before TRL's defaults moved into
SAAHGRPOConfig: every field of every profile's RunConfig and SAAHGRPOConfig (TRL's included), recorded from
the code before the move into ``data/make_config_fields.json``.  Record again only for a deliberate change:

    PYTHONPATH=<checkout> python tests/training/test_profile_fields.py > tests/training/data/make_config_fields.json
"""

import dataclasses
import json
import sys
import warnings
from pathlib import Path

import torch

RECORDED = Path(__file__).parent / "data" / "make_config_fields.json"
CASES = [(method, alpha) for method, alpha in (("grpo", None), ("ah", None), ("sa", None), ("sa", 0.25),
                                               ("ah", -0.25))]


def _plain(value, repo: str):
    value = getattr(value, "value", value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, repo) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, repo) for k, v in value.items()}
    if isinstance(value, str):
        return value.replace(repo, "<repo>")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return repr(value).replace(repo, "<repo>")


def profile_fields() -> dict:
    """``{"<profile>/<method>/<alpha>": {field: value}}`` on a machine without a GPU; values shared by every
    case under ``"common"``."""
    import saah_lib
    from saah_lib.training.config import PROFILES, make_config

    repo = str(Path(saah_lib.__file__).resolve().parents[1])
    cases = {}
    for profile in PROFILES:
        for method, alpha in CASES:
            cfg = make_config(profile, method=method, alpha=alpha)
            fields = {f"trainer.{f.name}": _plain(getattr(cfg.trainer, f.name), repo)
                      for f in dataclasses.fields(cfg.trainer)}
            fields.update({f.name: _plain(getattr(cfg, f.name), repo) for f in dataclasses.fields(cfg)
                           if f.name != "trainer"})
            cases[f"{profile}/{method}/{alpha}"] = fields
    first = next(iter(cases.values()))
    common = {k: v for k, v in first.items() if all(k in c and c[k] == v for c in cases.values())}
    return {"common": common, **{name: {k: v for k, v in c.items() if k not in common} for name, c in cases.items()}}


def expand(recorded: dict) -> dict:
    common = recorded["common"]
    return {name: {**common, **fields} for name, fields in recorded.items() if name != "common"}


def test_every_profile_gives_the_recorded_fields(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # recorded on a CPU machine
    expected, got = expand(json.loads(RECORDED.read_text())), expand(profile_fields())
    assert got.keys() == expected.keys()
    for case in expected:
        differ = {k: (expected[case].get(k, "<absent>"), got[case].get(k, "<absent>"))
                  for k in expected[case].keys() | got[case].keys()
                  if expected[case].get(k, "<absent>") != got[case].get(k, "<absent>")}
        assert not differ, f"{case}: recorded vs now {differ}"


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    torch.cuda.is_available = lambda: False
    json.dump(profile_fields(), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
