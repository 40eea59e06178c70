"""docs/library.md's examples run as written: the first on a tiny random model instead of the hub model it names,
the second on SmolLM2-135M-Instruct (PyPI's GGUF file, which make setup installs) and GSM8K, offline."""

import re
import subprocess
import sys

import pytest

from saah_lib.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "docs" / "library.md"


def example_code(which: int = 0) -> str:
    blocks = re.findall(r"```python\n(.*?)```", EXAMPLE.read_text(), flags=re.S)
    assert len(blocks) == 2, "docs/library.md holds two examples: any model, then SmolLM2 on GSM8K"
    return blocks[which]


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


@pytest.mark.e2e  # loads and dequantises SmolLM2 (about 30 s), then two steps of 8 completions
def test_the_smollm2_example_trains_two_steps_on_gsm8k(smollm2_folder, gsm8k_dir, tmp_path):
    code = example_code(1)
    assert "load_gguf_model_and_tokenizer" in code and "TRL_REWARD_FUNCS" in code and "paper_split" in code
    code += ("\nprint('steps', trainer.state.global_step, 'loss_type', trainer.args.loss_type, 'method', "
             "trainer.args.method, 'quantized', getattr(model, 'is_quantized', None))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(REPO_ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "SAAH_GSM8K_DIR": str(gsm8k_dir)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "steps 2 loss_type bnpo method sa quantized False" in done.stdout
