"""serving.ablation_report on jobs kept in docs/ablations: pass 17's 3-layer baseline and pass
24's 5-layer ablation, trained on one file that each run found under its own work directory."""

from pathlib import Path

from serving.ablation_report import main as report_main

ABL = Path(__file__).resolve().parents[1] / "docs" / "ablations"
BASE = ABL / "tau_h200_pass17" / "runs" / "dspark"
LAYERS5 = ABL / "tau_h200_pass24" / "stage1_30k" / "ablate" / "layers5"


def _rows(table: str) -> dict[str, list[str]]:
    """The table's rows by job, each as its cells."""
    rows = [line.strip("|").split(" | ") for line in table.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): [c.strip() for c in cells] for cells in rows[1:]}


def test_ignored_overrides_leave_the_varied_axis_alone_and_are_named(tmp_path):
    out = tmp_path / "layers"
    assert report_main([str(BASE), str(LAYERS5), "--out", str(out)]) == 0
    plain = _rows(out.with_suffix(".md").read_text())
    # the file's path differs between the runs' work directories: without the flag it is varied
    assert "/tmp/a17/regen.jsonl" in plain["ablate/layers5"][1]
    assert "data.sources=" in plain["runs/dspark"][1]

    argv = [str(BASE), str(LAYERS5), "--ignore-override", "data.sources=", "--out", str(out)]
    assert report_main(argv) == 0
    text = out.with_suffix(".md").read_text()
    rows = _rows(text)
    assert rows["runs/dspark"][1] == "(defaults)"
    assert rows["ablate/layers5"][1] == "draft.num_layers=5"
    assert "Overrides left out (--ignore-override): `data.sources=`" in text
    assert "data.sources=" not in text.split("Overrides left out")[0]
    # the rest of the table is the same: taus and the paired difference on the same items
    assert rows["ablate/layers5"][6:8] == plain["ablate/layers5"][6:8] == ["2.31", "1.71"]
    assert rows["ablate/layers5"][8].startswith("+0.07 (")
