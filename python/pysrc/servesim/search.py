"""Policy programs for search: a candidate is Python source text that defines one or more
policies, evaluated on a list of workloads with ``servesim.evaluate``. The search tools'
adapters (``servesim.adapters.gepa``, ``servesim.adapters.openevolve``) and the examples
build on it; it needs none of them.

A program defines any of these functions (the protocols of ``servesim.run``)::

    def route(request, instances):            # -> index of a routable instance, or None
    def admit(request, instances):            # -> True, False or a reason (str)
    def priority(request, class_priority, age_s):   # -> float, higher first
    def queue_order(request, arrival_s, priority):  # -> (float, float), smaller first

(``route.reads_cache = True`` gives each instance view its ``cached_blocks``.) Because a
candidate is text, it travels to another process or a Ray worker as text and is compiled
there: evaluating candidates on a pool gives exactly what evaluating them one by one does.

    from servesim.search import Workload, evaluate_program
    w = [Workload("chat", "scenarios/routing-comparison.ron", {"workload.num_requests": 400})]
    r = evaluate_program(open("router.py").read(), w)
    r["score"], r["workloads"][0]["evaluation"]["trace"]["text"]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from . import ScenarioError, evaluate

#: The function a program defines for each policy family, and ``evaluate``'s keyword for it.
FUNCTIONS = {
    "route": "routing",
    "admit": "admission",
    "priority": "priority",
    "queue_order": "queue_order",
}


#: ``servesim.evaluate``'s objectives (each in [0, 1], higher is better).
OBJECTIVES = ("ttft_p99", "itl_p99", "e2e_p99", "slo_attainment", "served", "cost", "fairness")


class CandidateError(ValueError):
    """A program that does not compile, raises while it is defined, or defines no policy."""


@dataclass(frozen=True)
class Workload:
    """A scenario (path or RON text) with overrides: one item a candidate is evaluated on."""

    name: str
    scenario: str
    overrides: Mapping[str, Any] = field(default_factory=dict)


def compile_program(source: str, filename: str = "<candidate>") -> Dict[str, Callable]:
    """The policies a program defines, by ``evaluate``'s keyword (``routing``, ...).
    Raises CandidateError, with the line, when it does not compile or defines none."""
    namespace: Dict[str, Any] = {"__name__": "servesim_candidate"}
    try:
        exec(compile(source, filename, "exec"), namespace)
    except SyntaxError as e:
        raise CandidateError(f"{filename}:{e.lineno}:{e.offset}: {e.msg}") from None
    except SystemExit as e:  # exit() would end the whole search, not just this candidate
        raise CandidateError(f"{filename}: defining the program called exit({e.code!r})") from None
    except Exception as e:  # the program's own top-level code failed
        raise CandidateError(f"{filename}: defining the program raised {type(e).__name__}: {e}") from None
    policies = {kw: namespace[fn] for fn, kw in FUNCTIONS.items() if callable(namespace.get(fn))}
    for fn in FUNCTIONS:
        if fn in namespace and not callable(namespace[fn]):
            # Left out, it was "defines none of route, ...", of a program that defines route.
            raise CandidateError(
                f"{filename}: {fn} is {type(namespace[fn]).__name__} ({namespace[fn]!r:.60}), "
                "not a function"
            )
    if not policies:
        raise CandidateError(
            f"{filename}: defines none of {', '.join(FUNCTIONS)} (a policy search candidate "
            "defines at least one of them as a function)"
        )
    return policies


def _check_settings(
    workloads: Sequence[Workload], seeds: Any, worst: Any, max_wall_s: Any
) -> None:
    """The search's own settings, checked before any candidate runs: an error of theirs is
    the search's, not the candidate's, and caught as a candidate's failure it scored every
    candidate 0 (seeds=0, a negative max_wall_s, an override value of no RON type)."""
    from . import _count, _overrides, _wall  # the checks servesim.evaluate applies

    _count("seeds", seeds, 100_000, least=1)
    _count("worst", worst)
    if _wall(max_wall_s) is not None and not (max_wall_s > 0 and math.isfinite(max_wall_s)):
        raise ValueError(f"max_wall_s must be a finite number of seconds > 0, got {max_wall_s!r}")
    for w in workloads:
        if not isinstance(w, Workload):
            raise TypeError(f"workloads holds servesim.search.Workload items, not {type(w).__name__} ({w!r})")
        if not isinstance(w.overrides, Mapping):
            raise TypeError(
                f"workload {w.name!r}: overrides map field paths to values, not {type(w.overrides).__name__}"
            )
        try:
            _overrides(w.overrides, None)
        except TypeError as e:
            raise TypeError(f"workload {w.name!r}: {e}") from None


def _feedback(name: str, evaluation: Optional[Dict[str, Any]], error: Optional[str]) -> str:
    if error is not None:
        return f"Workload {name}: the candidate failed and scores 0. {error}"
    flags = evaluation["checks"]["flags"]
    warn = (" Flags: " + " ".join(flags)) if flags else ""
    return f"Workload {name}: {evaluation['trace']['text']}{warn}"


def evaluate_workload(
    source: str,
    workload: Workload,
    weights: Optional[Mapping[str, float]] = None,
    seeds: int = 1,
    worst: int = 5,
    max_wall_s: Optional[float] = None,
) -> Dict[str, Any]:
    """One program on one workload: ``score`` (the evaluation's ``combined``, 0 when the
    program fails), ``evaluation`` (``servesim.evaluate``'s dict, None on failure), ``error``
    (why it failed: a compile error, the exception a policy raised, or ``max_wall_s`` seconds
    of wall time spent — a candidate that loops, or is far slower than it should be) and
    ``feedback`` (the trace summary in words, or the error). A bad scenario is not the
    candidate's fault: its ScenarioError is raised."""
    _check_settings([workload], seeds, worst, max_wall_s)
    evaluation = None
    error = None
    try:
        policies = compile_program(source)
        evaluation = evaluate(
            workload.scenario, dict(workload.overrides), weights=weights, seeds=seeds,
            worst=worst, jobs=1, max_wall_s=max_wall_s, **policies,
        )
    except ScenarioError:
        raise
    except SystemExit as e:  # a policy that calls exit() fails; the search goes on
        error = f"SystemExit: a policy called exit({e.code!r})"
    except Exception as e:  # noqa: BLE001 — a candidate's failure is its score, not a crash
        error = f"{type(e).__name__}: {e}" if not isinstance(e, CandidateError) else str(e)
    return {
        "workload": workload.name,
        "score": 0.0 if evaluation is None else float(evaluation["combined"]),
        "evaluation": evaluation,
        "error": error,
        "feedback": _feedback(workload.name, evaluation, error),
    }


def _one(job) -> Dict[str, Any]:
    source, workload, weights, seeds, worst, max_wall_s = job
    return evaluate_workload(source, workload, weights, seeds, worst, max_wall_s)


def evaluate_programs(
    sources: Sequence[str],
    workloads: Sequence[Workload],
    weights: Optional[Mapping[str, float]] = None,
    seeds: int = 1,
    worst: int = 5,
    pool: Any = None,
    max_wall_s: Optional[float] = None,
) -> List[Dict[str, Any]]:
    """Every program on every workload, as ``evaluate_program`` gives each. ``pool``: anything
    with ``map(function, items)`` in order — a ``concurrent.futures.ProcessPoolExecutor``, a
    ``ray.util.multiprocessing.Pool`` — runs the (program, workload) pairs there; the result
    is the same as without one (each pair is compiled and run where it lands, seeded by its
    scenario). ``max_wall_s`` bounds each (program, workload) evaluation's wall time."""
    if isinstance(sources, str):
        raise TypeError("sources is a list of programs (source texts); for one, use evaluate_program")
    if not workloads:
        # The mean over no workloads would score every program 0 without running it.
        raise ValueError("workloads is empty: give at least one Workload to evaluate on")
    for i, source in enumerate(sources):
        if not isinstance(source, (str, bytes)):
            raise TypeError(f"sources[{i}] is a program's source text (a str), not {type(source).__name__}")
    _check_settings(workloads, seeds, worst, max_wall_s)
    weights = dict(weights) if weights else None
    if pool is not None and not callable(getattr(pool, "map", None)):
        raise TypeError(
            f"pool is anything with map(function, items), such as a ProcessPoolExecutor, "
            f"not {type(pool).__name__}"
        )
    jobs = [(s, w, weights, seeds, worst, max_wall_s) for s in sources for w in workloads]
    results = list(pool.map(_one, jobs)) if pool is not None else [_one(j) for j in jobs]
    n = len(workloads)
    return [_summarise(results[i * n:(i + 1) * n]) for i in range(len(sources))]


def evaluate_program(
    source: str,
    workloads: Sequence[Workload],
    weights: Optional[Mapping[str, float]] = None,
    seeds: int = 1,
    worst: int = 5,
    pool: Any = None,
    max_wall_s: Optional[float] = None,
) -> Dict[str, Any]:
    """A program on every workload: ``score`` (the mean of the workloads' scores),
    ``fitness`` (each objective's mean over the workloads, 0 where the program failed),
    ``workloads`` (each
    workload's result, see ``evaluate_workload``) and ``feedback`` (the workloads' feedback,
    a paragraph each)."""
    return evaluate_programs([source], workloads, weights, seeds, worst, pool, max_wall_s)[0]


def _summarise(results: List[Dict[str, Any]]) -> Dict[str, Any]:
    n = max(len(results), 1)
    fitness = [r["evaluation"]["fitness"] if r["evaluation"] is not None else {} for r in results]
    return {
        "score": sum(r["score"] for r in results) / n,
        "fitness": {k: sum(f.get(k, 0.0) for f in fitness) / n for k in OBJECTIVES},
        "workloads": results,
        "feedback": "\n\n".join(r["feedback"] for r in results),
    }
