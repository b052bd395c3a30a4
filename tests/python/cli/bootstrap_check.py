"""An independent computation of the paired bootstrap that comparisons and score tables report
(src/service/paired_bootstrap.h, docs/comparisons.md), with numpy, from an evaluation's rows as
`trainer evaluations rows` returns them."""
from __future__ import annotations

import numpy as np

MASK = (1 << 64) - 1
SEED = 20261204
RESAMPLES = 2000
CONFIDENCE = 0.95


def splitmix64(seed: int, count: int) -> np.ndarray:
    out = np.empty(count, dtype=np.uint64)
    state = seed
    for i in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        out[i] = z ^ (z >> 31)
    return out


def row_scores(cli, evaluation_id: str) -> dict[int, float]:
    rows = cli.json("evaluations", "rows", evaluation_id, "--limit", "500")["rows"]
    return {r["line"]: r["score"] for r in rows if r["score"] is not None}


def interval(target: dict[int, float], reference: dict[int, float]) -> dict:
    lines = sorted(set(target) & set(reference))
    d = np.array([target[i] - reference[i] for i in lines], dtype=np.float64)
    n = len(d)
    draws = (splitmix64(SEED, RESAMPLES * n) % np.uint64(n)).astype(np.int64).reshape(RESAMPLES, n)
    # Summed left to right, as the service does, so the means are the same doubles.
    means = np.sort(d[draws].cumsum(axis=1)[:, -1] / n)
    k = int(np.floor(RESAMPLES * (1 - CONFIDENCE) / 2))
    low, high = float(means[k]), float(means[RESAMPLES - 1 - k])
    verdict = "better" if low > 0 else "worse" if high < 0 else "no clear difference"
    return {"meanDifference": float(d.mean()), "low": low, "high": high, "rows": n, "verdict": verdict}


def assert_same(reported: dict, expected: dict) -> None:
    assert reported is not None, expected
    assert reported["rows"] == expected["rows"] and reported["verdict"] == expected["verdict"], (reported, expected)
    for key in ("meanDifference", "low", "high"):
        assert abs(reported[key] - expected[key]) <= 1e-9, (key, reported, expected)
