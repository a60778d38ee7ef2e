"""Random search over the `weighted` router's scorer weights, with servesim.evaluate as the
evaluator (the same loop an evolutionary search such as OpenEvolve or GEPA would drive): each
candidate scores its combined objective (p99 TTFT and E2E here), and a candidate whose checks
raise a flag (load shed, a class starved) is reported as such.

    python python/examples/search.py scenarios/routing-comparison.ron 20
"""

import random
import sys

import servesim

SCORERS = ["precise_prefix", "queue_depth", "kv_utilization", "load_balance"]
WEIGHTS = {"ttft_p99": 1.0, "e2e_p99": 1.0, "itl_p99": 0.0, "slo_attainment": 0.0,
           "served": 0.0, "cost": 0.0, "fairness": 0.0}


def main(scenario: str, trials: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    best = (float("-inf"), None)
    for t in range(trials):
        weights = {s: round(rng.uniform(0.0, 3.0), 2) for s in SCORERS}
        params = {"policies.routing": '"weighted"', "policies.routing_params": "{}"}
        params.update({f"policies.routing_params.{k}": v for k, v in weights.items()})
        e = servesim.evaluate(scenario, params, weights=WEIGHTS)
        value = e["combined"]
        if value > best[0] and not e["checks"]["flags"]:
            best = (value, weights)
        flags = "; ".join(e["checks"]["flags"])
        print(f"trial {t:3}: combined {value:.6f} {weights} {flags}")
    print(f"best: {best[0]:.6f} with {best[1]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
