"""``refusal-audit report``: a self-contained HTML audit report of a period, with charts.

``data.collect`` reads the warehouse, ``charts.draw`` draws the charts (matplotlib),
``render.write_report`` writes the HTML file and, on request, the charts as PNG files.
"""

from refusal_audit.report.html.data import PeriodData, collect
from refusal_audit.report.html.render import render_html, write_report

__all__ = ["PeriodData", "collect", "render_html", "write_report"]
