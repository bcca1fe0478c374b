"""``python -m refusal_audit.dashboards [DIR]``: write the dashboards as JSON (sorted keys,
2-space indent, trailing newline: stable output) into DIR, by default
``deploy/grafana/dashboards`` of the working directory."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from refusal_audit.dashboards import build_dashboards


def render(dashboard: object) -> str:
    """The file text of one dashboard: sorted keys, 2-space indent, final newline."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str]) -> int:
    """Write every dashboard into ``argv[0]`` (default ``deploy/grafana/dashboards``)."""
    target = Path(argv[0]) if argv else Path("deploy/grafana/dashboards")
    target.mkdir(parents=True, exist_ok=True)
    for name, dashboard in build_dashboards().items():
        path = target / name
        path.write_text(render(dashboard), encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
