"""GEPA (https://github.com/gepa-ai/gepa) evolving a servesim policy program.

GEPA evolves a candidate — a dict of named text components — by evaluating it on a batch of
data instances, asking a reflection model for a better text from what went wrong, and keeping
a Pareto front. Here the component is a policy program (``servesim.search``), a data instance
is a ``Workload``, a score is ``servesim.evaluate``'s ``combined`` and the feedback the model
reflects on is the evaluation's trace summary in words (worst routing decisions with their
regret, outliers, anomalies, flags).

    import gepa
    from servesim.adapters.gepa import ServesimAdapter
    from servesim.search import Workload
    adapter = ServesimAdapter()
    result = gepa.optimize(
        seed_candidate={"policy": open("router.py").read()},
        trainset=[Workload("chat", "scenarios/routing-comparison.ron")],
        adapter=adapter, reflection_lm="openai/gpt-4.1-mini", max_metric_calls=40)
    result.best_candidate["policy"]

Without a model, pass ``proposer=``: a function (candidate, reflective_dataset, components)
-> {component: new text}, which GEPA calls instead of the reflection model (the tests and the
example's offline mode do this).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..search import OBJECTIVES, Workload, _check_settings, evaluate_programs


class ServesimAdapter:
    """GEPA's ``GEPAAdapter`` protocol for a servesim policy program.

    ``component``: the candidate's key holding the program. ``weights``, ``seeds``, ``worst``:
    as ``servesim.evaluate``. ``pool``: evaluate a batch's workloads there (anything with an
    ordered ``map``: a process pool, a Ray pool); the scores are the same as without.
    ``proposer``: GEPA's ``propose_new_texts`` hook (see the module's text). ``max_wall_s``:
    a workload's evaluation that takes longer scores 0 (a candidate that loops)."""

    def __init__(
        self,
        component: str = "policy",
        weights: Optional[Mapping[str, float]] = None,
        seeds: int = 1,
        worst: int = 5,
        pool: Any = None,
        proposer: Optional[Callable[..., Dict[str, str]]] = None,
        max_wall_s: Optional[float] = None,
    ):
        # Checked now: at GEPA's first evaluation they would stop the search mid-way.
        _check_settings([], seeds, worst, max_wall_s)
        self.component = component
        self.max_wall_s = max_wall_s
        self.weights = dict(weights) if weights else None
        self.seeds = seeds
        self.worst = worst
        self.pool = pool
        # GEPA reads this attribute: when set it replaces the reflection model.
        self.propose_new_texts = proposer

    def evaluate(self, batch: Sequence[Workload], candidate: Dict[str, str], capture_traces: bool = False):
        """Runs the candidate's program on each workload: one score per workload (``combined``,
        0 when the program fails), its objectives, and — with ``capture_traces`` — the
        workload's result as its trajectory."""
        from gepa import EvaluationBatch

        if self.component not in candidate:
            raise KeyError(
                f"the candidate has no component {self.component!r} (it has {sorted(candidate)}): "
                f"give ServesimAdapter(component=...) the key of GEPA's seed candidate that holds the program"
            )
        source = candidate[self.component]
        result = evaluate_programs(
            [source], list(batch), self.weights, self.seeds, self.worst, self.pool,
            self.max_wall_s,
        )[0]
        per = result["workloads"]
        return EvaluationBatch(
            outputs=per,
            scores=[r["score"] for r in per],
            trajectories=per if capture_traces else None,
            objective_scores=[
                {k: (r["evaluation"]["fitness"][k] if r["evaluation"] else 0.0) for k in OBJECTIVES}
                for r in per
            ],
        )

    def make_reflective_dataset(
        self, candidate: Dict[str, str], eval_batch: Any, components_to_update: List[str]
    ) -> Dict[str, List[Dict[str, Any]]]:
        """One record per workload for each component to update: the workload (Inputs), the
        objectives and score (Generated Outputs) and the trace summary or the error
        (Feedback), the schema GEPA's reflection prompt expects."""
        records = []
        for r in eval_batch.trajectories or eval_batch.outputs:
            e = r["evaluation"]
            outputs = (
                {"error": r["error"]}
                if e is None
                else {"combined": round(r["score"], 6), **{k: round(v, 6) for k, v in e["fitness"].items()}}
            )
            records.append({
                "Inputs": {"workload": r["workload"]},
                "Generated Outputs": outputs,
                "Feedback": r["feedback"],
            })
        return {c: records for c in components_to_update}
