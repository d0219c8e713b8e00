"""Index and summary plot of the benchmark results: reads ``bench/results/<gpu>/*.json``
(the files ``python -m opendnn.bench`` writes) and writes

- ``bench/results/README.md``: one table row per family and GPU -- the file, when and at
  which commit it was measured, how the L2 was flushed, the references, and the ratio to
  the reference (reference time / opendnn time: > 1 = opendnn faster) as a geometric mean
  over the family's rows with the lowest and highest row;
- ``bench/results/<gpu>/summary.svg``: every row's ratio on a log axis, one line per
  family, the geometric mean marked (plain SVG text, no plotting library).

Run (no GPU; a second): python bench/plot.py [--results bench/results]

Rows compared: every row of a family (split by reference where a family has several
large groups, e.g. conv against cuDNN, PyTorch unfused and cudnn-frontend fused), except
the models family's own reference rows (PyTorch eager and inductor): its ``opendnn ...``
rows count, one line per way of running the model. The date and commit are
the file's ``meta`` (``commit`` recorded by the runner), or for files written before the
runner recorded its commit, the commit that added the file to the repository.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
FLUSH = {
    "clean": "clean (read)",
    "dirty": "dirty (write)",
    None: "dirty (do_bench)",
}


def _git_added(path: str) -> tuple[str, str]:
    """(short commit, date) of the commit that created ``path``, followed back through
    moves: the newest commit where it (under its name then) was added or copied."""
    try:
        out = subprocess.run(
            [
                "git",
                "log",
                "--follow",
                "--name-status",
                "--date=short",
                "--format=%x00%h %ad",
                "--",
                os.path.basename(path),
            ],
            cwd=os.path.dirname(path),
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "", ""
    for entry in out.split("\0")[1:]:
        head, *status = entry.strip().split("\n")
        if any(line[:1] in ("A", "C") for line in status):
            commit, date = head.split()[:2]
            return commit, date
    return "", ""


def _counted(row: dict) -> bool:
    """Whether a row compares opendnn with a reference (the models family also has rows
    for the references themselves)."""
    return row.get("family") != "models" or "opendnn" in row.get("case", "")


def _groups(rows) -> dict:
    """{label: rows}: a family's rows, split by reference where at least two references
    have five rows or more (conv: cuDNN, PyTorch unfused, cudnn-frontend fused), and the
    models family by contender (opendnn eager, compile, compile cudagraphs, ...)."""
    fams = {}
    for r in rows:
        fams.setdefault(r["family"], []).append(r)
    out = {}
    for fam, rs in fams.items():
        if fam == "models":
            for r in rs:
                out.setdefault(f"models: {r['case'][r['case'].index('opendnn') :]}", []).append(r)
            continue
        refs = {}
        for r in rs:
            refs.setdefault(r.get("ref", "?"), []).append(r)
        if sum(len(v) >= 5 for v in refs.values()) >= 2:
            for ref, v in refs.items():
                out[f"{fam} vs {ref}"] = v
        else:
            out[fam] = rs
    return out


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def load(results: str) -> dict:
    """{gpu: [file summary, ...]} of every ``<gpu>/*.json`` under ``results``."""
    out = {}
    for gpu in sorted(os.listdir(results)):
        folder = os.path.join(results, gpu)
        if not os.path.isdir(folder):
            continue
        files = []
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".json"):
                continue
            path = os.path.join(folder, name)
            with open(path) as f:
                doc = json.load(f)
            meta, rows = doc.get("meta", {}), doc.get("rows", [])
            commit, date = meta.get("commit"), meta.get("date")
            source = "runner"
            if not commit:
                commit, added = _git_added(path)
                date, source = date or added, "added"
            groups = _groups([r for r in rows if _counted(r) and r.get("ratio")])
            files.append(
                dict(
                    name=name,
                    path=path,
                    meta=meta,
                    date=date,
                    commit=commit,
                    commit_source=source,
                    groups=groups,
                )
            )
        if files:
            out[gpu] = files
    return out


def _refs(rows) -> str:
    counts = {}
    for r in rows:
        counts[r.get("ref", "?")] = counts.get(r.get("ref", "?"), 0) + 1
    return ", ".join(f"{k} ({v})" if len(counts) > 1 else k for k, v in counts.items())


def index_table(data: dict) -> str:
    lines = [
        "| GPU | family | file | measured | L2 flush | rows | compared with "
        "| ratio (geomean) | min – max |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for gpu, files in data.items():
        for f in files:
            commit = f["commit"] + ("" if f["commit_source"] == "runner" else "*")
            flush = FLUSH.get(f["meta"].get("flush"), f["meta"].get("flush"))
            for fam, rows in f["groups"].items():
                ratios = [r["ratio"] for r in rows]
                if fam.startswith("models"):
                    flush = "n/a (whole steps)"
                when = f"{f['date']} {commit}"
                kept = {
                    (r["from"].get("date"), r["from"].get("commit")) for r in rows if r.get("from")
                }
                if len(kept) == 1 and all(r.get("from") for r in rows):
                    when = "{} {} (kept)".format(*kept.pop())
                lines.append(
                    f"| {gpu} | {fam} | [{f['name']}]({gpu}/{f['name']}) | {when} "
                    f"| {flush} | {len(rows)} | {_refs(rows)} "
                    f"| **{_geomean(ratios):.2f}** | {min(ratios):.2f} – {max(ratios):.2f} |"
                )
            m = f["meta"]
            if "plan_build_ms_median" in m:
                lines.append(
                    f"| {gpu} | latency | [{f['name']}]({gpu}/{f['name']}) | {f['date']} "
                    f"{commit} | | | | plan build {m['plan_build_ms_median']} ms, "
                    f"execute() {m['execute_host_us']} us host | |"
                )
    return "\n".join(lines)


def readme(data: dict) -> str:
    notes = []
    for gpu, files in data.items():
        for f in files:
            m = f["meta"]
            parts = [
                f"`{gpu}/{f['name']}`: {m.get('device', '?')}, torch {m.get('torch')}, "
                f"triton {m.get('triton')}, cuDNN {m.get('cudnn')}; floors: copy "
                f"{m.get('copy_GBps')} GB/s, cuBLAS bf16 8192^3 "
                f"{m.get('cublas_bf16_8192_TFLOPs')} TFLOP/s"
            ]
            for fam, src in (m.get("carried") or {}).items():
                parts.append(
                    f"{fam} rows kept from an earlier run ({src.get('date')}, {src.get('commit')})"
                )
            # mode A's first plan against the find's best, per commit the rows were measured
            # at (the heuristics change between runs; kept rows keep their run's ranking)
            by_commit: dict = {}
            for rows in f["groups"].values():
                for r in rows:
                    if r.get("mode_a_ratio"):
                        at = (r.get("from") or {}).get("commit") or m.get("commit")
                        by_commit.setdefault(at, []).append((r["mode_a_ratio"], r["case"]))
            for at in sorted(by_commit, key=lambda c: c != m.get("commit")):
                ranked = by_commit[at]
                worst = min(ranked)
                parts.append(
                    f"heuristics at {at}: mode A's first plan runs at "
                    f"{_geomean([x for x, _ in ranked]):.2f} of the find's best (geomean of "
                    f"{len(ranked)} rows; worst {worst[0]:.2f}, {worst[1]})"
                )
            if m.get("errors"):
                parts.append(f"errors: {m['errors']}")
            notes.append("- " + "; ".join(parts) + ".")
    return f"""# Benchmark results

One file per family and GPU, `<gpu>/<family>.json`, written by `python -m opendnn.bench
<family>` (see `src/opendnn/bench/__main__.py`): a rerun replaces the file. Each row times
opendnn and its reference on the same inputs in the same run; **ratio** = reference time /
opendnn time (> 1: opendnn faster). This page and `<gpu>/summary.svg` are generated by
`python bench/plot.py`.

{index_table(data)}

Measured: the run's date and commit; `*` marks files written before the runner recorded
its commit: the commit that added the file (the code it measured); `(kept)`: rows that an
earlier run measured, kept in the file by a later run of other cases. L2 flush: how the
cache was emptied before each timed call -- `clean (read)` is the runner's default (a
256 MB buffer read), `dirty (do_bench)` the write flush of `triton.testing.do_bench`, which
the runner used before; the write flush charges each call for up to 50 MB of write-back
(~10% of a 134 MB reduction, ~2% of the copy floor), so memory-bound rows read a little
low against their floor in those files. Rows: conv times are CUDA-graph replays (the
`eager_ratio` field has plain calls); attention alternates opendnn and cuDNN; models rows
are whole ResNet-50 / EmoNet steps against PyTorch eager (the reference rows themselves are
not counted).

{chr(10).join(notes)}
"""


def _x(ratio: float, lo: float, hi: float, left: float, width: float) -> float:
    r = min(max(ratio, lo), hi)
    return left + width * (math.log(r) - math.log(lo)) / (math.log(hi) - math.log(lo))


def svg(gpu: str, files: list) -> str:
    groups = [(fam, f, rows) for f in files for fam, rows in f["groups"].items()]
    ratios = [r["ratio"] for _, _, rows in groups for r in rows]
    steps = [t * 10**e for e in range(-2, 3) for t in (1, 2, 5)]  # 0.01 .. 500
    lo = max([t for t in steps if t <= min(ratios)] or steps[:1])
    hi = min([t for t in steps if t >= max(ratios)] or steps[-1:])
    labels = [f"{fam} ({len(rows)})" for fam, _, rows in groups]
    left, right, top, row_h = 20 + 7 * max(len(s) for s in labels), 130, 56, 30
    width = left + 560 + right
    plot_w = width - left - right
    height = top + row_h * len(groups) + 40
    device = files[0]["meta"].get("device", gpu)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        '<text x="20" y="20" font-size="14" font-weight="bold">opendnn against its '
        f"reference, {html.escape(device)}</text>",
        '<text x="20" y="38" fill="#555">ratio = reference time / opendnn time '
        "(log scale; &gt; 1: opendnn faster); dots: rows, bar: geometric mean</text>",
    ]
    ticks = [t for t in steps if lo <= t <= hi]
    bottom = top + row_h * len(groups)
    for t in ticks:
        x = _x(t, lo, hi, left, plot_w)
        stroke = "#333" if t == 1 else "#ddd"
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{bottom}" stroke="{stroke}"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="middle">{t:g}</text>')
    for i, (fam, f, rows) in enumerate(groups):
        y = top + row_h * i + row_h / 2
        if i % 2:
            out.append(
                f'<rect x="0" y="{y - row_h / 2:.1f}" width="{width}" height="{row_h}" '
                'fill="#f5f5f5" fill-opacity="0.6"/>'
            )
        out.append(
            f'<text x="{left - 10}" y="{y + 4:.1f}" text-anchor="end">'
            f"{html.escape(labels[i])}</text>"
        )
        for r in rows:
            x = _x(r["ratio"], lo, hi, left, plot_w)
            color = "#1f77b4" if r["ratio"] >= 1 else "#d62728"
            title = html.escape(f"{r['case']}: {r['ratio']:.2f}x {r.get('ref', '')}")
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}" '
                f'fill-opacity="0.55"><title>{title}</title></circle>'
            )
        g = _geomean([r["ratio"] for r in rows])
        x = _x(g, lo, hi, left, plot_w)
        out.append(
            f'<line x1="{x:.1f}" y1="{y - 10:.1f}" x2="{x:.1f}" y2="{y + 10:.1f}" '
            'stroke="black" stroke-width="2.5"/>'
        )
        out.append(
            f'<text x="{left + plot_w + 10}" y="{y + 4:.1f}">{g:.2f}x '
            f'<tspan fill="#777">({html.escape(f["date"] or "")})</tspan></text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="index table and summary plot of the results")
    ap.add_argument(
        "--results",
        default=os.path.join(HERE, "results"),
        help="folder holding <gpu>/*.json (default: bench/results)",
    )
    args = ap.parse_args(argv)
    data = load(args.results)
    with open(os.path.join(args.results, "README.md"), "w") as f:
        f.write(readme(data))
    for gpu, files in data.items():
        with open(os.path.join(args.results, gpu, "summary.svg"), "w") as f:
            f.write(svg(gpu, files))
    print(
        f"wrote {os.path.join(args.results, 'README.md')} and "
        + ", ".join(f"{gpu}/summary.svg" for gpu in data)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
