"""``refusal-audit report``: the period's figures, a self-contained HTML file that opens in a
real Chromium offline with every chart drawn, the ``--png`` charts and the CLI's errors.

Set ``REFUSAL_AUDIT_SCREENSHOT_DIR`` to keep the screenshot (the README's comes from here).
"""

from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import orjson
import pytest
from matplotlib.dates import num2date
from PIL import Image
from test_alerting import make_alert
from test_pipeline import EXAMPLE_LOG, audit
from test_review_browser import CHROMIUM, CHROMIUM_ARGS
from test_review_queries import reviewed  # noqa: F401  (fixture)
from typer.testing import CliRunner

from processors.stats import wilson_interval
from refusal_audit.alerts.gaps import track_gaps
from refusal_audit.alerts.publisher import alert_row
from refusal_audit.cli import app
from refusal_audit.report.html import PeriodData, collect, render_html, write_report
from refusal_audit.report.html.charts import draw
from warehouse import Warehouse
from warehouse.queries import run_named
from warehouse.report_queries import ReportFilter, event_day_range

pytestmark = pytest.mark.integration

runner = CliRunner()
SMALL = "acme-chat-small-2025-03"
EVERY_CHART = (
    "fp-by-model", "fp-over-time", "category-mix", "policy-gaps", "review-agreement",
    "verified-fp",
)  # fmt: skip


def _collect(store: Warehouse, **filters: Any) -> PeriodData:
    """``collect`` over every stored event day, after tracking the gaps (as the command)."""
    track_gaps(store, now=datetime.now(UTC))
    span = event_day_range(store.client, store.database)
    assert span is not None
    return collect(
        store.client,
        store.database,
        ReportFilter(span[0], span[1], **filters),
        warehouse="chdb (test)",
        max_width=0.2,
    )


@pytest.fixture
def period(reviewed: list[dict[str, Any]], warehouse: Warehouse) -> PeriodData:  # noqa: F811
    """The example log audited, every assessment reviewed, and one drift alert in the period."""
    span = event_day_range(warehouse.client, warehouse.database)
    assert span is not None
    start = datetime.combine(span[0] + timedelta(days=2), time(), UTC)
    warehouse.insert_alerts([alert_row(make_alert("false_positive_rate_shift", SMALL, 0, start))])
    return _collect(warehouse)


def test_the_figures_are_the_warehouse_s(period: PeriodData, warehouse: Warehouse) -> None:
    daily = run_named(warehouse.client, warehouse.database, "false_positive_rate").as_dicts()
    # 262: the pre-filter reads each response against its request, so the log's 13
    # clarifying questions ("Could you share the text ...?") count as refusals (249 before)
    assert period.counts["audited"] == sum(r["audited"] for r in daily) == 262
    for row in period.fp_by_model:
        mine = [r for r in daily if r["model"] == row["model"]]
        k, n = sum(r["estimated_false_positives"] for r in mine), sum(r["audited"] for r in mine)
        assert (row["estimated_false_positives"], row["audited"]) == (k, n)
        assert (row["low"], row["high"]) == wilson_interval(k, n)
        thin = row["model"] in {note.label for note in period.thin_model}
        assert thin == (row["high"] - row["low"] > 0.2)
    assert period.bucket == "day"  # a week: the series are the named query's own rows
    assert [(r["start"], r["model"], r["audited"], r["wilson_low"]) for r in period.fp_series] == [
        (r["day"], r["model"], r["audited"], r["wilson_low"]) for r in daily
    ]
    assert len(period.thin_series) == sum(r["wilson_high"] - r["wilson_low"] > 0.2 for r in daily)
    widths = [n.width for n in period.thin_series]
    assert widths == sorted(widths, reverse=True)  # the widest listed first
    assert [a.scope.model for a in period.alerts] == [SMALL]
    assert period.agreement and all(r["compared"] > 0 for r in period.agreement)
    assert period.gaps and period.gaps[0]["refusals"] >= period.gaps[-1]["refusals"]
    one_model = _collect(warehouse, model=SMALL)
    assert [r["model"] for r in one_model.fp_by_model] == [SMALL]
    assert {r["model"] for r in one_model.agreement} == {SMALL}


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_page_refers_to_nothing_outside_itself(period: PeriodData) -> None:
    html = render_html(period)
    parser = _Tags()
    parser.feed(html)
    names = {t for t, _ in parser.tags}
    assert not names & {"script", "link", "img", "iframe", "object", "embed", "image"}
    for tag, attrs in parser.tags:
        for key in ("src", "href", "xlink:href", "srcset", "action"):
            value = attrs.get(key) or ""
            assert not value or value.startswith("#"), (tag, key, value)
    assert not re.search(r"url\((?!#)", html) and "@import" not in html  # url(#id): in-page
    ids = [a["id"] for _, a in parser.tags if a.get("id")]
    assert len(ids) == len(set(ids)), "element ids repeat across the inline charts"
    figures = [a["data-chart"] for t, a in parser.tags if t == "figure"]
    assert figures == list(EVERY_CHART)
    assert html.count("<svg") == len(EVERY_CHART)


@pytest.fixture
def browser() -> Iterator[Any]:
    """Chromium for one test (Playwright's sync API leaves an event loop in this thread while
    it runs, and the audit fixtures of the next test need none)."""
    from playwright.sync_api import sync_playwright

    assert CHROMIUM and Path(CHROMIUM).exists(), "Chromium not found (.ci/run installs it)"
    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


def test_the_report_opens_offline_in_chromium_with_every_chart_drawn(
    period: PeriodData, browser: Any, tmp_path: Path
) -> None:
    out = tmp_path / "report.html"
    write_report(period, out)
    context = browser.new_context(viewport={"width": 1200, "height": 900}, offline=True)
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(out.as_uri())
    assert requested == [out.as_uri()] and errors == []
    for name in EVERY_CHART:
        svg = page.locator(f'figure[data-chart="{name}"] svg')
        box = svg.bounding_box()
        assert box is not None and box["width"] > 600 and box["height"] > 80, (name, box)
        drawn = svg.locator("path, use, rect").count()
        assert drawn > 10, (name, drawn)
        assert page.locator(f'figure[data-chart="{name}"] figcaption').inner_text().strip()
    by_model = page.locator('figure[data-chart="fp-by-model"] svg').text_content() or ""
    assert all(r["model"] in by_model for r in period.fp_by_model)
    notes = page.locator("#thin-notes").inner_text()
    assert f"{len(period.thin_series)} of {len(period.fp_series)} daily" in notes
    assert page.locator("#alerts table tr").count() == 2  # header + the alert
    # no word of a table cell is broken across lines (narrow columns once broke
    # "refusals" into "refus" / "als")
    broken = page.evaluate(BROKEN_WORDS_JS)
    assert broken == [], broken
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot), full_page=True)
    keep = os.environ.get("REFUSAL_AUDIT_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        page.set_viewport_size({"width": 1200, "height": 1400})
        page.locator("#false-positives").scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, document.querySelector('#sample-notes').offsetTop - 8)")
        page.screenshot(path=str(Path(keep) / "report.png"))
    context.close()


BROKEN_WORDS_JS = """() => {
  const broken = [];
  for (const cell of document.querySelectorAll("th, td")) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/[A-Za-z]{4,}/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""
"""Words (4+ letters) of table cells whose letters lie on more than one line."""


def test_each_model_has_its_own_panel_and_band(period: PeriodData) -> None:
    """Small multiples: the daily bands of different models never overlap (three
    translucent bands drawn over each other mixed into an unreadable brown)."""
    fig = draw(period)["fp-over-time"].figure
    models = sorted({str(r["model"]) for r in period.fp_series})
    assert [a.get_title(loc="left") for a in fig.axes] == models
    for axes in fig.axes:  # one band (no lone day here) and one rate line per panel
        assert len(axes.collections) == 1
        assert len([line for line in axes.get_lines() if line.get_linestyle() == "-"]) == 1


def test_a_category_keeps_its_colour_whatever_else_the_report_holds() -> None:
    from refusal_audit.report.html.chart_base import category_colours

    codes = [
        "over_refusal", "policy_gray_zone", "capability_boundary", "clarification_needed",
        "genuine_safety_refusal", "violence", "weapons", "drugs", "self_harm",
        "hate_harassment", "sexual_minors", "sexual_content", "privacy", "cyber", "fraud",
        "misinformation", "intellectual_property",
    ]  # the shipped taxonomy's codes
    every = category_colours(codes)
    assert len(set(every.values())) == len(codes)  # all told apart
    for code in codes:
        assert category_colours([code])[code] == every[code]
        assert category_colours([code, "custom_x", "custom_y"])[code] == every[code]
    alone = category_colours(["custom_x"])["custom_x"]
    assert category_colours(["custom_x", *codes[:3]])["custom_x"] == alone
    assert category_colours(["custom_x"])["custom_x"] not in every.values()


def test_gap_bars_are_labelled_by_their_topic_in_whole_words(period: PeriodData) -> None:
    axes = draw(period)["policy-gaps"].figure.axes[0]
    labels = [t.get_text().replace("\n", " ") for t in axes.get_yticklabels()]
    # the log's clarifying questions ("Make it shorter." -> "Could you share the text ...?"),
    # refusals since the pre-filter reads the request, are clarification_needed: no gap
    assert labels[0] == "1. contract, early, internet, provider, terminate"
    assert labels[1] == "2. better, dead, list, painless"
    assert not any(text.startswith("…") or text.endswith("…") for text in labels)


HOSTILE_MODELS = (
    '<img src=x onerror="alert(1)"><script>alert(2)</script>',
    "gpt-$\\frac{a}{$",  # matplotlib would parse $...$ as math, and fail on this one
    "m\u202e-spoof",  # right-to-left override: would reverse the report's own words
    "_hidden-model",  # matplotlib leaves "_" labels out of legends
    'quote" id="evil" x="url(#axes_1)',  # looks like the SVG ids the charts rewrite
    "ctl\x07\x1b-model",
)


def test_logged_text_cannot_inject_markup_or_break_the_charts(
    warehouse: Warehouse, tmp_path: Path
) -> None:
    log = tmp_path / "evil.jsonl"
    log.write_bytes(b"".join(
        orjson.dumps({
            "log_id": f"evil-{i}", "event_time": "2025-06-02T08:00:00Z", "model": model,
            "product": model, "request": "How do I kill a Python process?",
            "response": "I can't help with that request.",
        }) + b"\n"
        for i, model in enumerate(HOSTILE_MODELS)
    ))  # fmt: skip
    audit([log], warehouse)
    data = _collect(warehouse)
    assert len(data.fp_by_model) == len(HOSTILE_MODELS)
    html = render_html(data)
    parser = _Tags()
    parser.feed(html)
    assert not {t for t, _ in parser.tags} & {"img", "script"}
    assert "&lt;img src=x" in html  # shown as text, in the table
    assert "\u202e" not in html and "\x07" not in html and "m-spoof" in html
    ids = [a["id"] for _, a in parser.tags if a.get("id")]
    assert "evil" not in " ".join(ids) and len(ids) == len(set(ids))
    charts = draw(data)
    by_model = charts["fp-by-model"].svg()
    assert "gpt-$\\frac{a}{$" in by_model  # drawn as text, not math
    assert 'url(#axes_1)' in html  # chart text is not rewritten like an id reference
    titles = [a.get_title(loc="left") for a in charts["fp-over-time"].figure.axes]
    assert any("_hidden-model" in t for t in titles)


def test_png_charts_are_real_images(period: PeriodData, tmp_path: Path) -> None:
    written = write_report(period, tmp_path / "r.html", tmp_path / "png")
    assert [p.name for p in written[1:]] == [f"{name}.png" for name in EVERY_CHART]
    for path in written[1:]:
        image = Image.open(io.BytesIO(path.read_bytes()))
        assert image.format == "PNG" and image.width >= 1000
        assert len(image.convert("L").getcolors(maxcolors=1 << 16) or ()) > 20  # not a blank canvas


def test_the_command_writes_the_report_and_the_pngs(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    audited = runner.invoke(app, ["audit", "examples/refusal_log.jsonl"], env=cli_env)
    assert audited.exit_code == 0, audited.output
    out, png = tmp_path / "sub" / "report.html", tmp_path / "png"
    args = ["report", "--since", "2025-06-03", "--until", "2025-06-05", "--out", str(out)]
    result = runner.invoke(app, [*args, "--png", str(png)], env=cli_env)
    assert result.exit_code == 0, result.output
    html = out.read_text(encoding="utf-8")
    assert "Event days 2025-06-03 to 2025-06-05" in html
    assert {p.name for p in png.iterdir()} == {f"{n}.png" for n in EVERY_CHART[:4]}
    assert "No reviewer verdict" in html

    empty = runner.invoke(
        app, ["report", "--since", "2020-01-01", "--until", "2020-01-02", "--out", str(out)],
        env=cli_env,
    )  # fmt: skip
    assert empty.exit_code == 0, empty.output
    assert "No audited refusal in this period" in out.read_text(encoding="utf-8")

    backwards = runner.invoke(
        app, ["report", "--since", "2025-06-05", "--until", "2025-06-03"], env=cli_env
    )
    assert backwards.exit_code == 2 and "after --until" in backwards.output

    later = runner.invoke(app, ["report", "--since", "2030-01-01", "--out", str(out)], env=cli_env)
    assert later.exit_code == 0 and "report of 2030-01-01 to 2030-01-01" in later.output

    typo = runner.invoke(
        app, ["report", "--model", "acme-chat-smal", "--out", str(out)], env=cli_env
    )
    assert typo.exit_code == 2 and "acme-chat-small-2025-03" in typo.output  # lists the models

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    fresh = tmp_path / "fresh.html"
    bad_png = runner.invoke(
        app, ["report", "--out", str(fresh), "--png", str(blocker)], env=cli_env
    )
    assert bad_png.exit_code == 2 and "a-file" in bad_png.output
    assert not fresh.exists()  # nothing half written


def test_an_empty_period_draws_no_chart(warehouse: Warehouse) -> None:
    data = collect(
        warehouse.client, warehouse.database,
        ReportFilter(datetime(2020, 1, 1).date(), datetime(2020, 1, 1).date()),
        warehouse="x", max_width=0.2,
    )  # fmt: skip
    assert data.empty and draw(data) == {}
    assert "No audited refusal" in render_html(data)


def test_one_day_and_days_without_data_are_drawn_as_such(warehouse: Warehouse) -> None:
    audit([EXAMPLE_LOG], warehouse)
    one_day = collect(
        warehouse.client, warehouse.database, ReportFilter(date(2025, 6, 3), date(2025, 6, 3)),
        warehouse="x", max_width=0.2,
    )  # fmt: skip
    charts = draw(one_day)
    assert {"fp-over-time", "category-mix"} <= set(charts)
    axes = charts["fp-over-time"].figure.axes[0]
    low, high = axes.get_xlim()
    assert high - low == pytest.approx(1.0)  # one day wide, not years
    bars = [p for p in charts["category-mix"].figure.axes[0].patches if p.get_height() > 0]
    assert bars and sum(b.get_height() for b in bars) == pytest.approx(1.0)

    # partner-llm-8b on support-bot has no audited refusal on 2025-06-03
    sparse = collect(
        warehouse.client, warehouse.database,
        ReportFilter(date(2025, 6, 2), date(2025, 6, 8), "partner-llm-8b", "support-bot"),
        warehouse="x", max_width=0.2,
    )  # fmt: skip
    days = {r["start"] for r in sparse.fp_series}
    assert date(2025, 6, 3) not in days and len(days) >= 3
    charts = draw(sparse)
    (line,) = charts["fp-over-time"].figure.axes[0].get_lines()
    y = list(line.get_ydata())
    assert math.isnan(y[1]) and sum(not math.isnan(v) for v in y) == len(days)
    per_day: dict[date, float] = {}
    for bar in charts["category-mix"].figure.axes[0].patches:
        day = num2date(bar.get_x() + bar.get_width() / 2).date()
        per_day[day] = per_day.get(day, 0.0) + bar.get_height()
    assert per_day.get(date(2025, 6, 3), 0.0) == 0.0  # no bar where there is no data
    assert all(per_day[d] == pytest.approx(1.0) for d in days)


def test_the_review_charts_stay_readable_with_many_models_and_weeks(period: PeriodData) -> None:
    """50 models x 60 weeks of reviewed assessments (the trend benchmark's 100 M store drew
    a 1,443-inch verified-rate figure and collapsed the agreement chart's axes): the
    agreement chart keeps the 8 model / bundle pairs with the most compared items, the
    verified chart the 25 most recent model-weeks, and both captions say so."""
    agreement, verified = period.agreement[0], period.verified[0]
    first = agreement["week"] - timedelta(weeks=59)
    weeks = [first + timedelta(weeks=k) for k in range(60)]
    models = [f"model-{m:02d}" for m in range(50)]
    many = replace(
        period,
        agreement=[agreement | {"model": m, "week": w, "compared": 10 + i}
                   for i, m in enumerate(models) for w in weeks],
        verified=[verified | {"model": m, "week": w} for m in models for w in weeks],
    )  # fmt: skip
    charts = draw(many)
    agree, fp = charts["review-agreement"], charts["verified-fp"]
    labels = [t.get_text() for t in agree.figure.axes[0].get_legend().get_texts()]
    assert len(labels) == 16  # agreement and kappa of 8 pairs
    assert {x.split(" / ")[0] for x in labels} == set(models[-8:])  # the most compared
    assert "The 8 model / bundle pairs with the most compared items of 50" in agree.caption
    rows = [t.get_text() for t in fp.figure.axes[0].get_yticklabels()]
    assert len(rows) == 25 and all(f"week of {weeks[-1]}" in r for r in rows)
    assert "The 25 most recent of 3000 model-weeks" in fp.caption
    assert fp.figure.get_size_inches()[1] < 20
    for chart in charts.values():  # every chart still renders
        assert chart.svg().startswith("<svg")
