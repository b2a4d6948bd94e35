"""The report's first page in a real browser (Debian's chromium, headless): a report Snakemake
builds with the workflow's own first page (workflow/report/workflow.rst) around the findings of
a small table, opened at two window sizes and scrolled to the top as a reader would; its first
heading and the findings' counts are then on screen."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from attnlab.analyses import claims as claim_rows
from attnlab.analyses.verdicts import Bar, Interval
from attnlab.report import findings as landing
from attnlab.report.figures_page import Figure, write_figures_page
from attnlab.report.summary import claims_table

ROOT = Path(__file__).resolve().parents[1]
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


def findings(tmp_path: Path) -> list[Path]:
    """Claims tables of two stages: a finding per task, and one judged once per layer."""
    source = claim_rows.source("hao2021", "fig3_low_pruning")
    paths = []
    for task, value in (("t1", 0.9), ("t2", 0.2)):
        rows = [claim_rows.finding("per_layer", "low heads barely hurt", "share of examples",
                                   Interval(value, value - 0.1, value + 0.1, 50), Bar(0.5),
                                   source)]
        rows += [claim_rows.finding("adversarial_attention", "same output",
                                    f"layer {layer}: median JSD, nats",
                                    Interval(0.3, 0.2, 0.4, 20), Bar(0.1), source)
                 for layer in (0, 1)]
        path = tmp_path / f"{task}.parquet"
        claim_rows.claims_frame(rows).assign(task=task).to_parquet(path)
        paths.append(path)
    return paths


def test_each_finding_shows_its_metric_units_interval_bar_and_a_distinct_label(tmp_path):
    table = claims_table(findings(tmp_path), out=tmp_path / "claims.html", origin={},
                         landing=tmp_path / "landing.html")
    page = (tmp_path / "landing.html").read_text()
    rows = re.findall(r"<tr style='background: [^']+'>(.*?)</tr>", page)
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    labels = [(re.sub(r"<.*", "", c[0]) or None, c[1]) for c in cells]
    # the finding's name once for its rows; every row's label its own (task, and layer)
    assert [label for _, label in labels] == ["t1", "t2", "t1, layer 0", "t1, layer 1",
                                              "t2, layer 0", "t2, layer 1"]
    assert len(set(zip(table["claim"], [c[1] for c in cells], strict=True))) == len(rows)
    first = cells[0]
    assert first[2] == "<small>share of examples</small>"
    assert first[3] == "0.9 [0.8, 1]<br><small>n = 50</small>"
    assert first[4].startswith("&gt; 0.5<svg") and first[5] == "holds"
    # the picture: the bar at 0.5 and the interval [0.8, 1] right of it, the estimate inside
    x = {name: float(re.search(rf"class='{name}' {attr}='([\d.]+)'", first[4]).group(1))
         for name, attr in (("bar", "x1"), ("ci", "x1"), ("estimate", "cx"))}
    assert x["bar"] < x["ci"] < x["estimate"]
    assert cells[1][5] == "does not hold"
    assert page.index("class='counts'") < page.index("<h3>")


SNAKEFILE = """
report: {workflow_rst!r}
config["name"] = "t"

rule all:
    input: "results/t/report/claims.html", "results/t/report/run_summary.html"

rule claims:
    input: page="staged/claims.html", landing="staged/landing.html"
    output:
        page=report("results/t/report/claims.html", category="Claims"),
        landing="results/t/report/landing.html",
    shell: "cp {{input.page}} {{output.page}}; cp {{input.landing}} {{output.landing}}"

rule run_summary:
    output: report("results/t/report/run_summary.html", category="Run summary")
    shell: "echo '<p>times</p>' > {{output}}"
"""

# Run in the report once it has drawn the first page: scroll every box to its top (as the Home
# key would), then say where the first heading and the counts are and whether they are seen
# there (the element at their middle is theirs), in the body's data-seen.
READ_THE_TOP = """<script>
function seen(element) {
  const box = element.getBoundingClientRect();
  const middle = document.elementFromPoint((box.left + box.right) / 2,
                                           (box.top + box.bottom) / 2);
  return {text: element.textContent.trim(), top: box.top, bottom: box.bottom,
          shown: box.top >= 0 && box.bottom <= innerHeight && element.contains(middle)};
}
function read() {
  const counts = document.querySelector('#attnlab-findings .counts');
  if (!counts) { setTimeout(read, 50); return; }
  window.scrollTo(0, 0);
  for (const box of document.querySelectorAll('*')) box.scrollTop = 0;
  document.body.dataset.seen = JSON.stringify({
    heading: seen(document.querySelector('.document h1')), counts: seen(counts)});
}
setTimeout(read, 50);
</script>"""


def seen_at_top(report: Path, window: str) -> dict:
    """What the report shows at its top in a window of `window` pixels (READ_THE_TOP)."""
    dom = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={window}",
         "--virtual-time-budget=20000", "--dump-dom", report.as_uri()],
        capture_output=True, text=True, timeout=180, check=True).stdout
    found = re.search(r'data-seen="([^"]*)"', dom)
    assert found, "the report drew no findings"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.skipif(BROWSER is None, reason="no chromium to draw the page in (Debian: apt-get "
                    "install chromium)")
def test_the_report_opens_on_its_first_heading_and_the_findings_counts(tmp_path):
    staged = tmp_path / "staged"
    staged.mkdir()
    # many rows, so that the first page is far taller than the window
    table = claims_table(findings(tmp_path) * 20, out=staged / "claims.html", origin={},
                         landing=staged / "landing.html")
    (tmp_path / "Snakefile").write_text(SNAKEFILE.format(
        workflow_rst=str(ROOT / "workflow" / "report" / "workflow.rst")))
    snakemake = [sys.executable, "-m", "snakemake", "--cores", "1", "--quiet"]
    subprocess.run(snakemake, cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([*snakemake, "--report", "report.html"], cwd=tmp_path, check=True,
                   capture_output=True)
    report = tmp_path / "report.html"
    # the page's own scripts hold "</body>" in strings: the script goes before the last one
    start, end, tail = report.read_text().rpartition("</body>")
    report.write_text(start + READ_THE_TOP + end + tail)
    counts = landing.findings_line(table)
    for window in ("1280,800", "1920,1080"):
        top = seen_at_top(report, window)
        assert top["heading"]["text"] == "attnlab run t: its findings", window
        assert top["heading"]["shown"], (window, top)
        assert top["counts"]["text"].startswith(counts) and top["counts"]["shown"], (window, top)


def test_the_figures_page_shows_every_figure_with_its_caption_under_it(tmp_path):
    paths = []
    for name, colour in (("a.png", "red"), ("b.png", "blue"), ("c.png", "green")):
        paths.append(tmp_path / name)
        Image.new("RGB", (30, 20), colour).save(paths[-1])
    caption = "Accuracy of task {{ snakemake.wildcards.task }}: see ``triggers/<task>/x``."
    figures = [Figure(str(paths[0]), "Triggers", caption, "syn_a"),
               Figure(str(paths[1]), "Heads", "Every *task* at once."),
               Figure(str(paths[2]), "Triggers", caption, "syn_b")]
    write_figures_page(tmp_path / "figures.html", figures, "run")
    page = (tmp_path / "figures.html").read_text()
    # the categories in the order of their names, each figure under its own
    assert page.index("<h2>Heads</h2>") < page.index(str(paths[1])) < page.index(
        "<h2>Triggers</h2>") < page.index(str(paths[0])) < page.index(str(paths[2]))
    shown = re.findall(r"<figure><img src='data:image/png;base64,([^']+)'.*?<figcaption>"
                       r"<code>([^<]+)</code>(.*?)</figcaption></figure>", page, re.S)
    assert [path for _, path, _ in shown] == [str(paths[1]), str(paths[0]), str(paths[2])]
    # each image is the figure's own file, its caption the template filled in for its task
    assert [base64.b64decode(data) for data, _, _ in shown] == [
        p.read_bytes() for p in (paths[1], paths[0], paths[2])]
    assert shown[1][2] == ("<p>Accuracy of task syn_a: see <tt class=\"docutils literal\"><span "
                           "class=\"pre\">triggers/&lt;task&gt;/x</span></tt>.</p>\n")
    assert "task syn_b" in shown[2][2] and "Every <em>task</em> at once." in shown[0][2]
