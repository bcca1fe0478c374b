"""The report as one self-contained HTML file, and its charts as PNG files.

The page has no external reference at all: CSS inline, charts inline SVG (``charts.py``),
no script, no font, no image URL. So it opens offline and survives being mailed around.
"""

from __future__ import annotations

from collections import Counter
from datetime import date, datetime
from importlib.resources import files
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from processors.agreement import grouping_rule
from processors.stats import wilson_interval
from refusal_audit.report.html.chart_base import Chart, clean_text
from refusal_audit.report.html.charts import draw
from refusal_audit.report.html.data import MAX_LISTED, PeriodData

MAX_THIN_LISTED = MAX_LISTED
_TEMPLATES = Path(str(files("refusal_audit.report.html") / "templates"))


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _rate(successes: int, trials: int) -> str:
    if trials == 0:
        return "n/a"
    low, high = wilson_interval(successes, trials)
    return f"{successes:,} / {trials:,} = {successes / trials:.1%} [{low:.1%}, {high:.1%}]"


def _share(part: int, whole: int) -> str:
    if whole == 0:
        return "n/a"
    return f"{part:,} / {whole:,} = {part / whole:.1%}"


def _when(value: datetime | date | None) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M UTC")
    return value.isoformat()


def _finalize(value: object) -> object:
    """Every ``{{ ... }}`` output: logged text loses control and bidirectional characters
    (``chart_base.clean_text``) before it is escaped; the charts' SVG stays markup."""
    if isinstance(value, Markup):
        return Markup(clean_text(str(value)))
    return clean_text(value) if isinstance(value, str) else value


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(_TEMPLATES),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.globals.update(pct=_pct, rate=_rate, share=_share, when=_when)
    return env


def _filters(data: PeriodData) -> str:
    parts = [f"model {data.slice.model}" if data.slice.model else "",
             f"product {data.slice.product}" if data.slice.product else ""]  # fmt: skip
    return ", ".join(p for p in parts if p)


def render_html(data: PeriodData, charts: dict[str, Chart] | None = None) -> str:
    """The report page for ``data`` (``charts``: default ``charts.draw(data)``)."""
    charts = draw(data) if charts is None else charts
    totals = Counter[str]()
    for r in data.category_series:
        totals[str(r["category"])] += int(r["assessments"])
    widest = max((n.width for n in data.thin_series), default=0.0)
    return (
        _environment()
        .get_template("report.html")
        .render(
            d=data,
            c=data.counts,
            charts=charts,
            period=f"{data.slice.since.isoformat()} to {data.slice.until.isoformat()}",
            filters=_filters(data),
            generated=_when(data.generated_at),
            category_totals=sorted(totals.items(), key=lambda kv: (-kv[1], kv[0])),
            thin_models={n.label for n in data.thin_model},
            widest=widest,
            max_listed=MAX_THIN_LISTED,
            per_bucket={"day": "daily", "week": "weekly", "month": "monthly"}[data.bucket],
            review_rule=grouping_rule(),
        )
    )


def write_report(data: PeriodData, out: Path, png_dir: Path | None = None) -> list[Path]:
    """Write the HTML report to ``out`` (parent directories created) and, with
    ``png_dir``, each chart as ``<png_dir>/<chart name>.png``; both directories are made
    before anything is written. Returns the paths written, the HTML file first. Raises
    ``OSError`` (with ``filename``) when a directory or file cannot be made or written."""
    charts = draw(data)
    if png_dir is not None:  # both places first: a bad --png must not leave a lone HTML file
        png_dir.mkdir(parents=True, exist_ok=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.is_dir():
        raise IsADirectoryError(21, "is a directory", str(out))
    out.write_text(render_html(data, charts), encoding="utf-8")
    written = [out]
    if png_dir is not None:
        for name, chart in charts.items():
            path = png_dir / f"{name}.png"
            path.write_bytes(chart.png())
            written.append(path)
    return written
