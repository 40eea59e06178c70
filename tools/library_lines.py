"""How many lines the library is: every saah_lib module that the card's imports load, in a fresh process.

    .venv/bin/python tools/library_lines.py          # a line per module, then the total

The card's imports are ``from saah_lib import SAAHGRPOTrainer, SAAHGRPOConfig`` plus the reward and GSM8K
modules; the compiled rollout engine, the lab and the CPU stand-ins must not be among them
(tests/test_layout.py holds the total under a ceiling and the engine out).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CARD_IMPORTS = ("from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer\n"
                "import saah_lib.method.reward, saah_lib.tasks.gsm8k\n")
_LIST_MODULES = ("import json, sys\n" + CARD_IMPORTS +
                 "print(json.dumps({m: sys.modules[m].__file__ for m in sorted(sys.modules)"
                 " if m.split('.')[0] == 'saah_lib' and getattr(sys.modules[m], '__file__', None)}))\n")


def library_modules(package_root: Path) -> dict[str, int]:
    """Module name -> its line count, for every saah_lib module the card's imports load from ``package_root``
    (the folder that holds ``saah_lib/``)."""
    done = subprocess.run([sys.executable, "-c", _LIST_MODULES], cwd=package_root, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(package_root), "HF_HUB_OFFLINE": "1",
                                           "PATH": "/usr/bin:/bin"})
    files = json.loads(done.stdout.splitlines()[-1])
    return {name: len(Path(path).read_text().splitlines()) for name, path in files.items()}


if __name__ == "__main__":
    modules = library_modules(Path(__file__).resolve().parents[1])
    for name, lines in modules.items():
        print(f"{lines:6d}  {name}")
    print(f"{sum(modules.values()):6d}  in {len(modules)} modules")
