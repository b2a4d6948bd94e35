"""Write docs/results.md from the files of one finished run.

    python docs/generate_results.py results/default --snapshot   # rewrite docs/results.md
    python docs/generate_results.py docs/data/default --check    # exit 1 if it is not current
    python docs/generate_results.py results/replicate --out docs/results-replicate.md

--snapshot copies the run's files that the page reads (kilobytes: the READ patterns) into
docs/data/<name>/ first and writes the page from that copy, so that the page can be checked
against its numbers' files in the repository (tests/test_docs.py does).

Every number of the page is read from the run's files: the fine-tuned models
(finetune/<task>/metrics.json), the attribution summaries (attribution_summary/<task>.json),
every stage's claims (*claims.parquet, grouped by paper and stage as the report's first page
groups them: attnlab.report.findings), the interaction methods' means
(interaction_methods/<task>/intervals.parquet) and the wall time of every job (benchmarks/).
The page names the code version the files record, so a reader can tell which code found them.
A run over several seeds (results/<name>/seed=<s>/) gets every seed's models and attribution
side by side and each finding judged over the seeds, as its claims page judges it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from attnlab.report.findings import (  # noqa: E402
    STAGES,
    checks_line,
    findings_line,
    findings_only,
)
from attnlab.report.summary import claims_table, control_of, seed_of  # noqa: E402

OUTPUT = ROOT / "docs" / "results.md"
SNAPSHOTS = ROOT / "docs" / "data"
# The files of a run (or of each seed=<s> folder of it) that the page reads; no model, no dump.
READ = ("finetune/*/metrics.json", "attribution_summary/*.json", "**/*claims.parquet",
        "interaction_methods/*/intervals.parquet", "benchmarks/**/*.tsv")
# The reason of a claim judged by code from before claims stated their reasons.
UNRECORDED = "the reason is not recorded by the code that ran"


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _number(value: float | None) -> str:
    return "—" if value is None or pd.isna(value) else f"{value:.3g}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _claims_files(run: Path) -> list[Path]:
    # the stages' tables, not the report's gathered one
    return sorted(p for p in run.rglob("*claims.parquet") if "report" not in p.parts)


def snapshot(run: Path, out: Path) -> Path:
    """Copy the files of `run` that the page reads into `out` (emptied first), in the run's
    layout; returns `out`."""
    if out.exists():
        shutil.rmtree(out)
    # not the report's gathered tables, nor the hidden provenance records beside each output
    files = {path for one in seed_runs(run).values() for pattern in READ
             for path in one.glob(pattern) if "report" not in path.relative_to(run).parts
             and not path.name.startswith(".")}
    for path in sorted(files):
        target = out / path.relative_to(run)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return out


def seed_runs(run: Path) -> dict[int | None, Path]:
    """The one-seed runs of `run`: its seed=<s> folders for a run over seeds, else itself."""
    seeds = {seed_of(p / "finetune"): p for p in run.glob("seed=*") if p.is_dir()}
    return dict(sorted(seeds.items())) or {None: run}


def _per_seed(runs: dict[int | None, Path], header: list[str], rows_of) -> str:
    """A table of `rows_of(one-seed run)`'s rows, each seed's after a seed column where there
    are several."""
    if None in runs:
        return _table(header, rows_of(runs[None]))
    return _table(["seed", *header], [[str(seed), *row] for seed, one in runs.items()
                                      for row in rows_of(one)])


def _code_versions(run: Path, runs: dict[int | None, Path], tasks: list[str]) -> list[str]:
    """The code versions the run's files record (one, unless the run was resumed by newer
    code)."""
    versions = {_json(one / "finetune" / t / "metrics.json").get("code_version")
                for one in runs.values() for t in tasks}
    for path in _claims_files(run):
        meta = pq.read_schema(path).metadata or {}
        if b"attnlab" in meta:
            versions.add(json.loads(meta[b"attnlab"]).get("code_version"))
    return sorted(v for v in versions if v)


def _models(run: Path, tasks: list[str]) -> list[list[str]]:
    rows = []
    for task in tasks:
        metrics = _json(run / "finetune" / task / "metrics.json")
        cap = metrics["params"]["finetune"]["epochs"]
        stop = metrics["params"]["finetune"].get("stop_loss")
        # training stops at the first epoch whose loss is below stop_loss, else at the cap
        why = (f"loss < {stop:g}" if stop is not None and metrics["epochs"] < cap
               else "the epoch cap")
        rows.append([task, f"{metrics['n_train']:,}", f"{metrics['epochs']} of {cap} ({why})",
                     f"{metrics['seconds']:.0f} s", metrics["device"],
                     f"{_number(metrics['dev_accuracy'])} ({metrics['n_dev']} examples)"])
    return rows


MODELS = ["task", "training examples", "epochs", "training time", "device", "dev accuracy"]


def _attribution(run: Path, tasks: list[str]) -> list[list[str]]:
    rows = []
    for task in tasks:
        summary = _json(run / "attribution_summary" / f"{task}.json")
        recovery = summary["planted_pair_recovery"]
        rows.append([task, str(summary["examples"]),
                     f"{summary['within_tolerance']:.3f} ({summary['outside_tolerance']} outside)",
                     _number(summary["completeness_abs_error"]["max"]),
                     f"{summary['grad_nodes']['mean']:.1f}",
                     str(recovery["examples"]),
                     f"{_number(recovery['attribution'])} / {_number(recovery['attention'])}"])
    return rows


def _attribution_section(runs: dict[int | None, Path], tasks: list[str]) -> str:
    first = next(iter(runs.values()))
    tolerance = _json(first / "attribution_summary" / f"{tasks[0]}.json")["tolerance"]
    return (f"Completeness: the share of (example, layer) pairs whose attributions sum to the "
            f"change of F within the tolerance ({tolerance:g}, in units of F), and the largest "
            "absolute error. Planted pair: the share of the examples a planted pair decides in "
            "which the strongest edge of some layer joins it, by attribution / raw attention.\n\n"
            + _per_seed(runs, ["task", "dev examples", "within tolerance", "largest error",
                               "gradient evaluations per (example, layer)",
                               "planted-pair examples", "planted pair found"],
                        lambda one: _attribution(one, tasks)))


def _cell(rows: pd.DataFrame, reasons: dict[str, int]) -> str:
    """One task's cell of a claim: its number, interval and verdict; a claim judged once per
    layer (several rows) as the range of its numbers and how many hold; a reason's footnote
    where it is not testable."""
    if len(rows) > 1:
        held = int((rows["outcome"] == "holds").sum())
        return (f"{_number(rows['value'].min())}–{_number(rows['value'].max())}, {held} of "
                f"{len(rows)} hold")
    row = rows.iloc[0]
    mark = row["verdict"]
    if row["outcome"] == "not testable":
        reasons.setdefault(row["reason"], len(reasons) + 1)
        mark += f" ({reasons[row['reason']]})"
    interval = f" [{_number(row['low'])}, {_number(row['high'])}]" if pd.notna(row["low"]) else ""
    return f"{_number(row['value'])}{interval} {mark}"


def _claims(run: Path) -> str:
    """The run's findings by group and stage (its checks counted in one line); a control
    run's claims (control=<control>/) are not the run's."""
    files = _claims_files(run)
    with tempfile.TemporaryDirectory() as tmp:
        table = claims_table([p for p in files if not control_of(p)],
                             controls_paths=[p for p in files if control_of(p)], origin={},
                             out=Path(tmp, "claims.html"))
    parts = [f"{findings_line(table)} (findings, one per task it is judged on; "
             f"{checks_line(table)}, not counted as findings).\n"]
    table = findings_only(table)
    tasks = sorted({t for t in table["task"] if isinstance(t, str) and "–" not in t})
    for group, rows in table.groupby("group", sort=False):
        parts.append(f"### {group}\n\n{findings_line(rows)}.\n")
        for stage, claims in rows.groupby("stage", sort=False):
            body, reasons = [], {}
            for claim, per_task in claims.groupby("claim", sort=False):
                cells = {}
                for task, rows_ in per_task.groupby(per_task["task"].fillna("all tasks"),
                                                    sort=False):
                    cells[task] = _cell(rows_, reasons)
                other = [f"{t}: {c}" for t, c in cells.items() if t not in tasks]
                body.append([claim.replace("|", "\\|"), *(cells.get(t, "") for t in tasks),
                             *(["; ".join(other)] if other else [])])
            width = max(len(row) for row in body)
            header = ["claim", *tasks, "other"][:width]
            body = [row + [""] * (width - len(row)) for row in body]
            parts.append(f"*{STAGES.get(stage, stage)}* (`{stage}`)\n\n" + _table(header, body))
            parts += [f"({n}) not testable: {reason or UNRECORDED}\n"
                      for reason, n in reasons.items()]
    return "\n".join(parts)


def _interaction(runs: dict[int | None, Path], tasks: list[str]) -> str:
    """Each interaction method's mean on each measure, per model (trained, untrained), the
    tasks side by side (over seeds, the mean of the seeds' means); rows ordered by the first
    task's direction-free deletion AOPC."""
    files = [one / "interaction_methods" / t / "intervals.parquet"
             for one in runs.values() for t in tasks]
    frames = [pd.read_parquet(path) for path in files if path.exists()]
    if not frames:
        return "The run has no interaction-methods stage.\n"
    intervals = pd.concat(frames)
    measures = list(dict.fromkeys(intervals["measure"]))
    parts = []
    for model, rows in intervals.groupby("model", sort=False):
        means = rows.pivot_table(index="method", columns=["measure", "task"], values="mean")
        # one row per method, however many seeds: ordered by the seeds' mean
        first = ("deletion_tv", rows["task"].iloc[0])
        order = (means[first].sort_values(ascending=False).index.tolist()
                 if first in means.columns else list(means.index))
        table = [[f"`{method}`"] + [" / ".join(
            _number(means.loc[method].get((measure, task))) for task in tasks)
            for measure in measures] for method in order]
        parts.append(f"**{model.capitalize()} model** ({' / '.join(tasks)}):\n\n"
                     + _table(["method", *measures], table))
    return "\n".join(parts)


def _run_time(runs: dict[int | None, Path]) -> str:
    files = {}
    for one in runs.values():
        for item in (one / "benchmarks").iterdir():
            files.setdefault(item.name.removesuffix(".tsv"), []).extend(
                item.rglob("*.tsv") if item.is_dir() else [item])
    rows = [(rule, len(tsvs), sum(pd.read_csv(f, sep="\t")["s"].sum() for f in tsvs))
            for rule, tsvs in files.items()]
    rows.sort(key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    return (f"The jobs' wall times summed by rule, from the `benchmark:` files: {total:.0f} s "
            "in all (jobs run side by side, so `make run` takes less; this machine's load "
            "moves them).\n\n" + _table(["rule", "jobs", "seconds"],
                                        [[r, str(n), f"{s:.0f}"] for r, n, s in rows]))


def generate(run: Path, *, command: str) -> str:
    """The page for the run whose files are in `run` (results/<name>/), which `command`
    writes."""
    run = Path(run)
    runs = seed_runs(run)
    first = next(iter(runs.values()))
    tasks = sorted(p.name for p in (first / "finetune").iterdir() if p.is_dir())
    versions = ", ".join(f"`{v}`" for v in _code_versions(run, runs, tasks)) or "not recorded"
    seeds = [seed for seed in runs if seed is not None]
    kept = ""
    if run.resolve().parent == SNAPSHOTS:
        kept = (f"\nThose files are kept in [`docs/data/{run.name}/`](data/{run.name}/): the tests "
                "check this page against them.")
    if seeds:
        what = (f"one run of the configuration `{run.name}` over {len(seeds)} training seeds "
                f"({', '.join(map(str, seeds))}; each seed's files in "
                f"`results/{run.name}/seed=<s>/`)")
        draw = ("Each finding is judged over the seeds, as the claims page judges it "
                "([methods.md](methods.md#how-a-finding-is-judged)): its pooled estimate and "
                "interval, and in how many seeds it holds.")
        per_task = "the pooled number and the verdict over the seeds per task"
    else:
        what = f"one run of the configuration `{run.name}` (`results/{run.name}/`)"
        draw = ("One training run is one draw: on another CPU or seed the models differ "
                "slightly and so do the numbers; `make run CONFIG=config/replicate.yaml` judges "
                "every claim over 5 seeds ([replication.md](replication.md)).")
        per_task = "this run's number and verdict per task"
    return f"""# What the `{run.name}` run finds

<!-- Generated by docs/generate_results.py from the files of one run. Do not edit: after the
     run, run `{command}`. -->

Every number below is read from the files of {what},
by code version {versions} (as its files record it).{kept}
The report `results/{run.name}/report.html` shows the same claims first, with their figures.
{draw}
The methods are defined in [methods.md](methods.md); each claim's metric and threshold are in
the claims page of the report.

## The models

`finetune/<task>/metrics.json`:

{_per_seed(runs, MODELS, lambda one: _models(one, tasks))}
## Attribution and completeness

`attribution_summary/<task>.json`:

{_attribution_section(runs, tasks)}
## The claims

Every stage's claims (`*claims.parquet`), by paper and stage:
{per_task}; a claim the configuration cannot test says why.

{_claims(run)}
## Interaction methods

`interaction_methods/<task>/intervals.parquet`: each method's mean over the examples (their
95 % bootstrap intervals are in the file and the report), on the trained model and on an
untrained one of the same shape; the measures are defined in
[interaction_methods.md](interaction_methods.md). "—": the measure does not apply (random has no
planted edge).

{_interaction(runs, tasks)}
## Run time

{_run_time(runs)}"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python docs/generate_results.py",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run's folder, results/<name>")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the page is not the run's, writing nothing")
    parser.add_argument("--out", type=Path, default=OUTPUT, metavar="FILE",
                        help="the page to write or check (default: docs/results.md)")
    parser.add_argument("--snapshot", nargs="?", const="", metavar="FOLDER",
                        help="copy the files the page reads to FOLDER (default: "
                             "docs/data/<name>/) and write the page from that copy")
    args = parser.parse_args(argv)
    if not all((one / "finetune").is_dir() for one in seed_runs(args.run).values()):
        parser.error(f"{args.run} is not a finished run's folder (it has no finetune/)")
    run = args.run
    if args.snapshot is not None:
        run = snapshot(args.run, Path(args.snapshot) if args.snapshot else SNAPSHOTS / run.name)
    if run.resolve().parent == SNAPSHOTS:  # written from its snapshot: rewritten the same way
        command = f"python docs/generate_results.py results/{run.name} --snapshot"
    else:
        command = f"python docs/generate_results.py {run.as_posix()}"
    if args.out.resolve() != OUTPUT:
        command += f" --out {args.out.as_posix()}"
    text = generate(run, command=command)
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is not the page of {args.run}: run python docs/generate_results.py "
                  f"{args.run}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
