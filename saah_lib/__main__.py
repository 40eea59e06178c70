"""``python -m saah_lib``: the package's commands, one line each."""

import sys

from saah_lib import COMMANDS

if __name__ == "__main__":
    print("SA-AH-GRPO reference artifact. Commands (each has --help):")
    for name, text in COMMANDS.items():
        print(f"  python -m {name:28s} {text}")
    sys.exit(0)
