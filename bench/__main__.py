"""``python -m bench``: every benchmark command, one line each."""

import sys

from bench import COMMANDS

if __name__ == "__main__":
    print("Benchmarks and profiling (each has --help):")
    for name, text in COMMANDS.items():
        print(f"  python -m {name:28s} {text}")
    sys.exit(0)
