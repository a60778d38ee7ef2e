"""servesim from Python: run scenarios at native speed, read results as DataFrames, route
requests with a Python function, evaluate policies for search, and sweep in parallel.

    import servesim
    r = servesim.run("scenarios/quickstart.ron", overrides={"workload.num_requests": 500}, seed=7)
    print(r.summary["ttft_ms"]["p99"])
    r.requests.groupby("instance")["e2e_ms"].mean()

Overrides are ``--set`` paths with values written as in the scenario file (RON): numbers and
booleans may be given as Python values, strings are RON text (so a policy name is
``'"least_loaded"'`` and a length distribution ``"Constant(64)"``).
"""

from __future__ import annotations

import io
import json
import numbers
import os
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ._native import RunError, ScenarioError
from . import _native

__all__ = [
    "run",
    "load",
    "validate",
    "Scenario",
    "evaluate",
    "capacity",
    "plan",
    "check_real",
    "calibrate",
    "Result",
    "Request",
    "Instance",
    "Group",
    "Cluster",
    "register",
    "registered",
    "ScenarioError",
    "RunError",
    "ServesimWarning",
]


class ServesimWarning(UserWarning):
    """What the CLI prints as ``warning: …``: an input vLLM would refuse or servesim reads as a
    slip (``load``, ``validate``, ``run``, once per sweep), or an outcome worth a look (``run``,
    also in ``summary["warnings"]``). Filter them as any warning:
    ``warnings.simplefilter("error", servesim.ServesimWarning)`` makes them errors."""


def _warn(messages: Sequence[str], stacklevel: int = 3) -> None:
    for m in messages:
        warnings.warn(m, ServesimWarning, stacklevel=stacklevel)

Request = _native.Request
"""What a Python policy sees of a request: ``id``, ``input_tokens``, ``output_tokens``,
``tenant`` / ``tenant_name``, ``slo_class`` / ``slo_class_name``, ``priority`` (the
workload's), ``arrival_s``, ``now_us`` / ``now_s``, ``session`` and ``turn`` (None outside
sessions), ``shared_prefix_tokens`` and ``prefix_id`` (equal ids: the same shared prefix).
Indexing gives the tuple of earlier versions: (id, input_tokens, output_tokens, tenant,
slo_class, priority, now_us)."""

Instance = _native.Instance
"""What a Python policy sees of an instance (the routers' snapshot): ``index``, ``group`` /
``group_name``, ``queue_depth``, ``batch_size``, ``in_flight``, ``kv_used_blocks``,
``kv_total_blocks``, ``free_blocks``, ``load`` (queue + batch + in flight), ``routable``, and
``cached_blocks`` (the request's leading prompt blocks cached there, when the router function
has ``reads_cache = True``; else None), ``role`` (``mixed``, ``prefill``, ``decode``), and —
when the policy has ``wants_cluster = True`` — ``state`` (``serving``, ``provisioning``,
``loading``, ``warming_up``, ``draining``, ``off``) and ``last_step_ms`` (else None).
Indexing gives the tuple of earlier versions: (index, queue_depth, batch_size, in_flight,
kv_used_blocks, kv_total_blocks, routable)."""

Cluster = _native.Cluster
"""The third argument of a router or admission policy with ``wants_cluster = True``:
``now_s`` and ``groups``, per group (name, serving, starting, draining) — starting instances
are scale-ups under way (provisioning, loading, warming up), draining ones scale-downs."""


Group = _native.Group
"""What a Python scaler sees of an autoscaled group at an evaluation: ``group`` (index) and
``name``, ``current`` (starting or serving instances), ``ready``, ``min``, ``max``,
``instance_cost_per_hour``, ``utilization`` (busy fraction over the window),
``queue_per_instance``, ``kv_usage``, ``in_flight_per_instance``, ``ttft_p90_ms`` and
``itl_p90_ms`` (None when no request of the group finished in the window)."""

FAMILIES = ("admission", "routing", "priority", "scheduling", "autoscale")


def register(
    family: str,
    name: str,
    make: Callable[[Dict[str, float]], Any],
    description: str = "",
    params: Optional[Mapping[str, str]] = None,
) -> None:
    """Registers a Python policy under ``name`` in the catalogue, so scenarios name it as they
    name a built-in one (``policies.routing: "my_router"``, its ``routing_params``) in
    ``run``, ``evaluate``, ``sweep`` and ``validate``. ``family`` is the scenario field:
    ``admission``, ``routing`` (also ``decode_routing``), ``priority``, ``scheduling`` (the
    queue order) or ``autoscale``. ``make(params)`` gets the scenario's parameters (a dict of
    floats) for every run and returns the policy — a callable with the protocol of ``run``'s
    keyword of that family, or for ``autoscale`` a scaler (``interval_s``, called as
    ``scaler(now_s, groups)``) — or raises (ValueError, ...) to refuse the parameters: the
    loader reports that at the parameters' field, as for a built-in policy. ``params`` (name
    -> meaning) makes any other parameter name an error with a did-you-mean; without it any
    name is accepted. Registering a name again replaces it; a built-in name is refused.
    ``capacity`` and ``plan`` refuse scenarios that name a Python policy (they run on threads
    without Python)."""
    if not callable(make):
        # Accepted, it failed only when a scenario named the policy.
        raise TypeError(
            f"make is a function that takes the parameters (a dict) and returns the policy, "
            f"not {type(make).__name__} ({make!r})"
        )
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(
            f"params maps each parameter's name to its meaning, such as "
            f"{{'alpha': 'weight of the queue'}}, not {type(params).__name__}"
        )
    _native.register(family, name, make, description, dict(params) if params is not None else None)


def registered() -> List[Tuple[str, str, Callable, str, Optional[Dict[str, str]]]]:
    """(family, name, make, description, params) of every policy registered in this process
    (``servesim.sweep`` registers them again in its worker processes)."""
    return [tuple(r) for r in _native.registered()]


def _ron(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"  # RON's spelling; Python's "nan" did not parse
        text = repr(value)
        return text if any(c in text for c in ".eEn") else text + ".0"
    if isinstance(value, str):
        return value
    raise TypeError(f"override values are RON text, numbers or booleans, not {type(value).__name__}")


def _overrides(overrides: Optional[Mapping[str, Any]], seed: Optional[int]) -> List[Tuple[str, str]]:
    for k in overrides or {}:
        if not isinstance(k, str):
            raise TypeError(
                f"override keys are field paths such as 'cluster.groups[0].count', not "
                f"{type(k).__name__} ({k!r})"
            )
    out = [(k, _ron(v)) for k, v in (overrides or {}).items()]
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            # int() would read 1.5 as 1 and "7" as 7 silently.
            raise TypeError(f"seed is a whole number from 0 to 2**64 - 1, not {type(seed).__name__} ({seed!r})")
        given = [k for k in overrides or {} if k.strip() == "seed"]
        if given:
            # Only the last would count (the command line refuses --set seed=… with --seed).
            raise ValueError(
                f"the seed is given twice (overrides[{given[0]!r}] = {overrides[given[0]]!r} and "
                f"seed={seed!r}): give it once"
            )
        out.append(("seed", str(int(seed))))
    return out


def _count(name: str, value: Any, most: int = 2**32 - 1, least: int = 0) -> Any:
    """``value`` as an int, if it is a whole number in [least, most]: the native layer refused
    one out of range with an OverflowError, and one of another type with "'str' object cannot
    be interpreted as an integer", neither saying which argument it was."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"{name} is a whole number from {least} to {most:,}, not {type(value).__name__} ({value!r})"
        )
    if not least <= value <= most:
        raise ValueError(f"{name} = {value}: expected a whole number from {least} to {most:,}")
    return int(value)


def _callables(**given: Any) -> None:
    """Each policy or hook is None or callable: else it would fail at its first call, deep in
    the run, as "'int' object is not callable" without saying which argument it was."""
    for name, f in given.items():
        if f is not None and not callable(f):
            raise TypeError(
                f"{name} is a function (or any callable object) or None, not "
                f"{type(f).__name__} ({f!r})"
            )


def _real(name: str, value: Any, what: str) -> Any:
    """``value`` as given if it is a number (its range is checked where it is used) or None:
    the native layer refused a string with PyO3's "must be real number, not str", which did
    not say which argument it was."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        raise TypeError(f"{name} is {what} or None, not {type(value).__name__} ({value!r})")
    return value


def _wall(max_wall_s: Any) -> Any:
    return _real("max_wall_s", max_wall_s, "a number of seconds")


def _weights(weights: Any) -> Dict[str, Any]:
    """``evaluate``'s weights, each a number (its range is checked with the objectives)."""
    if weights is not None and not isinstance(weights, Mapping):
        raise TypeError(
            f"weights maps each objective to its weight, such as {{'ttft_p99': 2.0}}, "
            f"not {type(weights).__name__}"
        )
    weights = dict(weights or {})
    for k, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, numbers.Real):
            raise TypeError(f"the weight of {k} is a number ≥ 0, not {type(w).__name__} ({w!r})")
    return weights


def _name(name: str, value: Any, what: str) -> Any:
    """``value`` as given if it is a string or None, else a TypeError that names it."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} is {what} (a str) or None, not {type(value).__name__} ({value!r})")
    return value


def _jobs(jobs: Any) -> Any:
    """``jobs`` checked as ``--jobs`` is: None (every core) or a whole number ≥ 1."""
    if jobs is None:
        return None
    if isinstance(jobs, bool) or not isinstance(jobs, numbers.Integral):
        raise TypeError(f"jobs is a whole number of threads ≥ 1 or None, not {type(jobs).__name__} ({jobs!r})")
    if jobs == 0:
        raise ValueError("jobs = 0: 0 threads cannot run anything; give 1 or more, or None for every core")
    return _count("jobs", int(jobs), 2**64 - 1, least=1)


def _is_ron_text(text: str) -> bool:
    """Whether ``text`` reads as RON rather than a path: after blank space, ``//`` and ``/* */``
    comments and ``#![enable(…)]`` attributes, a ``(`` or a struct name and ``(`` up to a
    closing ``)`` (``Scenario(…)``, not ``x(1).ron``), or several lines. A scenario file's
    text as read (it begins with comments, as the bundled ones do) was taken for a path and
    failed as a missing file named by the whole text."""
    rest = text
    while True:
        rest = rest.lstrip()
        if rest.startswith("//"):
            rest = rest.partition("\n")[2]
        elif rest.startswith("/*"):
            rest = rest[2:].partition("*/")[2]
        elif rest.startswith("#!["):
            rest = rest.partition("]")[2]
        else:
            break
    head = rest.split("(", 1)[0].strip()
    named = head.isidentifier() and rest.rstrip().endswith(")")  # not `x(1).ron`
    return "\n" in text or rest.startswith("(") or named


def _source(scenario: Any) -> Tuple[str, bool]:
    """A path to a scenario file (str or os.PathLike), or RON text (see ``_is_ron_text``)."""
    if isinstance(scenario, os.PathLike):
        scenario = os.fspath(scenario)
    if not isinstance(scenario, str):
        raise TypeError(
            f"scenario is a path (str or os.PathLike), RON text or a servesim.Scenario, not "
            f"{type(scenario).__name__}"
        )
    if not scenario.strip():
        raise ValueError(
            "scenario is empty: give a scenario file's path (such as scenarios/quickstart.ron) "
            "or RON text"
        )
    if os.path.exists(scenario):
        return scenario, False
    if _is_ron_text(scenario):
        return scenario, True
    return scenario, False  # a missing file: the error names it


class Result:
    """What a run produced: ``summary`` (the summary.json object) and ``requests`` (the
    requests.csv rows as a pandas DataFrame)."""

    def __init__(
        self, summary_json: str, requests_csv: Optional[str], input_warnings: Sequence[str] = ()
    ):
        self.summary_json = summary_json
        """summary.json's exact text."""
        self.requests_csv = requests_csv
        """requests.csv's exact text (None when not collected)."""
        self.summary: Dict[str, Any] = json.loads(summary_json)
        self.input_warnings: List[str] = list(input_warnings)
        """What ``servesim run`` warned of before the run (as ``validate``); the outcome's own
        warnings are ``summary["warnings"]``."""

    @property
    def requests(self):
        """The per-request rows as a pandas DataFrame (requires pandas)."""
        if self.requests_csv is None:
            raise ValueError("this run did not collect requests (requests=False)")
        import pandas

        return pandas.read_csv(io.StringIO(self.requests_csv))

    def __repr__(self) -> str:
        r = self.summary["requests"]
        return f"<servesim.Result {self.summary['scenario']}: {r['completed']} of {r['injected']} completed>"


class Scenario:
    """A scenario that loaded and validated (``servesim.load``), with its overrides; pass it
    to ``run`` or ``evaluate`` like a path."""

    def __init__(self, source: str, is_text: bool, overrides: List[Tuple[str, str]]):
        self.source = source
        self.is_text = is_text
        self.overrides = overrides

    def __repr__(self) -> str:
        what = "RON text" if self.is_text else self.source
        return f"<servesim.Scenario {what}, {len(self.overrides)} overrides>"


def load(
    scenario: Any, overrides: Optional[Mapping[str, Any]] = None, seed: Optional[int] = None
) -> Scenario:
    """Loads and validates a scenario (path, RON text, or a ``Scenario`` whose overrides
    these extend) with overrides; raises ScenarioError with every problem located."""
    source, is_text, ov = _resolve(scenario, overrides, seed)
    _warn(_native.validate(source, is_text, ov))
    return Scenario(source, is_text, ov)


def _resolve(scenario: Any, overrides: Optional[Mapping[str, Any]], seed: Optional[int]):
    if isinstance(scenario, Scenario):
        return scenario.source, scenario.is_text, scenario.overrides + _overrides(overrides, seed)
    source, is_text = _source(scenario)
    return source, is_text, _overrides(overrides, seed)


def validate(scenario: Any, overrides: Optional[Mapping[str, Any]] = None) -> None:
    """Checks a scenario (path, RON text or a ``Scenario`` from ``load``) as ``servesim
    validate`` does; raises ScenarioError with every problem located (file:line:column, field,
    hint), and issues a ``ServesimWarning`` for each warning ``validate`` prints."""
    source, is_text, ov = _resolve(scenario, overrides, None)
    _warn(_native.validate(source, is_text, ov))


def run(
    scenario: Any,
    overrides: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    out: Optional[str] = None,
    routing: Optional[Callable[[Request, Sequence[Instance]], Optional[int]]] = None,
    requests: bool = True,
    summary_hook: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
    admission: Optional[Callable[[Request, Sequence[Instance]], Any]] = None,
    priority: Optional[Callable[[Request, int, float], float]] = None,
    queue_order: Optional[Callable[[Request, float, float], Tuple[float, float]]] = None,
    autoscale: Optional[Any] = None,
    max_wall_s: Optional[float] = None,
) -> Result:
    """Runs a scenario (a path, RON text, or a ``Scenario`` from ``load``).

    ``out`` also writes the result files there, as ``servesim run --out`` does.
    ``routing(request, instances) -> index`` replaces the scenario's routing policy: it must
    return the index of a routable instance (or None to reject the request); an exception
    it raises stops the run and is re-raised here. ``requests=False`` skips collecting the
    per-request rows (less memory for very large runs). ``summary_hook(state) -> dict`` runs
    once when the run ends (a ``SimFinish`` system): ``state`` holds ``now_s`` and
    ``instances`` (each instance's ``index``, ``group``, ``gpus``, ``steps``, ``busy_s``,
    ``completed``, ``preemptions``, ``prefill_tokens``, ``decode_tokens``); the dict it returns
    goes into the summary's ``extras`` (and ``summary.json``).

    Policies of other families replace the scenario's the same way (docs/python.md):
    ``admission(request, instances)`` returns True to admit, False or a reason (str, counted
    under ``rejections``) to reject; ``priority(request, class_priority, age_s)`` returns the
    request's priority (higher first in priority queue orders); ``queue_order(request,
    arrival_s, priority)`` returns a sort key (two numbers, smaller first) for each instance's
    wait queue. ``autoscale`` is a scaler for the groups with ``scaling``: its ``interval_s``
    (default 15) spaces the evaluations, the first one interval after t = 0, and
    ``autoscale(now_s, groups)`` (each a ``servesim.Group``) returns ``{group: desired}``
    (a group by index or name)
    (groups left out keep their size; min, max and cooldowns apply as for built-in policies).
    Each run gets its own ``copy.deepcopy`` of the scaler. What the CLI would print as
    warnings (before the run, and of its outcome) are issued as ``ServesimWarning``.
    ``max_wall_s`` stops the run after that many seconds of wall time (``--max-wall-s``),
    raising RunError and writing nothing, even inside a Python policy that never returns.
    Ctrl-C stops a run as it stops the command line's (KeyboardInterrupt).
    """
    _callables(routing=routing, summary_hook=summary_hook, admission=admission,
               priority=priority, queue_order=queue_order, autoscale=autoscale)
    source, is_text, ov = _resolve(scenario, overrides, seed)
    if out is not None:
        out = os.fspath(out)
        if not out:
            raise ValueError("out is an empty path: give the directory to write the result files to")
    summary, rows, inputs, earlier = _native.run(
        source, is_text, ov, out=out, router=routing, requests=requests, summary_hook=summary_hook,
        admission=admission, priority=priority, queue_order=queue_order, autoscale=autoscale,
        max_wall_s=_wall(max_wall_s),
    )
    result = Result(summary, rows, inputs)
    # With out=, an earlier run's files this run does not write are named, as `run` names them.
    _warn(result.input_warnings + list(result.summary.get("warnings") or ()) + ([earlier] if earlier else []))
    return result


def capacity(
    scenario: Any,
    overrides: Optional[Mapping[str, Any]] = None,
    replicas: int = 3,
    tolerance: float = 0.02,
    served_share: float = 0.97,
    jobs: Optional[int] = None,
    group: Optional[str] = None,
    each_group: bool = False,
) -> Dict[str, Any]:
    """``servesim capacity``: the largest rate the deployment sustains and the largest at which
    each SLO class holds, as the dict ``--format json`` prints (``limits[k]["requests_per_s"]``
    holds ``mean``, ``low`` and ``high`` over ``replicas`` seeds). ``group`` searches that
    instance group alone (``--group``); ``each_group=True`` adds every group searched alone
    under ``groups`` (``--each-group``). What ``servesim capacity`` warns of in the scenario is
    issued as a ``ServesimWarning``. Raises ValueError for a ``replicas``, ``tolerance`` or
    ``served_share`` out of range (or ``group`` with ``each_group``), ScenarioError for a
    scenario it cannot search, RunError when a run fails."""
    source, is_text, ov = _resolve(scenario, overrides, None)
    _warn(_native.validate(source, is_text, ov))  # what `servesim capacity` warns of
    return json.loads(
        _native.capacity(
            source, is_text, ov, replicas=_count("replicas", replicas),
            tolerance=_real("tolerance", tolerance, "a fraction"),
            served_share=_real("served_share", served_share, "a fraction"), jobs=_jobs(jobs),
            group=_name("group", group, "an instance group's name"), each_group=each_group,
        )
    )


def plan(
    scenario: str,
    overrides: Optional[Mapping[str, Any]] = None,
    replicas: int = 1,
    jobs: Optional[int] = None,
) -> Dict[str, Any]:
    """``servesim plan`` of a scenario file with a ``plan`` block: the dict ``--format json``
    prints (``outcomes[0]`` is the best when its ``status`` is ``"best"``; ``pareto``; the
    reason every other configuration lost). What ``servesim plan`` warns of in the
    configurations it considers is issued once each as a ``ServesimWarning``."""
    source, is_text, ov = _resolve(scenario, overrides, None)
    if is_text:
        raise ValueError("plan needs a scenario file (its configurations are loaded from it)")
    answer, found = _native.plan(
        source, ov, replicas=_count("replicas", replicas), jobs=_jobs(jobs)
    )
    _warn(_native.said_once(found, "configuration", "with the configuration's values as --set"))
    return json.loads(answer)


def check_real(
    scenario: Any,
    measured: str,
    overrides: Optional[Mapping[str, Any]] = None,
    timeout_s: Optional[float] = None,
) -> Dict[str, Any]:
    """``servesim check-real``: replays a measured benchmark run (``measured``: vLLM's
    benchmark JSON, inference-perf's per-request report or a CSV, as on the command line)
    through the scenario's server and returns the comparison as the dict ``--format json``
    prints: ``overall`` and per ``stages`` the measured and simulated TTFT, ITL and E2E (mean,
    p50, p90, p99) with their errors and the ``timeouts`` of each, and ``mean_ape_pct``.
    ``timeout_s`` is the benchmark client's timeout (``--timeout-s``; default: the one the
    measured timed-out requests show). Writes no file. Raises ScenarioError for a bad
    scenario, ValueError for a measured file that cannot be read (file and line) or a bad
    ``timeout_s``, RunError when nothing measured completes in the simulation."""
    source, is_text, ov = _resolve(scenario, overrides, None)
    return json.loads(
        _native.check_real(
            source, is_text, ov, os.fspath(measured),
            timeout_s=_real("timeout_s", timeout_s, "a number of seconds"),
        )
    )


def calibrate(
    scenario: Any,
    measured: str,
    model: str = "blackbox",
    group: int = 0,
    max_evals: int = 400,
    overrides: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """``servesim calibrate``: fits a latency model of instance group ``group`` to a measured
    run and returns the dict ``--format json`` prints: ``params`` ([name, value] pairs), ``ron``
    (the ``latency:`` line to paste), ``train_loss``, ``evaluations`` and ``holdout`` (the
    error on the fifth held back, as ``check_real`` reports it). ``model`` is ``"blackbox"``,
    ``"trained-physics"`` or ``"roofline"`` (our roofline's least measured terms; the group
    needs its ``model`` and ``gpu``). Raises ScenarioError for a bad scenario, ValueError for
    a measured file that cannot be read, fewer than 10 measured requests, a group the scenario
    lacks, ``max_evals`` below 8 or a roofline or trained-physics fit of a group without a
    ``model`` and a ``gpu``, RunError when a fit cannot be simulated."""
    source, is_text, ov = _resolve(scenario, overrides, None)
    return json.loads(
        _native.calibrate(
            source, is_text, ov, os.fspath(measured), model=model,
            group=_count("group", group, 2**64 - 1), max_evals=_count("max_evals", max_evals, 2**64 - 1),
        )
    )


def evaluate(
    scenario: Any,
    overrides: Optional[Mapping[str, Any]] = None,
    weights: Optional[Mapping[str, float]] = None,
    seeds: int = 1,
    worst: int = 5,
    jobs: Optional[int] = None,
    seed: Optional[int] = None,
    routing: Optional[Callable[[Request, Sequence[Instance]], Optional[int]]] = None,
    admission: Optional[Callable[[Request, Sequence[Instance]], Any]] = None,
    priority: Optional[Callable[[Request, int, float], float]] = None,
    queue_order: Optional[Callable[[Request, float, float], Tuple[float, float]]] = None,
    autoscale: Optional[Any] = None,
    max_wall_s: Optional[float] = None,
    params: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    """``servesim evaluate``: a candidate's evaluation for a policy search, as the dict
    ``--format json`` prints. ``overrides`` (as for ``run``; ``params``, its earlier name, is
    still read) set the candidate's policies and their parameters; ``fitness`` maps each
    objective (``ttft_p99``, ``itl_p99``, ``e2e_p99``, ``slo_attainment``, ``served``,
    ``cost``, ``fairness``; each in [0, 1], higher is better)
    to its mean over ``seeds`` seeds, ``combined`` is Σ weight · objective / Σ weight × served
    (``weights``: 1 each unless given); ``overall`` and ``classes`` the raw metrics,
    ``anomalies`` the failure-mode counts, ``checks`` what argues against the score (load
    shed, a class starved, requests unaccounted for) and ``trace["text"]`` a summary in words
    for an LLM. Python policies (as for ``run``) replace the scenario's; each seed's run gets
    its own ``copy.deepcopy`` of them, so seeds share no state. What ``servesim evaluate``
    warns of in the scenario is issued as a ``ServesimWarning``. Raises ValueError for
    ``seeds`` or ``worst`` out of range, ScenarioError for a bad scenario or weight, RunError
    when a run fails (a policy's exception is re-raised) or
    the seeds together take more than ``max_wall_s`` seconds of wall time (a policy search's
    guard against a candidate that loops)."""
    _callables(routing=routing, admission=admission, priority=priority,
               queue_order=queue_order, autoscale=autoscale)
    if params is not None:
        if overrides is not None:
            raise TypeError("evaluate() takes overrides or params (its earlier name), not both")
        overrides = params
    source, is_text, ov = _resolve(scenario, overrides, seed)
    _warn(_native.validate(source, is_text, ov))  # what `servesim evaluate` warns of
    answer, found = _native.evaluate(
        source, is_text, ov, seeds=_count("seeds", seeds), weights=_weights(weights),
        worst=_count("worst", worst), jobs=_jobs(jobs), router=routing, admission=admission, priority=priority,
        queue_order=queue_order, autoscale=autoscale, max_wall_s=_wall(max_wall_s),
    )
    _warn(found)  # a priority= that orders nothing, as run says
    return json.loads(answer)
