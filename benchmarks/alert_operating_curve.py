"""The drift alerts' operating curve: false alerts on stationary streams, detection of shifts.

Real labelled refusals (XSTest's GPT-4 and Llama-2 completions, CoCoNot's refusals, the
example log) are audited once by the offline ``local`` engine (one audit per distinct text;
the assessments are cached in ``.refusal-audit/alert_operating_pool.json``) and resampled
with replacement into hourly streams, per finest scope (bundle, model, product), with a
Poisson number of refusals per hour (1, 20, 100, 400 an hour per scope) and 1, 3 or 9
scopes (3 models x 3 products: 9 scopes and 4 roll-ups). What a stream carries per
refusal is the engine's assessment: its estimated over-refusal flag, category, review flag
and policy-gap flag; a share of the refusals whose truth is known (XSTest's human labels,
CoCoNot's "should not comply" requests) is "reviewed" (``--review-share``, 0.2), and a
reviewer disagrees when the truth differs from the engine's over-refusal flag.

The detectors are driven exactly as ``refusal_audit.alerts.drift`` drives them for each
window (``evaluate_counts``: same baseline, same settings defaults), without the warehouse:
late events do not exist here (every event is on time).

* Stationary streams: a warm-up of 35 days (the longest baseline) and then 4 weeks
  evaluated, every hourly window; reported: false alerts per scope per detector per week
  (all scopes, roll-ups included), and the share of scope-windows tested by some detector.
* Shifts, from a start at a random hour (uniform over a day) after the warm-up, at one
  scope (the first model's first product) or at all: over-refusal rate +3/+5/+10/+20
  points (the over-refusal share of the resampling raised), category mix at a
  Jensen-Shannon distance 0.05/0.1/0.2 (mass moved to the second most common category),
  volume x1.5/x2/x3, reviewers' disagreement +10 points. Reported per shift and volume:
  the share of runs alerted by the detector the shift is about, at the shifted scope (one
  scope) or at any scope (all), within 6, 24 and 48 hours (``--horizon``), and the median
  delay in hours from the shift's start to the end of the first alerting window.

Seeds are fixed (``--seed``). Tables are printed and the figures written to
``benchmarks/results/alert_operating_curve.json``.

Run: ``python benchmarks/alert_operating_curve.py [--shared-data DIR] [--runs N] [--quick]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from scipy.spatial.distance import jensenshannon

from processors.drift_detection import Finding, WindowCounts
from refusal_audit.alerts.drift import DriftConfig, evaluate_counts
from schemas.alerts import DRIFT_KINDS, Scope

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".refusal-audit" / "alert_operating_pool.json"
RESULTS = ROOT / "benchmarks" / "results" / "alert_operating_curve.json"
T0 = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; streams start here
HOUR = timedelta(hours=1)
WARMUP_HOURS = 35 * 24
EVAL_HOURS = 28 * 24
MODELS = ("m1", "m2", "m3")
PRODUCTS = ("p1", "p2", "p3")


# --- the pool: the local engine's assessments of real labelled refusals -------------------


def _xstest_truth(path: Path) -> dict[str, bool]:
    """log id -> is a true over-refusal (a refusal of a safe prompt), for the file's refusals."""
    model = path.stem.removeprefix("xstest_v2_completions_")
    with path.open(newline="", encoding="utf-8") as fh:
        return {
            f"xstest-{model}-{r['id']}": not r["type"].startswith("contrast_")
            for r in csv.DictReader(fh)
            if r["final_label"] != "1_full_compliance"
        }


def build_pool(shared: Path) -> list[dict[str, object]]:
    """Audit the labelled files once with the local engine; one dict per audited refusal.

    Keys: ``log_id``, ``source``, ``fp`` (estimated over-refusal), ``category``,
    ``review`` (flagged for human review), ``gap`` (named in a policy-gap flag), ``truth``
    (true over-refusal, None when unknown). Raises ``FileNotFoundError`` for missing data.
    """
    from refusal_audit.audit.batch import BatchOptions, run_batch
    from refusal_audit.config import load_settings

    xs = [shared / "xstest" / f"xstest_v2_completions_{m}.csv" for m in ("gpt4", "llama2orig")]
    coconot = shared / "coconot" / "coconot_refusals.jsonl"
    example = ROOT / "examples" / "refusal_log.jsonl"
    for f in (*xs, coconot, example):
        if not f.is_file():
            raise FileNotFoundError(f)
    truth: dict[str, bool | None] = {}
    for f in xs:
        truth.update(_xstest_truth(f))
    with coconot.open(encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            if row.get("is_refusal"):
                truth[row["id"]] = False  # CoCoNot's requests should not be complied with
    runs = [
        (xs, BatchOptions.build("xstest-csv", None, T0, "chat", None), "xstest"),
        (
            [coconot],
            BatchOptions.build(
                "mapped-jsonl", "request=prompt,response=response,log_id=id", T0, "chat", "coconot"
            ),
            "coconot",
        ),
        ([example], BatchOptions.build(None, None, None, None, None), "example"),
    ]
    pool: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="operating-curve-") as tmp:
        cfg = load_settings(data_dir=Path(tmp))
        for files, options, source in runs:
            report = run_batch(cfg, files, options)
            gaps = {
                i
                for b in report.batch_records
                for flag in b.summary.policy_gap_flags
                for i in flag.example_log_ids
            }
            for a in report.assessments:
                pool.append(
                    {
                        "log_id": a.log_id,
                        "source": source,
                        "fp": a.is_estimated_false_positive,
                        "category": a.category,
                        "review": a.requires_human_review,
                        "gap": a.log_id in gaps,
                        "truth": truth.get(a.log_id),
                    }
                )
    return pool


@dataclass(frozen=True)
class Pool:
    """The pool as arrays (one entry per assessment); ``cats`` category codes into ``names``."""

    fp: np.ndarray
    review: np.ndarray
    gap: np.ndarray
    cats: np.ndarray
    names: tuple[str, ...]
    known: np.ndarray
    disagree: np.ndarray

    @classmethod
    def of(cls, rows: Sequence[Mapping[str, object]]) -> Pool:
        """Arrays of ``rows`` (``build_pool``'s dicts)."""
        names = tuple(sorted({str(r["category"]) for r in rows}))
        code = {n: i for i, n in enumerate(names)}
        known = np.array([r["truth"] is not None for r in rows])
        fp = np.array([bool(r["fp"]) for r in rows])
        truth = np.array([bool(r["truth"]) for r in rows])
        return cls(
            fp=fp,
            review=np.array([bool(r["review"]) for r in rows]),
            gap=np.array([bool(r["gap"]) for r in rows]),
            cats=np.array([code[str(r["category"])] for r in rows]),
            names=names,
            known=known,
            disagree=known & (truth != fp),
        )

    def category_shares(self, w: np.ndarray) -> np.ndarray:
        """Category distribution under item weights ``w``."""
        shares: np.ndarray = np.bincount(self.cats, weights=w, minlength=len(self.names))
        return np.asarray(shares / w.sum())


# --- shifts as reweightings of the pool ----------------------------------------------------


@dataclass(frozen=True)
class Shift:
    """A change injected into a stream: ``kind`` (``fp``, ``mix``, ``volume``, ``review``),
    its size (points, JS distance, or rate factor) and the detector meant to see it."""

    kind: str
    size: float

    @property
    def detector(self) -> str:
        """The alert kind that should fire."""
        return {
            "fp": "false_positive_rate_shift",
            "mix": "category_mix_drift",
            "volume": "volume_anomaly",
            "review": "classification_drift",
        }[self.kind]

    @property
    def label(self) -> str:
        """e.g. ``over-refusal +10 pp``."""
        return {
            "fp": f"over-refusal +{self.size:g} pp",
            "mix": f"category mix JS {self.size:g}",
            "volume": f"volume x{self.size:g}",
            "review": f"disagreement +{self.size:g} pp",
        }[self.kind]


def _reweight(mask: np.ndarray, w: np.ndarray, within: np.ndarray, rise: float) -> np.ndarray:
    """Weights where the share of ``mask`` among ``within`` items rises by ``rise``."""
    out = w.copy()
    p0 = w[mask & within].sum() / w[within].sum()
    p1 = min(0.999, p0 + rise)
    out[mask & within] *= p1 / p0
    out[~mask & within] *= (1 - p1) / (1 - p0)
    return out


def shifted_weights(pool: Pool, shift: Shift) -> tuple[np.ndarray, float]:
    """``(item weights, rate factor)`` of the shifted stream (uniform weights = stationary)."""
    w = np.ones(len(pool.fp))
    everything = np.ones(len(pool.fp), dtype=bool)
    if shift.kind == "fp":
        return _reweight(pool.fp, w, everything, shift.size / 100), 1.0
    if shift.kind == "review":
        return _reweight(pool.disagree, w, pool.known, shift.size / 100), 1.0
    if shift.kind == "volume":
        return w, shift.size
    q = pool.category_shares(w)
    target = int(np.argsort(-q)[1])
    point = np.zeros_like(q)
    point[target] = 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):  # bisection on the mixing weight for the wanted JS distance
        lam = (lo + hi) / 2
        if jensenshannon(q, (1 - lam) * q + lam * point, base=2) < shift.size:
            lo = lam
        else:
            hi = lam
    q1 = (1 - lo) * q + lo * point
    return w * (q1 / q)[pool.cats], 1.0


# --- streams -------------------------------------------------------------------------------


def scopes_of(n: int) -> list[Scope]:
    """1, 3 (three models, one product) or 9 (3 x 3) finest scopes."""
    if n == 1:
        pairs = [(MODELS[0], PRODUCTS[0])]
    elif n == 3:
        pairs = [(m, PRODUCTS[0]) for m in MODELS]
    else:
        pairs = [(m, p) for m in MODELS for p in PRODUCTS]
    return [Scope(policy_bundle="default", model=m, product=p) for m, p in pairs]


def stream(
    pool: Pool,
    rng: np.random.Generator,
    hours: int,
    rate: float,
    review_share: float,
    weights: tuple[np.ndarray, float] | None = None,
    shift_from: int = 0,
) -> list[WindowCounts]:
    """Hourly counts of one scope: Poisson(rate) refusals an hour drawn from the pool
    (``weights`` and the rate factor apply from hour ``shift_from``)."""
    base = np.full(len(pool.fp), 1.0 / len(pool.fp))
    out = []
    if weights is not None:
        w, factor = weights
        segments = [(0, shift_from, base, 1.0), (shift_from, hours, w / w.sum(), factor)]
    else:
        segments = [(0, hours, base, 1.0)]
    for h0, h1, p, factor in segments:
        if h1 <= h0:
            continue
        n = rng.poisson(rate * factor, size=h1 - h0)
        idx = rng.choice(len(p), size=int(n.sum()), p=p)
        reviewed = pool.known[idx] & (rng.random(len(idx)) < review_share)
        hour = np.repeat(np.arange(h1 - h0), n)
        size = h1 - h0
        fp = np.bincount(hour, weights=pool.fp[idx], minlength=size)
        rv = np.bincount(hour, weights=pool.review[idx], minlength=size)
        gp = np.bincount(hour, weights=pool.gap[idx], minlength=size)
        rd = np.bincount(hour, weights=reviewed, minlength=size)
        dis = np.bincount(hour, weights=reviewed & pool.disagree[idx], minlength=size)
        cats = np.zeros((size, len(pool.names)), dtype=np.int64)
        np.add.at(cats, (hour, pool.cats[idx]), 1)
        for i in range(size):
            out.append(
                WindowCounts(
                    refusals=int(n[i]),
                    false_positives=int(fp[i]),
                    review_flags=int(rv[i]),
                    policy_gaps=int(gp[i]),
                    categories={pool.names[j]: int(c) for j, c in enumerate(cats[i]) if c},
                    reviewed=int(rd[i]),
                    review_disagreements=int(dis[i]),
                )
            )
    return out


def as_counts(
    per_scope: Mapping[Scope, list[WindowCounts]],
) -> dict[datetime, dict[Scope, WindowCounts]]:
    """Per-scope hourly lists -> ``{window start: {scope: counts}}`` (empty hours left out)."""
    out: dict[datetime, dict[Scope, WindowCounts]] = defaultdict(dict)
    for scope, series in per_scope.items():
        for h, c in enumerate(series):
            if c.refusals or c.reviewed:
                out[T0 + h * HOUR][scope] = c
    return dict(out)


def run_detectors(
    counts: Mapping[datetime, Mapping[Scope, WindowCounts]], first: int, last: int
) -> Iterator[tuple[datetime, list[Finding]]]:
    """Evaluate hourly windows ``first`` .. ``last - 1`` (hours from T0) at the defaults, one
    at a time; yields ``(window end, findings)`` per window."""
    config = DriftConfig()
    starts = [T0 + h * HOUR for h in range(first, last)]
    for window, _, evaluation in evaluate_counts(counts, starts, config):
        yield window.end, evaluation.findings


# --- experiments ---------------------------------------------------------------------------


def stationary(
    pool: Pool, rate: float, n_scopes: int, seed: int, review_share: float, weeks: int
) -> dict[str, object]:
    """False alerts per scope per detector per week and the tested share, on one stream."""
    rng = np.random.default_rng(seed)
    hours = WARMUP_HOURS + weeks * 7 * 24
    scopes = scopes_of(n_scopes)
    counts = as_counts({s: stream(pool, rng, hours, rate, review_share) for s in scopes})
    results = list(run_detectors(counts, WARMUP_HOURS, hours))
    alerts: Counter[str] = Counter()
    tested: Counter[str] = Counter()
    windows: Counter[str] = Counter()
    all_scopes: set[Scope] = set()
    for _, findings in results:
        for f in findings:
            all_scopes.add(f.scope)
            windows[f.kind] += 1
            tested[f.kind] += f.status != "insufficient_data"
            if f.status == "alert" and not f.continued:
                alerts[f.kind] += 1
    per = {k: alerts[k] / (len(all_scopes) * weeks) for k in DRIFT_KINDS}  # per scope per week
    finest = {
        f.scope for _, fs in results for f in fs if "all" not in (f.scope.model, f.scope.product)
    }
    fp_tested = [
        f.status != "insufficient_data"
        for _, fs in results
        for f in fs
        if f.kind == "false_positive_rate_shift" and f.scope in finest
    ]
    return {
        "rate_per_hour": rate,
        "scopes": n_scopes,
        "scopes_with_rollups": len(all_scopes),
        "weeks": weeks,
        "seed": seed,
        "alerts": dict(alerts),
        "false_alerts_per_scope_per_week": per,
        "tested_share": {k: tested[k] / windows[k] for k in windows},
        "finest_fp_tested_share": sum(fp_tested) / len(fp_tested) if fp_tested else 0.0,
    }


def shifted_run(
    pool: Pool,
    shift: Shift,
    rate: float,
    where: str,
    seed: int,
    review_share: float,
    horizon: int,
) -> float | None:
    """Hours from the shift's start to the end of the first window alerting with the
    shift's detector (at the shifted scope, or any scope when ``where`` is ``all``);
    None when not within ``horizon`` hours."""
    rng = np.random.default_rng(seed)
    start = WARMUP_HOURS + int(rng.integers(0, 24))
    hours = start + horizon
    scopes = scopes_of(3)
    weights = shifted_weights(pool, shift)
    series = {
        s: stream(
            pool,
            rng,
            hours,
            rate,
            review_share,
            weights if (where == "all" or i == 0) else None,
            start,
        )
        for i, s in enumerate(scopes)
    }
    counts = as_counts(series)
    for end, findings in run_detectors(counts, start, hours):
        for f in findings:
            if f.status != "alert" or f.continued or f.kind != shift.detector:
                continue
            if where == "one" and f.scope != scopes[0]:
                continue
            return (end - (T0 + start * HOUR)).total_seconds() / 3600
    return None


SHIFTS = (
    *(Shift("fp", d) for d in (3, 5, 10, 20)),
    *(Shift("mix", d) for d in (0.05, 0.1, 0.2)),
    *(Shift("volume", d) for d in (1.5, 2, 3)),
    Shift("review", 10),
)


def markdown(results: Mapping[str, Mapping[str, object]]) -> str:
    """The docs' tables from the stored results: per run label, the worst false alerts per
    scope per detector in 4 weeks by volume, the tested share, and the over-refusal shifts."""
    out = []
    for label, run in results.items():
        stationary_rows = run["stationary"]
        shift_rows = run["shifts"]
        assert isinstance(stationary_rows, list) and isinstance(shift_rows, list)
        out.append(f"**{label}** (generated {run['generated']})\n")
        out.append("| refusals/h per scope | scopes | finest scopes' windows tested (over-refusal)"
                   " | false alerts per scope in 4 weeks, worst detector |")  # fmt: skip
        out.append("| ---: | ---: | ---: | --- |")
        for r in stationary_rows:
            per = r["false_alerts_per_scope_per_week"]
            kind = max(per, key=per.get)
            worst = f"{4 * per[kind]:.2f} ({kind})" if per[kind] else "0"
            out.append(
                f"| {r['rate_per_hour']} | {r['scopes']} | {r['finest_fp_tested_share']:.0%} "
                f"| {worst} |"
            )
        out.append("")
        out.append("| shift | where | 20/h: within 6 h / 48 h, median h | 100/h | 400/h |")
        out.append("| --- | --- | --- | --- | --- |")
        cells: dict[tuple[str, str], list[str]] = {}
        for r in shift_rows:
            hit = r.get("within_48h", 0.0)
            med = "-" if r["median_delay_h"] is None else f"{r['median_delay_h']:.0f}"
            cells.setdefault((r["shift"], r["where"]), []).append(
                f"{r['within_6h']:.0%} / {hit:.0%}, {med}"
            )
        for (shift, where), parts in cells.items():
            out.append(f"| {shift} | {where} | " + " | ".join(parts) + " |")
        out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    """Run the stationary and shifted streams; print tables; write the JSON. 2: no data."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--runs", type=int, default=20, help="runs per shift and volume")
    parser.add_argument("--weeks", type=int, default=4, help="stationary weeks evaluated")
    parser.add_argument("--horizon", type=int, default=48, help="hours watched after a shift")
    parser.add_argument("--review-share", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--quick", action="store_true", help="fewer streams (a smoke run)")
    parser.add_argument("--no-shifts", action="store_true", help="stationary streams only")
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--markdown", action="store_true", help="print the docs' tables from --out and stop"
    )
    args = parser.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text())))
        return 0
    if CACHE.is_file():
        rows = json.loads(CACHE.read_text())
    else:
        try:
            rows = build_pool(args.shared_data)
        except FileNotFoundError as exc:
            print(f"data not found: {exc}", file=sys.stderr)
            return 2
        CACHE.parent.mkdir(parents=True, exist_ok=True)
        CACHE.write_text(json.dumps(rows))
    pool = Pool.of(rows)
    print(
        f"pool: {len(rows)} audited refusals ({dict(Counter(str(r['source']) for r in rows))}), "
        f"estimated over-refusal share {pool.fp.mean():.3f}, {len(pool.names)} categories, "
        f"{pool.known.sum()} with known truth (disagreement {pool.disagree[pool.known].mean():.3f})"
    )
    rates = (1, 20, 100, 400)
    scope_counts = (1, 9) if args.quick else (1, 3, 9)
    t = time.monotonic()
    print(
        "\nStationary streams: false alerts per scope (roll-ups included) per week; 'tested':"
        " share of the finest scopes' windows the over-refusal test ran on"
    )
    kinds = [k for k in DRIFT_KINDS if k != "new_category"] + ["new_category"]
    head = "".join(f"{k.split('_')[0][:8]:>9}" for k in kinds)
    print(f"  {'rate/h':>6} {'scopes':>6} {'tested':>7} {head}")
    stationary_rows = []
    for rate in rates:
        for n in scope_counts:
            r = stationary(pool, rate, n, args.seed + rate + n, args.review_share, args.weeks)
            stationary_rows.append(r)
            per = r["false_alerts_per_scope_per_week"]
            assert isinstance(per, dict)
            cells = "".join(f"{per[k]:>9.3f}" for k in kinds)
            print(f"  {rate:>6} {n:>6} {r['finest_fp_tested_share']:>7.1%} {cells}", flush=True)
    print(f"  ({time.monotonic() - t:.0f} s; columns: {', '.join(kinds)})")

    print(
        f"\nShifts (3 scopes; {args.runs} runs each): share detected within 6 / 24 / "
        f"{args.horizon} h, median delay (h)"
    )
    print(f"  {'shift':24} {'where':5} " + " ".join(f"{f'{r}/h':>22}" for r in rates[1:]))
    shift_rows = []
    runs = max(2, args.runs // 4) if args.quick else args.runs
    for shift in () if args.no_shifts else SHIFTS:
        for where in ("one", "all"):
            parts: list[str] = []
            for rate in rates[1:]:
                delays = [
                    shifted_run(
                        pool,
                        shift,
                        rate,
                        where,
                        args.seed * 1000 + i,
                        args.review_share,
                        args.horizon,
                    )
                    for i in range(runs)
                ]
                hit = [d for d in delays if d is not None]
                row = {
                    "shift": shift.label,
                    "detector": shift.detector,
                    "where": where,
                    "rate_per_hour": rate,
                    "runs": runs,
                    "within_6h": sum(d <= 6 for d in hit) / runs,
                    "within_24h": sum(d <= 24 for d in hit) / runs,
                    f"within_{args.horizon}h": len(hit) / runs,
                    "median_delay_h": float(np.median(hit)) if hit else None,
                    "delays_h": delays,
                }
                shift_rows.append(row)
                med = f"{row['median_delay_h']:.0f}" if hit else "-"
                parts.append(
                    f"{row['within_6h']:>4.0%} {row['within_24h']:>4.0%} "
                    f"{len(hit) / runs:>4.0%} {med:>5}"
                )
            print(f"  {shift.label:24} {where:5} " + "  ".join(f"{c:>20}" for c in parts))
            sys.stdout.flush()
    print(f"  ({time.monotonic() - t:.0f} s in all)")
    out = json.loads(args.out.read_text()) if args.out.is_file() else {}
    out[args.label or "run"] = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "pool_size": len(rows),
        "seed": args.seed,
        "review_share": args.review_share,
        "stationary": stationary_rows,
        "shifts": shift_rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\nwritten: {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
