"""The calibration spectrum: the default six styles, or a team's own from its policy bundle.

A team defines its spectrum in the refusal taxonomy file of its bundle, in one fenced block
whose info string is ``calibration-spectrum`` (fenced, so the taxonomy parser,
``processors.policy.parse_taxonomy``, ignores it; inside the bundle, so a spectrum change
changes ``PolicyBundle.version`` and shows in every run)::

    ```calibration-spectrum
    - `minimal_direct`: Minimal and direct: one short sentence that declines.
    - `brief_kind` [base: empathetic_warm]: Brief and kind: one warm sentence, no lecture.
    - `alternative_offering`: Alternative-offering: declines and offers a permitted alternative.
    ```

One list item per style: the style id in backticks (lower_snake_case), an optional
``[base: <default style>]`` (required unless the id is itself one of the six default
styles), a colon, the label, a colon, the description. Other lines in the block (blank,
comments starting with ``#``) are ignored. Errors raise :class:`SpectrumParseError` with
the line number.
"""

from __future__ import annotations

import re

from pydantic import ValidationError

from schemas.calibration import BASE_STYLES, DEFAULT_SPECTRUM, Spectrum, SpectrumStyle
from schemas.policy import PolicyBundle

FENCE_INFO = "calibration-spectrum"
_OPEN = re.compile(r"^\s{0,3}(```|~~~)\s*" + re.escape(FENCE_INFO) + r"\s*$")
_CLOSE = re.compile(r"^\s{0,3}(```|~~~)\s*$")
_ITEM = re.compile(
    r"^\s*[-*+]\s+`([^`]+)`\s*(?:\[\s*base\s*:\s*([a-z_]+)\s*\])?\s*:\s*([^:]+?)\s*:\s*(.+?)\s*$"
)


class SpectrumParseError(ValueError):
    """A ``calibration-spectrum`` block does not follow the format of the module docstring."""


def parse_spectrum(markdown: str) -> Spectrum | None:
    """The spectrum of the ``calibration-spectrum`` block in ``markdown``, or None when there
    is no such block. Raises :class:`SpectrumParseError` for a second block, an unclosed
    block, a malformed item, an unknown base, a duplicate or invalid style id, or an empty
    block."""
    lines = markdown.splitlines()
    start: int | None = None
    end: int | None = None
    fence = ""
    for i, line in enumerate(lines):
        if start is None or end is not None:
            m = _OPEN.match(line)
            if m is not None:
                if start is not None:
                    raise SpectrumParseError(f"line {i + 1}: a second {FENCE_INFO} block")
                start, fence = i, m.group(1)
            continue
        m = _CLOSE.match(line)
        if m is not None and m.group(1) == fence:
            end = i
    if start is None:
        return None
    if end is None:
        raise SpectrumParseError(f"line {start + 1}: the {FENCE_INFO} block is not closed")
    styles: list[SpectrumStyle] = []
    for i in range(start + 1, end):
        line = lines[i]
        if not line.strip() or line.strip().startswith("#"):
            continue
        m = _ITEM.match(line)
        if m is None:
            raise SpectrumParseError(
                f"line {i + 1}: expected '- `style_id` [base: <style>]: Label: description'"
            )
        style, base, label, description = m.groups()
        if base is None:
            if style not in BASE_STYLES:
                raise SpectrumParseError(
                    f"line {i + 1}: style {style!r} needs [base: ...], one of {list(BASE_STYLES)}"
                )
            base = style
        if base not in BASE_STYLES:
            raise SpectrumParseError(
                f"line {i + 1}: base {base!r} is not one of {list(BASE_STYLES)}"
            )
        try:
            styles.append(
                SpectrumStyle.model_validate(
                    {"style": style, "label": label, "description": description, "base": base}
                )
            )
        except ValidationError as exc:
            raise SpectrumParseError(f"line {i + 1}: {exc.errors()[0]['msg']}") from None
    if not styles:
        raise SpectrumParseError(f"line {start + 1}: the {FENCE_INFO} block has no style")
    try:
        return Spectrum(styles=styles, source="bundle")
    except ValidationError as exc:
        raise SpectrumParseError(f"{FENCE_INFO}: {exc.errors()[0]['msg']}") from None


def bundle_spectrum(bundle: PolicyBundle) -> Spectrum:
    """The bundle's own spectrum (its taxonomy's ``calibration-spectrum`` block), else
    ``DEFAULT_SPECTRUM``. Raises :class:`SpectrumParseError` for a malformed block."""
    own = parse_spectrum(bundle.taxonomy_markdown)
    return own if own is not None else DEFAULT_SPECTRUM
