"""OpenEvolve (https://github.com/algorithmicsuperintelligence/openevolve) evolving a servesim
policy program.

OpenEvolve mutates a program file with an LLM, calls an evaluator on each new file and keeps
the programs in a MAP-Elites grid over feature dimensions. ``Evaluator`` is that evaluator for
a policy program (``servesim.search``): its metrics are ``combined_score`` (the mean over the
workloads of ``servesim.evaluate``'s ``combined``; OpenEvolve ranks programs by it), every
objective in [0, 1] (any of which can be a feature dimension of the grid), and the mean p99
TTFT and E2E in milliseconds (``ttft_p99_ms``, ``e2e_p99_ms``) as raw features; its artifact ``feedback`` is the trace summary in words, which OpenEvolve puts
into the next prompt.

An evaluator file for ``openevolve-run.py`` is two lines::

    from servesim.adapters.openevolve import Evaluator
    from servesim.search import Workload
    evaluate = Evaluator([Workload("chat", "scenarios/routing-comparison.ron")])

and from Python ``openevolve.run_evolution(program, Evaluator([...]), config)`` takes it as
it is (it is pickled for OpenEvolve's worker processes). Without a model, ``offline(config,
programs)`` makes OpenEvolve's LLM a deterministic proposer that answers each prompt with the
first of ``programs`` the prompt does not already contain (the tests and the example's
offline mode use it).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..search import Workload, _check_settings, evaluate_program

#: Raw values an ``Evaluator`` reports beside the objectives, for ``feature_dimensions``.
FEATURES = ("ttft_p99_ms", "e2e_p99_ms")


class Evaluator:
    """``evaluate(program_path)`` for OpenEvolve: the program file's policies on every
    workload. ``weights``, ``seeds``, ``worst``: as ``servesim.evaluate``; ``max_wall_s``: a
    workload's evaluation that takes longer scores 0 (a candidate that loops)."""

    def __init__(
        self,
        workloads: Sequence[Workload],
        weights: Optional[Mapping[str, float]] = None,
        seeds: int = 1,
        worst: int = 5,
        max_wall_s: Optional[float] = None,
    ):
        self.workloads = list(workloads)
        if not self.workloads:
            raise ValueError("workloads is empty: give at least one Workload to evaluate on")
        # Checked now: at OpenEvolve's first evaluation they would score every program 0.
        _check_settings(self.workloads, seeds, worst, max_wall_s)
        self.max_wall_s = max_wall_s
        self.weights = dict(weights) if weights else None
        self.seeds = seeds
        self.worst = worst

    def metrics(self, source: str) -> Dict[str, Any]:
        """The metrics and the feedback of a program's source (what ``__call__`` returns,
        as a dict: ``metrics``, ``feedback``)."""
        r = evaluate_program(
            source, self.workloads, self.weights, self.seeds, self.worst, max_wall_s=self.max_wall_s
        )
        ran = [w["evaluation"] for w in r["workloads"] if w["evaluation"] is not None]
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        metrics: Dict[str, Any] = {"combined_score": r["score"]}
        metrics.update(r["fitness"])
        metrics["ttft_p99_ms"] = mean([e["overall"]["ttft_p99_ms"] or 0.0 for e in ran])
        metrics["e2e_p99_ms"] = mean([e["overall"]["e2e_p99_ms"] or 0.0 for e in ran])
        return {"metrics": metrics, "feedback": r["feedback"]}

    def __call__(self, program_path: str):
        with open(program_path, encoding="utf-8") as f:
            source = f.read()
        m = self.metrics(source)
        try:
            from openevolve.evaluation_result import EvaluationResult
        except ImportError:  # called without OpenEvolve (a test, a script): the metrics
            return m["metrics"]
        return EvaluationResult(metrics=m["metrics"], artifacts={"feedback": m["feedback"]})


class _Programs:
    """OpenEvolve's ``init_client`` hook: a model that answers with the next program."""

    def __init__(self, programs: Sequence[str]):
        self.programs = list(programs)

    def __call__(self, model_cfg: Any):
        return _OfflineModel(self.programs)


def _answer(programs: List[str], prompt: str) -> str:
    for p in programs:
        if p.strip() not in prompt:
            return f"```python\n{p.strip()}\n```"
    return f"```python\n{programs[-1].strip()}\n```"


class _OfflineModel:
    """OpenEvolve's LLM interface (``generate``, ``generate_with_context``), offline."""

    def __init__(self, programs: List[str]):
        self.programs = programs

    async def generate(self, prompt: str, **kwargs) -> str:
        return _answer(self.programs, prompt)

    async def generate_with_context(self, system_message: str, messages: List[Dict[str, str]], **kwargs) -> str:
        return _answer(self.programs, "\n".join(m.get("content", "") for m in messages))


def offline(config: Any, programs: Sequence[str]) -> Any:
    """Makes ``config`` (an ``openevolve.config.Config``) propose ``programs`` in turn
    instead of calling a model: one model whose answer to a prompt is the first program the
    prompt does not contain yet (the last one once all are in), as a full rewrite
    (``diff_based_evolution`` off). Returns the config."""
    from openevolve.config import LLMModelConfig

    model = LLMModelConfig(name="servesim-offline", init_client=_Programs(programs))
    config.llm.models = [model]
    config.llm.evaluator_models = [model]
    config.diff_based_evolution = False
    return config
