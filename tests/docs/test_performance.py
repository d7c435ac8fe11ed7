"""docs/performance.md's tables are what scripts/gen-performance makes of the measured
rows in docs/performance.json, and a `scripts/bench --json` file feeds it as it is."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from tests.docs.blocks import ROOT

GENERATOR = ROOT / "scripts" / "gen-performance"
DATA, PAGE = ROOT / "docs" / "performance.json", ROOT / "docs" / "performance.md"


def generate(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GENERATOR), *map(str, args)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def copies(tmp_path: Path) -> tuple[Path, Path]:
    data, page = tmp_path / "performance.json", tmp_path / "performance.md"
    shutil.copy(DATA, data)
    shutil.copy(PAGE, page)
    return data, page


def test_the_page_is_what_the_measured_rows_give() -> None:
    done = generate("--check")
    assert done.returncode == 0, done.stderr
    for run in json.loads(DATA.read_text())["runs"]:
        assert f"<!-- bench:{run['id']} -->\nMeasured {run['measured']} " in PAGE.read_text()


def test_a_changed_number_makes_the_page_stale(tmp_path: Path) -> None:
    data, page = copies(tmp_path)
    document = json.loads(data.read_text())
    document["runs"][0]["rows"][0]["median"] += 1
    data.write_text(json.dumps(document))
    done = generate("--check", "--data", data, "--page", page)
    assert done.returncode == 1 and "is not what" in done.stderr


def test_a_bench_json_file_becomes_a_table(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from benchkit import Report, Row  # what scripts/bench --json writes
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    report = Report({"cores": 2, "docker": "27.0 (API 1.46)", "load_average_at_start": [0.5]})
    report.rows.append(Row("Docker runner, cold, per call (bash-runner)", "ms", 231.25, 260.0,
                           12, "docker run --rm -i, same flags", 402.5, 420.0, 0.5745,
                           "ratio <= 0.9", True))  # fmt: skip
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"machine": report.machine, "rows": [asdict(report.rows[0])]}))
    data, page = copies(tmp_path)
    done = generate("--add", bench, "--run", "workers", "--measured", "2027-01-02", "--data", data,
                    "--page", page)  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "Measured 2027-01-02 with `scripts/bench` (2 cores; Docker 27.0 (API 1.46);" in text
    assert ("| Docker runner, cold, per call (bash-runner) | 231 ms (p95 260) |"
            " docker run --rm -i, same flags: 402 ms | 0.575 | ratio <= 0.9 |") in text  # fmt: skip
    assert "worker start CPU" not in text  # the run's old rows are replaced
    assert generate("--check", "--data", data, "--page", page).returncode == 0
