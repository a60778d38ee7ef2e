"""A 1,000-point sweep (routing policy × rate × instances × seed) on Ray, or on a local
process pool where Ray is not installed; writes sweep.csv.

    pip install 'servesim[ray]'        # optional
    RAY_ADDRESS=auto python python/examples/ray_sweep.py scenarios/quickstart.ron
"""

import csv
import itertools
import sys
import time

from servesim.sweep import sweep

ROUTERS = ['"round_robin"', '"least_loaded"', '"least_kv"', '"random"', '"weighted"']
RATES = [4.0, 8.0, 12.0, 16.0, 20.0]
COUNTS = [1, 2, 3, 4, 6, 8, 10, 12]
SEEDS = [1, 2, 3, 4, 5]


def main(scenario: str, out: str = "sweep.csv") -> None:
    points = [
        {
            "policies.routing": r,
            "workload.clients[0].rate_per_s": rate,
            "cluster.groups[0].count": n,
            "seed": seed,
            "workload.num_requests": 200,
        }
        for r, rate, n, seed in itertools.product(ROUTERS, RATES, COUNTS, SEEDS)
    ]
    started = time.perf_counter()
    rows = sweep(scenario, points)
    print(f"{len(rows)} points in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main(*sys.argv[1:])
