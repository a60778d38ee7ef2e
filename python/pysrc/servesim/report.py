"""Result directories that ``servesim report`` draws, written from Python.

``write_search`` writes a policy search's trials (Optuna, GEPA, OpenEvolve, a script of your
own) as a search directory: ``search.csv`` (one row per trial: ``trial``, the objectives,
``feasible``, ``pareto``, then the trial's parameters) and ``search.json`` (the objectives,
their directions, the scenario and the tool). ``servesim report DIR`` then draws every trial
with the Pareto front of the first two objectives and lists the front with its parameters.
"""

from __future__ import annotations

import csv
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import _native


def _cell(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else ""
    return "" if v is None else str(v)


def write_search(
    out: str,
    trials: Sequence[Mapping[str, Any]],
    objectives: Sequence[str],
    directions: Sequence[str],
    scenario: str = "",
    tool: str = "",
) -> None:
    """Writes ``out/search.csv`` and ``out/search.json``. Each trial is a mapping with
    ``trial`` (a number), every name in ``objectives``, ``feasible`` and ``pareto`` (bools)
    and any parameters; ``directions`` holds ``"minimize"`` or ``"maximize"`` per objective.
    An objective's value is a number, or None (or NaN, or an infinity) for none: it is
    written empty and left out of the chart.
    Raises ValueError for a trial without an objective, a value of the wrong type (a string
    objective, a trial number given twice, ``feasible`` not a bool), an objective named twice
    or named as a fixed column, a direction that is neither, or an ``out`` that holds another
    command's results (a run's, a sweep's...)."""
    if len(objectives) != len(directions) or not objectives:
        raise ValueError("give one direction per objective, and at least one objective")
    for d in directions:
        if d not in ("minimize", "maximize"):
            raise ValueError(f"direction {d!r} is neither 'minimize' nor 'maximize'")
    for i, o in enumerate(objectives):
        if o in ("trial", "feasible", "pareto"):
            raise ValueError(f"objective {o!r} has the name of one of search.csv's own columns")
        if o in objectives[:i]:
            raise ValueError(f"objective {o!r} is named twice")
    fixed = ["trial", *objectives, "feasible", "pareto"]
    params: List[str] = []
    seen = set()
    for t in trials:
        missing = [k for k in fixed if k not in t]
        if missing:
            raise ValueError(f"trial {t.get('trial', '?')} has no {', '.join(missing)}")
        n = t["trial"]
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"trial {n!r}: `trial` must be a whole number (Optuna's trial.number)")
        if n in seen:
            raise ValueError(f"trial {n} is given twice")
        seen.add(n)
        for k in ("feasible", "pareto"):
            if not isinstance(t[k], bool):
                raise ValueError(f"trial {n}: `{k}` must be True or False, got {t[k]!r}")
        for o in objectives:
            v = t[o]
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
                raise ValueError(f"trial {n}: objective {o!r} must be a number or None, got {v!r}")
        params.extend(k for k in t if k not in fixed and k not in params)
    # A directory holds one command's results (``servesim report`` reads one kind).
    _native.search_may_write(os.fspath(out))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "search.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(fixed + params)
        for t in trials:
            w.writerow([_cell(t.get(k)) for k in fixed + params])
    meta: Dict[str, Any] = {
        "objectives": list(objectives),
        "directions": list(directions),
        "parameters": params,
        "scenario": scenario,
        "tool": tool,
        "trials": len(trials),
    }
    with open(os.path.join(out, "search.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
