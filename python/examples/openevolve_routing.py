"""OpenEvolve evolving a routing policy program on a bundled workload.

    python python/examples/openevolve_routing.py            # offline: a fixed proposer
    SERVESIM_LLM_MODEL=gpt-4.1-mini OPENAI_API_KEY=... python python/examples/openevolve_routing.py
    # any OpenAI-compatible endpoint: also SERVESIM_LLM_API_BASE=http://host:8000/v1

The seed is `policies/first_routable.py`. OpenEvolve asks its model for a new program, runs
`servesim.adapters.openevolve.Evaluator` on it (metrics: `combined_score` over p99 TTFT and
E2E, every objective, p99 TTFT and E2E in ms; the trace summary as the `feedback` artifact
OpenEvolve shows the model next) and keeps programs in a MAP-Elites grid over p99 TTFT and
the share served. With `SERVESIM_LLM_MODEL` set, the model is real; without it,
`servesim.adapters.openevolve.offline` answers with the programs in `policies/`, so the
example (and its test) runs without network.
"""

from __future__ import annotations

import os

from openevolve import run_evolution
from openevolve.config import Config, LLMModelConfig

from servesim.adapters.openevolve import Evaluator, offline
from servesim.search import Workload

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "..", "..", "scenarios", "routing-comparison.ron")
POLICIES = os.path.join(HERE, "policies")
WORKLOADS = [Workload("routing-comparison", SCENARIO, {"workload.num_requests": 400})]
WEIGHTS = {"ttft_p99": 1.0, "e2e_p99": 1.0, "itl_p99": 0.0, "slo_attainment": 0.0,
           "served": 0.0, "cost": 0.0, "fairness": 0.0}


def program(name: str) -> str:
    with open(os.path.join(POLICIES, name), encoding="utf-8") as f:
        return f.read()


def config(model: str = None) -> Config:
    c = Config()
    c.log_level = "WARNING"
    c.random_seed = 0
    c.database.feature_dimensions = ["ttft_p99_ms", "served"]
    c.evaluator.parallel_evaluations = 1
    if model:
        m = LLMModelConfig(name=model, api_base=os.environ.get("SERVESIM_LLM_API_BASE"),
                           api_key=os.environ.get("OPENAI_API_KEY"))
        c.llm.models = [m]
        c.llm.evaluator_models = [m]
        return c
    return offline(c, [program("least_loaded.py"), program("kv_aware.py")])


def evolve(iterations: int = 3, model: str = None, output_dir: str = None):
    return run_evolution(
        program("first_routable.py"), Evaluator(WORKLOADS, weights=WEIGHTS), config(model),
        iterations=iterations, output_dir=output_dir, cleanup=output_dir is None,
    )


if __name__ == "__main__":
    seed = Evaluator(WORKLOADS, weights=WEIGHTS).metrics(program("first_routable.py"))
    result = evolve(iterations=int(os.environ.get("SERVESIM_ITERATIONS", "3")),
                    model=os.environ.get("SERVESIM_LLM_MODEL"))
    print(f"seed scored {seed['metrics']['combined_score']:.4f}, best {result.best_score:.4f}:")
    print(result.best_code)
