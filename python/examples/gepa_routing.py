"""GEPA evolving a routing policy program on two bundled workloads.

    python python/examples/gepa_routing.py                  # offline: a fixed proposer
    SERVESIM_REFLECTION_LM=openai/gpt-4.1-mini python python/examples/gepa_routing.py

The seed is `policies/first_routable.py` (every request to the first routable instance).
GEPA evaluates a candidate on the workloads (`servesim.adapters.gepa.ServesimAdapter`: the
score is `servesim.evaluate`'s `combined` over p99 TTFT and E2E), builds a reflective dataset
from each evaluation's trace summary and asks for a better program. With
`SERVESIM_REFLECTION_LM` set, that is a real model (any name GEPA accepts, e.g. a LiteLLM
model string; its API key from the usual environment variable). Without it, an offline
proposer answers with the programs in `policies/` in turn, so the example (and its test) runs
without network and gives the same result every time.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List

import gepa

from servesim.adapters.gepa import ServesimAdapter
from servesim.search import Workload

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "..", "..", "scenarios")
POLICIES = os.path.join(HERE, "policies")
WORKLOADS = [
    Workload("routing-comparison", os.path.join(SCENARIOS, "routing-comparison.ron"),
             {"workload.num_requests": 400}),
    Workload("quickstart", os.path.join(SCENARIOS, "quickstart.ron"),
             {"workload.num_requests": 300, "cluster.groups[0].count": 3}),
]
# p99 TTFT and E2E only (evaluate counts every objective it is not told to leave out).
WEIGHTS = {"ttft_p99": 1.0, "e2e_p99": 1.0, "itl_p99": 0.0, "slo_attainment": 0.0,
           "served": 0.0, "cost": 0.0, "fairness": 0.0}


def program(name: str) -> str:
    with open(os.path.join(POLICIES, name), encoding="utf-8") as f:
        return f.read()


def offline_proposer(programs: List[str]):
    """GEPA's proposal hook without a model: the next of `programs` each time it is asked."""
    asked = [0]

    def propose(candidate: Dict[str, str], reflective_dataset, components: List[str]) -> Dict[str, str]:
        text = programs[min(asked[0], len(programs) - 1)]
        asked[0] += 1
        return {c: text for c in components}

    return propose


def optimise(max_metric_calls: int = 16, reflection_lm: str = None):
    proposer = None if reflection_lm else offline_proposer(
        [program("least_loaded.py"), program("kv_aware.py")])
    adapter = ServesimAdapter(weights=WEIGHTS, proposer=proposer)
    return gepa.optimize(
        seed_candidate={"policy": program("first_routable.py")},
        trainset=WORKLOADS, valset=WORKLOADS, adapter=adapter,
        reflection_lm=reflection_lm, max_metric_calls=max_metric_calls,
        reflection_minibatch_size=2, seed=0,
    )


def main() -> None:
    result = optimise(reflection_lm=os.environ.get("SERVESIM_REFLECTION_LM"))
    scores = result.val_aggregate_scores
    print(f"{len(result.candidates)} candidates; seed scored {scores[0]:.4f}, "
          f"best {scores[result.best_idx]:.4f}:")
    print(result.best_candidate["policy"])


if __name__ == "__main__":
    main()
    sys.exit(0)
