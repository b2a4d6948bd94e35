"""The benchmarks run and report what docs/benchmarks.md reads from them (at a toy shape: the
numbers themselves are measured on real shapes, not here)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_attribution_benchmark_compares_every_variant_and_records_its_code(tmp_path):
    out = tmp_path / "attribution.json"
    subprocess.run([sys.executable, "benchmarks/attribution.py", "--layers", "1", "--heads", "2",
                    "--hidden", "16", "--tokens", "8", "--examples", "2", "--threads", "1",
                    "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
    report = json.loads(out.read_text())
    variants = report["variants"]
    assert set(variants) == {"naive_riemann_right_20", "engine_riemann_right_20",
                             "engine_gauss_legendre_6", "engine_adaptive",
                             "engine_adaptive_scan_4", "engine_adaptive_scan_2"}
    # the engine computes the naive loop's integral, only faster: the same Riemann sums
    naive, engine = variants["naive_riemann_right_20"], variants["engine_riemann_right_20"]
    assert engine["completeness_error_median"] == pytest.approx(
        naive["completeness_error_median"], rel=1e-3)
    assert variants["engine_gauss_legendre_6"]["grad_nodes_mean"] == 6
    assert variants["engine_adaptive"]["grad_nodes_mean"] >= 3  # at least one panel per layer
    assert report["target"]["variant"] == "engine_adaptive"
    provenance = report["provenance"]
    assert provenance["params"]["command"][0] == "attribution.py"
    assert len(provenance["code_version"]) == 12
