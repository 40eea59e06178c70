"""docs/library.md's example runs as written, on a tiny random model instead of the hub model it names."""

import re
import subprocess
import sys

import pytest

from saah_lib.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "docs" / "library.md"


def example_code() -> str:
    blocks = re.findall(r"```python\n(.*?)```", EXAMPLE.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/library.md holds one example"
    return blocks[0]


@pytest.mark.slow  # a fresh process loads TRL (about 10 s of CPU)
def test_the_library_example_trains_two_steps_on_cpu(tiny_random_model_dir, tmp_path):
    code = example_code()
    assert 'MODEL = "Qwen/Qwen2.5-0.5B-Instruct"' in code and "from saah_lib import SAAHGRPOConfig, SAAHGRPOTrainer" in code
    code = code.replace('"Qwen/Qwen2.5-0.5B-Instruct"', repr(str(tiny_random_model_dir)))
    code += "\nprint('steps', trainer.state.global_step, 'loss_type', trainer.args.loss_type, 'method', trainer.args.method)\n"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "steps 2 loss_type dapo method sa" in done.stdout  # TRL's default loss, weighted
    assert "CPUNumericsWarning" not in done.stderr  # importing saah_lib changes and says nothing
