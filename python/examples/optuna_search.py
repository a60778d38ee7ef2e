"""Multi-objective policy search with Optuna: p99 TTFT against cost per million output
tokens, over the `weighted` router's scorer weights and the `threshold` autoscaler's
in-flight bounds, on the bundled autoscaling workload (its stages shortened five-fold so a
trial takes well under a second).

    python python/examples/optuna_search.py --trials 40 --out out/optuna
    servesim report out/optuna        # the trials and the Pareto front, drawn

Each trial runs the candidate over `--seeds` seeds (`servesim.run`, the scenario's seed, +1,
...) and minimises the mean p99 TTFT (ms) and the mean cost per million output tokens; a
trial that sheds load (under 97 % of the requests completed in some seed) is marked
infeasible (an Optuna constraint, optuna >= 5), so it never reaches the front. Optuna's NSGA-II sampler is seeded: the same
command gives the same trials. The front is printed, and `--out` writes it as a search
directory (`search.csv`, `search.json`) that `servesim report` draws.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List

import optuna

import servesim
from servesim.report import write_search

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "..", "..", "scenarios", "autoscaling.ron")
SCORERS = ("precise_prefix", "queue_depth", "kv_utilization", "load_balance")
# The bundled workload's four stages (4, 30, 12 and 2 req/s), each a fifth as long.
STAGES = ("Staged(stages: [(rate_per_s: 4.0, duration_s: 120.0), (rate_per_s: 30.0, duration_s: 180.0),"
          " (rate_per_s: 12.0, duration_s: 120.0), (rate_per_s: 2.0, duration_s: 120.0)])")
OBJECTIVES = ("ttft_p99_ms", "cost_per_mtok")


def candidate(trial: optuna.Trial) -> Dict[str, Any]:
    """The trial's overrides: scorer weights and the autoscaler's bounds."""
    weights = {s: trial.suggest_float(s, 0.0, 3.0) for s in SCORERS}
    if sum(weights.values()) == 0.0:
        weights["load_balance"] = 1.0
    low = trial.suggest_float("in_flight_low", 1.0, 16.0)
    high = trial.suggest_float("in_flight_high", low + 2.0, 64.0)
    params = ", ".join(f'"{k}": {v!r}' for k, v in weights.items())
    return {
        "policies.routing": '"weighted"',
        "policies.routing_params": "{" + params + "}",
        "policies.autoscale": '"threshold"',
        "policies.autoscale_params":
            f'{{"in_flight_high": {high!r}, "in_flight_low": {low!r}, "interval_s": 15.0}}',
        "workload.clients[0].arrival": STAGES,
    }


def measure(overrides: Dict[str, Any], seeds: int, scenario: str = SCENARIO) -> Dict[str, Any]:
    """Mean p99 TTFT and cost per million output tokens over `seeds` runs, and whether any
    run shed load."""
    ttft, cost, shed = [], [], False
    for k in range(seeds):
        s = servesim.run(scenario, overrides, seed=7 + k, requests=False).summary
        r = s["requests"]
        shed = shed or r["completed"] < 0.97 * r["injected"]
        ttft.append(s["ttft_ms"]["p99"])
        cost.append(s["cost"]["per_million_output_tokens"] or float("inf"))
    return {"ttft_p99_ms": sum(ttft) / seeds, "cost_per_mtok": sum(cost) / seeds, "shed": shed}


def search(trials: int, seeds: int, sampler_seed: int = 0) -> optuna.Study:
    def objective(trial: optuna.Trial):
        m = measure(candidate(trial), seeds)
        trial.set_user_attr("shed", m["shed"])
        # Optuna's convention: a constraint value > 0 makes the trial infeasible.
        trial.set_constraint("sheds_load", 1.0 if m["shed"] else 0.0)
        return m["ttft_p99_ms"], m["cost_per_mtok"]

    sampler = optuna.samplers.NSGAIISampler(seed=sampler_seed)
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(objective, n_trials=trials)
    return study


def rows(study: optuna.Study) -> List[Dict[str, Any]]:
    """Every finished trial: its number, objectives, feasibility, front membership and
    parameters."""
    front = {t.number for t in study.best_trials}
    out = []
    for t in study.trials:
        if t.values is None:
            continue
        row: Dict[str, Any] = {"trial": t.number}
        row.update(dict(zip(OBJECTIVES, t.values)))
        row["feasible"] = not t.user_attrs.get("shed", False)
        row["pareto"] = t.number in front
        row.update(t.params)
        out.append(row)
    return out


def main(argv: List[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--sampler-seed", type=int, default=0)
    ap.add_argument("--out", help="write the trials as a search directory for servesim report")
    a = ap.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = search(a.trials, a.seeds, a.sampler_seed)
    table = rows(study)
    print(f"{len(table)} trials; Pareto front (p99 TTFT ms, cost per Mtok):")
    for r in sorted((r for r in table if r["pareto"]), key=lambda r: r["cost_per_mtok"]):
        weights = " ".join(f"{s}={r[s]:.2f}" for s in SCORERS)
        print(f"  trial {r['trial']:3}: {r['ttft_p99_ms']:8.1f} ms  {r['cost_per_mtok']:.4f}/Mtok  "
              f"{weights} in_flight {r['in_flight_low']:.1f}..{r['in_flight_high']:.1f}")
    if a.out:
        write_search(a.out, table, objectives=list(OBJECTIVES), directions=["minimize", "minimize"],
                     scenario="autoscaling (stages ÷ 5)", tool="optuna NSGA-II")
        print(f"wrote {a.out}/search.csv and search.json: servesim report {a.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
