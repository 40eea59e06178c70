"""``python -m saah_lib``: the library's commands, one line each (``python -m saah_lab``: the lab's too)."""

import sys

from saah_lib import COMMANDS

if __name__ == "__main__":
    print("SA-AH-GRPO library. Commands (each has --help); the lab's: python -m saah_lab")
    for name, text in COMMANDS.items():
        print(f"  python -m {name:28s} {text}")
    sys.exit(0)
