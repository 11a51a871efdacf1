"""The fast, deterministic sample of the conformance harness: every in-scope OpInfo, its first
sample, float32 and int64, forward and float32 gradients. The full run is `make conformance`."""
import os
import subprocess
import sys

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py")


def test_conformance_sample_matches_expected(tmp_path):
    r = subprocess.run([sys.executable, HARNESS, "--mode", "ci", "--check", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=1200)
    report = (tmp_path / "conformance.md").read_text() if (tmp_path / "conformance.md").exists() else ""
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "pass rate without fallback" in report
    # The harness is honest only if it compared something: most pairs must have run.
    import json

    summary = json.loads((tmp_path / "conformance.json").read_text())["summary"]
    assert summary["comparable"] > 1000
    assert summary["counts"].get("crash", 0) == 0
