"""`python -m bench --baseline DIR` (#39): a scenario against DIR's server and this checkout's in
one run, each figure on both sides and current ÷ baseline. Timings are not tested."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest
from bench.__main__ import parse, report, run
from bench.compare import HERE, ratio, sides
from bench.report import fmt
from bench.server import gpufleet_command, loaded_from
from rich.console import Console

BENCH = ["--scenario", "1", "--size", "smoke"]


async def test_a_baseline_run_reports_each_side_and_current_over_baseline(
    tmp_path: Path,
) -> None:
    """Scenario 1 at smoke size with this checkout as its own baseline: the cheapest scenario
    that starts servers (two, one a side)."""
    out = tmp_path / "json"
    args = parse([*BENCH, "--baseline", str(HERE), "--json-out", str(out)])
    compared = sides(args.baseline)
    console = Console(record=True, width=250, file=io.StringIO())
    results = await run(args, console, compared)
    assert report(results, args, compared, console) == 0, console.export_text()[-3000:]
    doc = json.loads((out / "summary.json").read_text())
    assert [(r["side"], r["round"]) for r in doc["results"]] == [("baseline", 0), ("current", 0)]
    assert doc["baseline"]["checkout"] == doc["current"]["checkout"] == str(HERE)
    assert len(list(out.glob("scenario-1-sqlite-*.json"))) == 2  # one a side
    rows = {row["metric"]: row for row in doc["comparison"]}
    assert set(rows) == {c["metric"] for c in doc["results"][1]["checks"]}
    sent = rows["p99 submit sent → event (ms)"]  # after its send: never negative
    [base], [cur], [r] = sent["baseline"], sent["current"], sent["ratio"]
    assert base > 0 and cur > 0 and r == round(cur / base, 2)
    by_path = doc["metric_ratios"]["1 sqlite"]["send_to_event.p99_ms"]
    assert by_path == {"baseline": [base], "current": [cur], "ratio": [r]}
    md = (out / "summary.md").read_text()
    assert "| baseline | current | current ÷ baseline |" in md
    assert f"| p99 submit sent → event (ms) | {fmt(base)} | {fmt(cur)} | {fmt(r)} |" in md
    printed = console.export_text()
    assert "current ÷ baseline" in printed and f" {fmt(r)} " in printed


def test_a_baseline_that_is_no_checkout_of_gpufleet_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse([*BENCH, "--baseline", str(tmp_path)])
    assert "no src/gpufleet there" in capsys.readouterr().err


def test_a_gpufleet_process_for_a_checkout_without_gpufleet_is_seen_running_another(
    tmp_path: Path,
) -> None:
    """What a bench server checks after its start (the baseline run above passes it): a `src`
    without gpufleet is seen running the venv's editable install, not taken for that one."""
    src = tmp_path / "src"
    launch, env = gpufleet_command(src)
    log = tmp_path / "gpufleet.log"
    with log.open("wb") as sink:
        subprocess.run(
            [*launch, "--help"], stdout=sink, stderr=subprocess.STDOUT, env=env, timeout=120
        )
    loaded = loaded_from(log)
    assert loaded is not None and loaded.name == "__init__.py"
    assert not loaded.is_relative_to(src)


def test_ratios_take_numbers_and_shares_but_not_negative_or_zero_baselines() -> None:
    assert ratio(30.0, 20.0) == 1.5
    assert ratio("45% / 30%", "30% / 60%") == "1.50 / 0.50"
    assert ratio("1,200", 600) == 2.0
    assert ratio(2.41, -0.75) is None  # answer → event before the answer: no ratio
    assert ratio(-1.0, 2.0) is None
    assert ratio(1.0, 0) is None
    assert ratio("met", "met") is None and ratio(None, 1.0) is None
    assert ratio("1% / 2%", "1%") is None
