"""A fixed sample of the Hugging Face CausalLM architecture matrix (tests/hf/matrix.py; the whole
matrix is `make hf-matrix`): each architecture's forward, dynamic- and static-cache generate and
backward on neuron against the same code on CPU, with no CPU fallback."""
import json
import os
import subprocess
import sys

MATRIX = os.path.join(os.path.dirname(__file__), "hf", "matrix.py")


def test_sampled_architectures_match_cpu_without_fallbacks(tmp_path):
    r = subprocess.run([sys.executable, MATRIX, "--sample", "16", "--timeout", "300", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    with open(tmp_path / "hf-matrix.json") as f:
        report = json.load(f)
    results = report["results"]
    assert len(results) == 16
    assert [x["arch"] for x in results if x["status"] != "pass"] == [], r.stdout[-4000:]
    for x in results:
        assert x["steps"]["forward"] == "pass" and x["steps"]["backward"] == "pass", x
        assert x["calls"]["copy"] == 0 and x["calls"]["async"] > 0, x
    assert report["summary"]["calls"]["copy"] == 0
