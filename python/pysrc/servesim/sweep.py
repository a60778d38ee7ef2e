"""Parallel sweeps: one run per point, on Ray when it is installed (a cluster or a local
instance), else on a local process pool. Both backends run the same function, so a sweep
gives the same rows either way.

    from servesim.sweep import sweep
    rows = sweep("scenarios/quickstart.ron",
                 [{"policies.routing": '"least_loaded"'}, {"policies.routing": '"round_robin"'}])
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import Scenario, ServesimWarning, _callables, _jobs, _native, _source, register, registered, run

#: Summary fields copied into each row (dotted paths into summary.json).
METRICS = (
    "requests.completed",
    "requests.rejected",
    "throughput.requests_per_s",
    "throughput.output_tokens_per_s",
    "ttft_ms.p50",
    "ttft_ms.p99",
    "itl_ms.p50",
    "itl_ms.p99",
    "e2e_ms.p50",
    "e2e_ms.p99",
    "slo.attainment",
    "cost.total",
    "fitness",
    "energy.facility_kwh",
    "energy.joules_per_output_token",
)


def _get(summary: Mapping[str, Any], path: str) -> Any:
    value: Any = summary
    for key in path.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def run_point(
    scenario: str,
    point: Mapping[str, Any],
    seed: Optional[int] = None,
    routing: Optional[Callable] = None,
    summary_hook: Optional[Callable] = None,
    policies: Optional[Mapping[str, Callable]] = None,
    catalogue: Sequence[tuple] = (),
) -> Dict[str, Any]:
    """One sweep point: the point's values, the summary metrics and the summary's ``extras``
    (as ``extras.<name>``): a row. ``policies``: Python policies by family (``admission``,
    ``priority``, ``queue_order``, ``autoscale``), as ``run`` takes them. ``catalogue``:
    ``servesim.registered()`` of the process that made the sweep, registered here first (a
    worker process starts with an empty one)."""
    return _run_point(scenario, point, seed, routing, summary_hook, policies, catalogue)[0]


def _run_point(
    scenario: str,
    point: Mapping[str, Any],
    seed: Optional[int],
    routing: Optional[Callable],
    summary_hook: Optional[Callable],
    policies: Optional[Mapping[str, Callable]],
    catalogue: Sequence[tuple],
) -> Tuple[Dict[str, Any], List[str]]:
    """``run_point``'s row and the run's input warnings (not issued in the worker, where
    they would be lost or repeated: the sweep issues them once)."""
    for family, name, make, description, params in catalogue:
        register(family, name, make, description, params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ServesimWarning)
        result = run(
            scenario, point, seed=seed, requests=False, routing=routing,
            summary_hook=summary_hook, **dict(policies or {}),
        )
    summary = result.summary
    row: Dict[str, Any] = dict(point)
    row.update({m: _get(summary, m) for m in METRICS})
    row.update({f"extras.{k}": v for k, v in (summary.get("extras") or {}).items()})
    return row, result.input_warnings


def _say_once(points: Sequence[Mapping[str, Any]], found: Sequence[Sequence[str]]) -> None:
    """Issues each distinct input warning of the sweep's runs once, as ``servesim sweep``
    prints them (the same code): plainly when every point has it, else after the points
    that have it."""
    by_label: Dict[str, List[str]] = {}
    for p, w in zip(points, found):
        # Equal points have equal warnings: each label once, as the CLI counts points.
        label = ", ".join(f"{k}={v}" for k, v in p.items()) or "the base scenario"
        by_label.setdefault(label, list(w))
    lines = _native.said_once(list(by_label.items()), "point", "with a point's values as --set")
    for line in lines:
        warnings.warn(line, ServesimWarning, stacklevel=3)


def _send_by_value(ray, functions: Sequence[Optional[Callable]]) -> None:
    """Ray workers import a function's module by name. A module of the user's own (a script
    beside the driver, a test file collected by pytest) is not on their path, so its functions
    travel by value; functions of installed packages, of the standard library and of ``__main__`` are left as Ray
    sends them."""
    import sys
    import sysconfig

    installed = tuple(sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib"))
    for function in functions:
        name = getattr(function, "__module__", None)
        module = sys.modules.get(name) if name else None
        if module is None or name == "__main__":
            continue
        path = getattr(module, "__file__", None) or ""
        if path.startswith(installed) or name.split(".")[0] == "servesim":
            continue
        ray.cloudpickle.register_pickle_by_value(module)


def _ray():
    try:
        import ray  # noqa: F401
    except ImportError:
        return None
    # Without Ray installed, a directory named ray on sys.path imports as an empty namespace
    # package: Ray's own temporary directory, /tmp/ray, does when Python runs in /tmp.
    if not hasattr(ray, "remote"):
        return None
    return ray


def _named(catalogue: Sequence[tuple], scenario: str, points: Sequence[Mapping[str, Any]]):
    """The registered policies a sweep can name: those whose name appears in the scenario's
    text or in a point's values. Only they travel to the workers, so a registered policy the
    sweep does not use (a closure that cannot be pickled, say) cannot break it."""
    if isinstance(scenario, Scenario):
        text = scenario.source if scenario.is_text else ""
        path = None if scenario.is_text else scenario.source
        text += "\n".join(v for _, v in scenario.overrides)
    else:
        text, path = scenario, scenario if os.path.exists(scenario) else None
    if path is not None:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    text += "\n".join(str(v) for p in points for v in p.values())
    return [c for c in catalogue if c[1] in text]


def sweep(
    scenario: Any,
    points: Sequence[Mapping[str, Any]],
    backend: str = "auto",
    jobs: Optional[int] = None,
    seed: Optional[int] = None,
    routing: Optional[Callable] = None,
    summary_hook: Optional[Callable] = None,
    admission: Optional[Callable] = None,
    priority: Optional[Callable] = None,
    queue_order: Optional[Callable] = None,
    autoscale: Optional[Any] = None,
) -> List[Dict[str, Any]]:
    """Runs every point (a dict of overrides) of ``scenario`` (a path, RON text or a
    ``servesim.Scenario`` from ``load``, whose overrides every point starts from) and returns
    one row per point, in order.

    ``backend``: ``"ray"`` (``ray.init()`` is called if Ray is not initialised: set
    ``RAY_ADDRESS`` to use a cluster), ``"process"`` (a local process pool of ``jobs``
    workers, default: every core), or ``"auto"`` (Ray if it is installed). ``routing``,
    ``admission``, ``priority``, ``queue_order``, ``autoscale`` and ``summary_hook`` are
    passed to every point's ``run`` (each point gets its own copy: they travel pickled), and
    the policies registered with ``servesim.register`` are registered in every worker; on
    Ray, functions from a module of your own (not an installed package) are sent by value, so
    the workers need not import it. Only the registered policies whose name appears in the
    scenario or the points travel. Each distinct input warning of the runs is issued once as a
    ``ServesimWarning`` (naming the points that have it, when not all do), as ``servesim
    sweep`` prints them.
    """
    _callables(routing=routing, summary_hook=summary_hook, admission=admission,
               priority=priority, queue_order=queue_order, autoscale=autoscale)
    policies = {k: f for k, f in (("admission", admission), ("priority", priority),
                                  ("queue_order", queue_order), ("autoscale", autoscale))
                if f is not None}
    if backend not in ("auto", "ray", "process"):
        raise ValueError(f'backend is "auto", "ray" or "process", not {backend!r}')
    # Ray given num_cpus=0 would schedule nothing and wait for ever.
    jobs = _jobs(jobs)
    if isinstance(points, (Mapping, str)) or not all(isinstance(p, Mapping) for p in points):
        raise TypeError(
            "points is a list of dicts of overrides, one dict per run, such as "
            "[{'policies.routing': '\"least_loaded\"'}, {'policies.routing': '\"round_robin\"'}]"
        )
    # Workers may start elsewhere (a Ray node): a path travels absolute.
    if isinstance(scenario, Scenario):
        if not scenario.is_text:
            scenario = Scenario(os.path.abspath(scenario.source), False, scenario.overrides)
    else:
        scenario, _ = _source(scenario)
        scenario = os.path.abspath(scenario) if os.path.exists(scenario) else scenario
    catalogue = _named(registered(), scenario, points)
    ray = _ray() if backend in ("auto", "ray") else None
    if backend == "ray" and ray is None:
        raise RuntimeError(
            "backend='ray' but Ray is not installed: pip install './python[ray]' from a "
            "servesim checkout (servesim is not on a package index)"
        )
    if ray is not None:
        if not ray.is_initialized():
            ray.init(num_cpus=jobs, include_dashboard=False, log_to_driver=False)
        _send_by_value(ray, (routing, summary_hook, *policies.values(), *(c[2] for c in catalogue)))
        task = ray.remote(_run_point)
        results = ray.get(
            [task.remote(scenario, p, seed, routing, summary_hook, policies, catalogue)
             for p in points]
        )
        _say_once(points, [w for _, w in results])
        return [row for row, _ in results]
    from concurrent.futures import ProcessPoolExecutor
    import multiprocessing
    import pickle

    # Each point's policies travel pickled to a worker: one that cannot (a lambda, a function
    # defined inside another) failed as the first point ran, with pickle's own words.
    for name, f in (("routing", routing), ("summary_hook", summary_hook), *policies.items()):
        try:
            pickle.dumps(f)
        except Exception as e:
            raise TypeError(
                f"{name}= cannot be sent to the process backend's workers ({e}): define it at "
                f"the top level of a module (a lambda or a function defined inside another "
                f"cannot be pickled), or use backend='ray' (with Ray installed), which sends it by value"
            ) from None

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs or os.cpu_count(), mp_context=ctx) as pool:
        futures = [
            pool.submit(_run_point, scenario, p, seed, routing, summary_hook, policies, catalogue)
            for p in points
        ]
        results = [f.result() for f in futures]
    _say_once(points, [w for _, w in results])
    return [row for row, _ in results]
