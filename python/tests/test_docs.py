"""docs/python.md's training loop, run as a user would (torch only)."""
import os
import re
import subprocess
import sys

from conftest import HAVE_TORCH, ROOT, skip_or_fail


def test_the_training_loop_of_docs_python_md_runs(synth, tmp_path):
    if not HAVE_TORCH:
        skip_or_fail("torch is not importable", "FERRY_REQUIRE_TORCH")
    text = open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8").read()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
              if b.startswith("# train.py")]
    assert len(blocks) == 1, "docs/python.md has one train.py block"
    assert len(blocks[0].strip().splitlines()) <= 25, "the loop stays short"
    script = tmp_path / "train.py"
    script.write_text(blocks[0])
    run = subprocess.run([sys.executable, str(script), *synth], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert [line.split(":")[0] for line in lines] == ["epoch 0", "epoch 1", "epoch 2"]
    losses = [float(line.split()[-1]) for line in lines]
    assert all(0 <= loss < 1 for loss in losses)
