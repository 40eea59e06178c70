"""The defects planted for the power tests, each a patch of one saah_lib function (see sitecustomize.py)."""

import importlib.abc
import importlib.util
import sys


def _correctness_dropped(module):
    """The reward's correctness term is always 0 (format, presence and steps still count)."""
    module.r_correct = lambda completion, gold: 0.0


def _kl_sign_flipped(module):
    """The loss subtracts the KL penalty instead of adding it."""
    original = module.SAAHGRPOTrainer._compute_loss

    def flipped(self, model, inputs):
        beta, self.beta = self.beta, -self.beta  # TRL's loss adds self.beta * KL
        try:
            return original(self, model, inputs)
        finally:
            self.beta = beta

    module.SAAHGRPOTrainer._compute_loss = flipped


def _eval_on_training_problems(module):
    """Every run evaluates on its first training problems instead of the held-out ones."""
    original = module.synthetic_split

    def leaked(n_train, n_eval, seed=0, **kwargs):
        split = original(n_train, n_eval, seed, **kwargs)
        return type(split)(**{**vars(split), "eval": split.train[:n_eval]}) if hasattr(split, "__dict__") \
            else split._replace(eval=split.train[:n_eval])

    module.synthetic_split = leaked


def _sa_on_positive(module):
    """SA-AH-GRPO discounts the rollouts with a positive advantage instead of those with a negative one."""
    original = module.selective_weights

    def on_positive(weights, advantages):
        return original(weights, -advantages)

    module.selective_weights = on_positive


def _alpha_ignored(module):
    """Every horizon weight is computed at alpha 0 (all weights 1): ah and sa train as grpo."""
    original = module.horizon_weights

    def at_zero(norm_entropy, mask, alpha):
        return original(norm_entropy, mask, 0.0)

    module.horizon_weights = at_zero


#: name: (module to patch once loaded, the patch)
DEFECTS = {
    "correctness_dropped": ("saah_lib.method.reward", _correctness_dropped),
    "kl_sign_flipped": ("saah_lib.training.trainer", _kl_sign_flipped),
    "eval_on_training_problems": ("saah_lib.tasks.synthetic", _eval_on_training_problems),
    "sa_on_positive": ("saah_lib.method.loss", _sa_on_positive),
    "alpha_ignored": ("saah_lib.method.loss", _alpha_ignored),
}


class _PatchAfterLoad(importlib.abc.MetaPathFinder):
    def __init__(self, module_name, patch):
        self.module_name, self.patch = module_name, patch

    def find_spec(self, name, path, target=None):
        if name != self.module_name:
            return None
        sys.meta_path.remove(self)  # find the real spec, then wrap its loader
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        execute, patch = spec.loader.exec_module, self.patch

        def exec_and_patch(module):
            execute(module)
            patch(module)

        spec.loader.exec_module = exec_and_patch
        return spec


def install(name: str) -> None:
    if name not in DEFECTS:
        raise ValueError(f"SAAH_PLANTED_DEFECT={name!r}: expected one of {', '.join(DEFECTS)}")
    module_name, patch = DEFECTS[name]
    if module_name in sys.modules:
        patch(sys.modules[module_name])
    else:
        sys.meta_path.insert(0, _PatchAfterLoad(module_name, patch))
