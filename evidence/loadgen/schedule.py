"""When each request of a trial is due (seconds after t0).

- `request_rate="inf"`: every request is due at t0 (`intended_s = 0`), capped by
  `max_concurrency` (closed loop; the seed article's saturation mode).
- finite rate: an open-loop schedule precomputed from the seed (exponential gaps
  for burstiness 1, gamma with shape=burstiness otherwise; like vLLM's benchmark,
  rescaled so the last request is due at n/rate), still capped by
  `max_concurrency` when given.
"""

from __future__ import annotations

import math

import numpy as np


def arrival_schedule(n: int, request_rate: float | str, burstiness: float = 1.0, seed: int = 0,
                     normalize: bool = True) -> list[float]:
    """Intended send times (seconds after t0) for n requests.

    inf: all at 0. Otherwise gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness))
    (exponential for burstiness 1: a Poisson process) from numpy's PCG64 seeded
    with `seed`, accumulated; with `normalize` (vLLM's benchmark does this) the
    times are rescaled so the last is exactly n/rate.
    """
    if n <= 0:
        return []
    rate = math.inf if request_rate == "inf" else float(request_rate)
    if math.isinf(rate):
        return [0.0] * n
    if rate <= 0 or burstiness <= 0:
        raise ValueError("request_rate and burstiness must be > 0")
    rng = np.random.Generator(np.random.PCG64(seed))
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    t = np.cumsum(gaps)
    if normalize and t[-1] > 0:
        t = t * ((n / rate) / t[-1])
    return [float(x) for x in t]


def describe_schedule(schedule: list[float], burstiness: float, seed: int, normalize: bool) -> str:
    """The schedule in words, as meta.json records it."""
    if all(s == 0.0 for s in schedule):
        return "all due at t0 (closed loop)"
    return (f"{'Poisson' if burstiness == 1.0 else 'gamma'} arrivals, numpy PCG64 seed {seed}"
            + (", rescaled so the last is due at n/rate" if normalize else ""))
