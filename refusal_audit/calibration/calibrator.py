"""The calibration of one request at a time, as ``calibrate consume`` does it: the configured
bundles, variant engine and team suite, kept for the life of the consumer
(``processors.calibration.run.calibrate`` and ``refusal_audit.calibration.runs.run_with_suite``,
the file mode's functions).
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from processors.calibration.run import calibrate
from processors.engines.local import LocalEngine
from refusal_audit.bundles import load_bundles
from refusal_audit.calibration.runs import build_suite, build_variant_engine, run_with_suite
from refusal_audit.config import Settings
from schemas.calibration import CalibrationRequest, CalibrationRun, Spectrum


class Calibrator:
    """The configured bundles, variant engine (``engine_name``, default ``calibrate_engine``)
    and team suite, kept for the life of a consumer, with one event loop for the engine's
    calls. Raises ``ConfigError`` (bundles, engine)."""

    def __init__(
        self, cfg: Settings, engine_name: str | None = None, spectrum: Spectrum | None = None
    ) -> None:
        self.bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
        self.engine = build_variant_engine(cfg, engine_name)
        self.suite = build_suite(cfg)
        self.spectrum = spectrum
        self.auditor = LocalEngine()
        self._runner = asyncio.Runner()

    def unknown(self, request: CalibrationRequest) -> str | None:
        """Why ``request`` names an unknown bundle or clause, or None."""
        bundle = self.bundles.get(request.policy_bundle)
        if bundle is None:
            return (
                f"unknown policy bundle {request.policy_bundle!r} "
                f"(configured: {', '.join(sorted(self.bundles))})"
            )
        if bundle.clause(request.clause_id) is None:
            return f"clause {request.clause_id!r} is not in bundle {request.policy_bundle!r}"
        return None

    def run(self, request: CalibrationRequest, run_id: str, created_at: datetime) -> CalibrationRun:
        """Calibrate ``request`` (``processors.calibration.run.calibrate``) and apply the
        team's suite (``run_with_suite``). The run's ``started_by`` is the request's
        ``requested_by`` (None when it names nobody: such a run cannot be approved). Raises
        ``CalibrationInputError`` (unknown bundle or clause, a bundle spectrum that does not
        parse)."""
        run = self._runner.run(
            calibrate(
                request, self.bundles, self.engine, run_id=run_id, created_at=created_at,
                started_by=None, spectrum=self.spectrum, auditor=self.auditor,
            )
        )  # fmt: skip
        return run_with_suite(run, self.bundles[request.policy_bundle], request, self.suite)

    def close(self) -> None:
        """Close the engine's client and the event loop."""
        from refusal_audit.audit.engine_setup import close_engine

        try:
            self._runner.run(close_engine(self.engine))
        finally:
            self._runner.close()


__all__ = ["Calibrator"]
