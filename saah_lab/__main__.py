"""``python -m saah_lab``: every command of the lab and the library, one line each."""

import sys

from saah_lab import ALL_COMMANDS

if __name__ == "__main__":
    print("SA-AH-GRPO reference artifact. Commands (each has --help):")
    for name, text in ALL_COMMANDS.items():
        print(f"  python -m {name:28s} {text}")
    sys.exit(0)
