"""The TorchTitan harness (`make torchtitan`) without a TorchTitan checkout: what it says when it
has none, and that it reads the losses TorchTitan logs (colours and all)."""
import subprocess
import sys
from pathlib import Path

import torchtitan_run

SCRIPT = Path(__file__).with_name("torchtitan_run.py")


def test_without_a_checkout_it_says_how_to_get_one_and_passes():
    out = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "skipped" in out.stdout and f"checkout {torchtitan_run.COMMIT}" in out.stdout
    assert "tyro" in out.stdout


def test_a_path_that_is_no_checkout_is_an_error_naming_it(tmp_path):
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert f"{tmp_path} is not a TorchTitan checkout" in out.stdout


def test_reads_the_losses_torchtitan_logs():
    # TorchTitan's MetricsProcessor line, with the terminal colours it writes
    line = ("[rank0]:[titan] 2026-12-07 02:04:29,894 - root - INFO - \x1b[31mstep:  9  \x1b[32mloss:  5.65265  "
            "\x1b[38;2;180;60;0mgrad_norm:  2.3698  \x1b[34mtps: 2,386\x1b[39m")
    text = torchtitan_run._ANSI.sub("", line + "\n" + line.replace("step:  9", "step: 10").replace("5.65265", "5.5"))
    assert {int(s): float(v) for s, v in torchtitan_run._STEP.findall(text)} == {9: 5.65265, 10: 5.5}


def test_stand_in_dataset_is_c4_shaped(tmp_path):
    import json

    path = torchtitan_run._stand_in_dataset(tmp_path)
    rows = [json.loads(line) for line in (path / "data.json").read_text().splitlines()]
    assert len(rows) > 100 and all(set(r) == {"text"} and len(r["text"]) > 200 for r in rows)
