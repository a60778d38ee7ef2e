"""Random search over the `weighted` router's scorer weights, with servesim.evaluate as the
evaluator (the same loop an evolutionary search such as OpenEvolve or GEPA would drive).

    python python/examples/search.py scenarios/routing-comparison.ron 20
"""

import random
import sys

import servesim

SCORERS = ["precise_prefix", "queue_depth", "kv_utilization", "load_balance"]
FITNESS = {"ttft_p99": 1.0, "e2e_p99": 1.0}


def main(scenario: str, trials: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    best = (float("-inf"), None)
    for t in range(trials):
        weights = {s: round(rng.uniform(0.0, 3.0), 2) for s in SCORERS}
        params = {"policies.routing": '"weighted"', "policies.routing_params": "{}"}
        params.update({f"policies.routing_params.{k}": v for k, v in weights.items()})
        value = servesim.evaluate(scenario, params, fitness=FITNESS)
        if value > best[0]:
            best = (value, weights)
        print(f"trial {t:3}: fitness {value:.6f} {weights}")
    print(f"best: {best[0]:.6f} with {best[1]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20)
