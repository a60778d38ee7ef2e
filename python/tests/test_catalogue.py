"""Python policies in the catalogue (``servesim.register``) and autoscaling in Python: ports of
built-in policies give byte-identical results in run, evaluate and sweep, registered names and
parameters are validated as built-in ones are, and errors stop the run."""

import os
import re
from pathlib import Path

import pytest

import servesim
from servesim.sweep import sweep

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "scenarios" / "quickstart.ron")
SCALING = str(ROOT / "scenarios" / "autoscaling.ron")
# The bundled autoscaling workload, its stages a tenth as long (~3,700 requests).
SHORT = {
    "workload.clients[0].arrival": "Staged(stages: [(rate_per_s: 4.0, duration_s: 60.0), "
    "(rate_per_s: 30.0, duration_s: 90.0), (rate_per_s: 12.0, duration_s: 60.0), "
    "(rate_per_s: 2.0, duration_s: 60.0)])",
}
BUILT_IN_THRESHOLD = {
    **SHORT,
    "policies.autoscale": '"threshold"',
    "policies.autoscale_params": '{"in_flight_high": 12.0, "in_flight_low": 4.0, "interval_s": 10.0}',
}


class Threshold:
    """A port of the built-in `threshold` scaler on requests in flight per ready instance: one
    more instance above `high`, one fewer below `low`, every `interval_s`."""

    def __init__(self, high, low, interval_s=15.0):
        self.high, self.low, self.interval_s = high, low, interval_s
        self.calls = []

    def __call__(self, now_s, groups):
        self.calls.append(now_s)
        out = {}
        for g in groups:
            v = g.in_flight_per_instance
            if v > self.high:
                out[g.group] = (g.current + 1, "in_flight")
            elif v < self.low:
                out[g.group] = (max(g.current - 1, 0), "in_flight")
        return out


class LeastLoaded:
    """The built-in least_loaded router: fewest requests in the system, ties in turn."""

    def __init__(self):
        self.last = None

    def __call__(self, request, instances):
        cands = [(i.index, i.load) for i in instances if i.routable]
        if not cands:
            return None
        top = min(load for _, load in cands)
        tied = [i for i, load in cands if load == top]
        after = [i for i in tied if self.last is None or i > self.last]
        self.last = (after or tied)[0]
        return self.last


def make_threshold(params):
    if params["in_flight_low"] >= params["in_flight_high"]:
        raise ValueError("in_flight_low must be below in_flight_high")
    return Threshold(params["in_flight_high"], params["in_flight_low"], params.get("interval_s", 15.0))


def make_least_loaded(params):
    return LeastLoaded()


THRESHOLD_PARAMS = {"in_flight_high": "scale up above", "in_flight_low": "scale down below",
                    "interval_s": "seconds between evaluations"}


@pytest.fixture(autouse=True, scope="module")
def catalogue():
    servesim.register("autoscale", "py_threshold", make_threshold, "threshold on in-flight, in Python",
                      THRESHOLD_PARAMS)
    servesim.register("routing", "py_least_loaded", make_least_loaded, "least loaded, in Python")


def files(out):
    return {n: (Path(out) / n).read_text() for n in ("summary.json", "requests.csv", "scale_events.csv")}


def test_a_python_scaler_reproduces_the_built_in_threshold_byte_for_byte(tmp_path):
    rust = servesim.run(SCALING, BUILT_IN_THRESHOLD, out=str(tmp_path / "rust"))
    g = rust.summary["groups"][0]
    assert g["scale_ups"] > 1 and g["scale_downs"] > 0  # it did scale, up and back
    scaler = Threshold(12.0, 4.0, interval_s=10.0)
    py = servesim.run(SCALING, BUILT_IN_THRESHOLD, out=str(tmp_path / "py"), autoscale=scaler)
    assert files(tmp_path / "py") == files(tmp_path / "rust")
    # Each run scales with its own copy, evaluated every 10 s from t = 10 s.
    assert scaler.calls == []
    spy = Threshold(12.0, 4.0, interval_s=10.0)
    spy.__deepcopy__ = lambda memo: spy  # this one is shared on purpose, to watch its calls
    servesim.run(SCALING, BUILT_IN_THRESHOLD, autoscale=spy, requests=False)
    assert spy.calls[:4] == [10.0, 20.0, 30.0, 40.0]
    assert all(b - a == pytest.approx(10.0) for a, b in zip(spy.calls, spy.calls[1:]))
    # Registered under a name, with its parameters from the scenario: the same files.
    named = {**SHORT, "policies.autoscale": '"py_threshold"',
             "policies.autoscale_params": BUILT_IN_THRESHOLD["policies.autoscale_params"]}
    servesim.run(SCALING, named, out=str(tmp_path / "named"))
    mine = files(tmp_path / "named")
    assert mine["requests.csv"] == files(tmp_path / "rust")["requests.csv"]
    assert mine["scale_events.csv"] == files(tmp_path / "rust")["scale_events.csv"]
    assert mine["summary.json"] == files(tmp_path / "rust")["summary.json"]


def test_a_scaler_that_returns_nonsense_or_raises_stops_the_run():
    with pytest.raises(servesim.RunError, match="must return a dict"):
        servesim.run(SCALING, SHORT, autoscale=lambda now, groups: 3, requests=False)
    with pytest.raises(servesim.RunError, match="sized group 5, which is not an autoscaled group"):
        servesim.run(SCALING, SHORT, autoscale=lambda now, groups: {5: 2}, requests=False)

    def boom(now, groups):
        raise ArithmeticError("no scaling today")

    with pytest.raises(ArithmeticError, match="no scaling today"):
        servesim.run(SCALING, SHORT, autoscale=boom, requests=False)
    with pytest.raises(ArithmeticError, match="no scaling today"):
        servesim.evaluate(SCALING, SHORT, autoscale=boom)
    with pytest.raises(servesim.RunError, match="keys are groups, by index .* or name .*'nope' is neither"):
        servesim.run(SCALING, SHORT, autoscale=lambda now, groups: {"nope": 2}, requests=False)
    # A bool is not a size (True ran as 1), alone or with a reason; -1 and 2.5 are not either.
    for bad in (True, (False, "why"), -1, 2.5):
        with pytest.raises(servesim.RunError, match="must be a whole number ≥ 0 \\(an int, not a bool\\)"):
            servesim.run(SCALING, SHORT, autoscale=lambda now, groups, b=bad: {0: b}, requests=False)
    # A size past 32 bits asks for the group's max, as any size above it does (it was refused
    # as "not a whole number ≥ 0").
    huge = servesim.run(SCALING, SHORT, autoscale=lambda now, groups: {0: 10**30}, requests=False)
    most = servesim.run(SCALING, SHORT, autoscale=lambda now, groups: {g.group: g.max for g in groups}, requests=False)
    assert huge.summary_json == most.summary_json


class Every:
    def __init__(self, interval_s):
        self.interval_s = interval_s

    def __call__(self, now, groups):
        return {g.name: g.max for g in groups}


def test_a_scaler_names_groups_by_name_and_its_interval_and_scenario_are_checked():
    by_name = servesim.run(SCALING, SHORT, autoscale=Every(5.0), requests=False)
    by_index = servesim.run(SCALING, SHORT, requests=False,
                            autoscale=lambda now, groups: {g.group: g.max for g in groups})
    by_index_every_5 = servesim.run(SCALING, SHORT, requests=False, autoscale=type(
        "E", (), {"interval_s": 5.0, "__call__": lambda self, now, groups: {g.group: g.max for g in groups}})())
    assert by_name.summary_json == by_index_every_5.summary_json
    assert by_name.summary["groups"][0]["scale_ups"] > 0
    assert by_index.summary_json != by_name.summary_json  # 15 s, not 5 s, between evaluations
    # Said before the run as what it is (it was "invalid scenario (validate it first)").
    for bad in (0, float("nan"), "15", True):
        with pytest.raises(ValueError, match=f"interval_s must be a finite number of seconds .*got {re.escape(repr(bad))}"):
            servesim.run(SCALING, SHORT, autoscale=Every(bad))
    # A scaler for a scenario with nothing to scale was ignored.
    with pytest.raises(servesim.ScenarioError, match="no group of this scenario has it"):
        servesim.run(QUICK, {"workload.num_requests": 10}, autoscale=Every(5.0))
    with pytest.raises(servesim.ScenarioError, match="no group of this scenario has it"):
        servesim.evaluate(QUICK, {"workload.num_requests": 10}, autoscale=Every(5.0))


def test_registered_names_and_parameters_are_validated_like_built_in_ones():
    with pytest.raises(servesim.ScenarioError, match=r'did you mean "py_least_loaded"'):
        servesim.validate(QUICK, {"policies.routing": '"py_least_loadd"'})
    with pytest.raises(servesim.ScenarioError, match=r'(?s)in_flight_hgh: unknown parameter of py_threshold.*did you mean "in_flight_high"'):
        servesim.validate(SCALING, {"policies.autoscale": '"py_threshold"',
                                    "policies.autoscale_params": '{"in_flight_hgh": 1.0}'})
    with pytest.raises(servesim.ScenarioError, match=r"(?s)policies.autoscale_params: py_threshold: ValueError: in_flight_low must be below"):
        servesim.validate(SCALING, {"policies.autoscale": '"py_threshold"',
                                    "policies.autoscale_params": '{"in_flight_high": 1.0, "in_flight_low": 2.0}'})
    with pytest.raises(ValueError, match="is built in"):
        servesim.register("routing", "least_loaded", make_least_loaded)
    with pytest.raises(ValueError, match="unknown policy family"):
        servesim.register("routers", "x", make_least_loaded)
    # A make that is not callable, and params that are not a dict, are said when registered.
    with pytest.raises(TypeError, match=r"make is a function .* not int \(5\)"):
        servesim.register("routing", "py_five", 5)
    with pytest.raises(TypeError, match="params maps each parameter's name to its meaning.* not list"):
        servesim.register("routing", "py_listed", make_least_loaded, params=["alpha"])
    assert "py_five" not in {r[1] for r in servesim.registered()}
    assert ("routing", "py_least_loaded") in {(r[0], r[1]) for r in servesim.registered()}
    # What make returns must be callable: said at the parameters, not at the first request.
    servesim.register("routing", "py_not_callable", lambda params: 5)
    with pytest.raises(servesim.ScenarioError, match=r"routing_params: py_not_callable: TypeError: make\(params\) returned 5, which is not callable"):
        servesim.validate(QUICK, {"policies.routing": '"py_not_callable"'})
    # capacity and plan run on threads without Python: refused, saying so.
    with pytest.raises(servesim.ScenarioError, match="registered from Python"):
        servesim.capacity(QUICK, {"policies.routing": '"py_least_loaded"'})


def test_a_registered_router_works_in_run_evaluate_and_sweep_as_the_built_in_one():
    ov = {"workload.num_requests": 400, "cluster.groups[0].count": 3}
    rust = servesim.run(QUICK, {**ov, "policies.routing": '"least_loaded"'})
    mine = servesim.run(QUICK, {**ov, "policies.routing": '"py_least_loaded"'})
    assert mine.requests_csv == rust.requests_csv
    assert mine.summary["ttft_ms"] == rust.summary["ttft_ms"]
    e_rust = servesim.evaluate(QUICK, {**ov, "policies.routing": '"least_loaded"'}, seeds=2, jobs=2)
    e_mine = servesim.evaluate(QUICK, {**ov, "policies.routing": '"py_least_loaded"'}, seeds=2, jobs=2)
    assert e_mine["fitness"] == e_rust["fitness"] and e_mine["combined"] == e_rust["combined"]
    points = [{**ov, "policies.routing": '"py_least_loaded"'}, {**ov, "policies.routing": '"least_loaded"'}]
    rows = sweep(QUICK, points, backend="process", jobs=2)
    assert {k: v for k, v in rows[0].items() if k != "policies.routing"} == \
        {k: v for k, v in rows[1].items() if k != "policies.routing"}


def test_a_registered_policy_sees_the_names_and_its_exceptions_stop_the_run():
    seen = []

    def spy(params):
        def route(request, instances):
            seen.append((request.tenant_name, instances[0].group_name))
            return 0
        return route

    servesim.register("routing", "py_spy", spy)
    servesim.run(QUICK, {"workload.num_requests": 5, "policies.routing": '"py_spy"'})
    assert seen[0] == ("chat", "h100")

    def boom(params):
        def route(request, instances):
            raise LookupError("lost the instances")
        return route

    servesim.register("routing", "py_boom", boom)
    with pytest.raises(LookupError, match="lost the instances"):
        servesim.run(QUICK, {"workload.num_requests": 5, "policies.routing": '"py_boom"'})
    with pytest.raises(LookupError, match="lost the instances"):
        servesim.evaluate(QUICK, {"workload.num_requests": 5, "policies.routing": '"py_boom"'}, seeds=2)

    # A sweep ships only the registered policies it names: the closures above cannot be
    # pickled, yet a process-pool sweep that names neither runs.
    rows = sweep(QUICK, [{"workload.num_requests": 20}], backend="process", jobs=1)
    assert rows[0]["requests.completed"] == 20


def test_policies_see_states_last_steps_roles_and_the_cluster():
    seen = []

    def spy(request, instances, cluster):
        seen.append((request.now_s, [(i.state, i.role, i.last_step_ms) for i in instances], cluster))
        return min((i for i in instances if i.routable), key=lambda i: i.load).index

    spy.wants_cluster = True
    servesim.run(QUICK, {"workload.num_requests": 50}, routing=spy)
    now, first, cluster = seen[0]
    assert first == [("serving", "mixed", None), ("serving", "mixed", None)]
    assert cluster.now_s == now and cluster.groups == [("h100", 2, 0, 0)]
    # Later decisions see the steps the instances have taken (a few ms each on an H100).
    steps = [ms for _, views, _ in seen[1:] for _, _, ms in views if ms is not None]
    assert steps and all(0.0 < ms < 200.0 for ms in steps)

    # Asking for the live views changes what the policy sees, not the run's results.
    class LiveLeastLoaded(LeastLoaded):
        wants_cluster = True

        def __call__(self, request, instances, cluster):
            return LeastLoaded.__call__(self, request, instances)

    ov = {"workload.num_requests": 300, "cluster.groups[0].count": 3}
    plain = servesim.run(QUICK, ov, routing=LeastLoaded())
    live = servesim.run(QUICK, ov, routing=LiveLeastLoaded())
    assert live.requests_csv == plain.requests_csv and live.summary_json == plain.summary_json
    no_live = []
    servesim.run(QUICK, {"workload.num_requests": 5},
                 routing=lambda r, i: no_live.append((i[0].state, i[0].last_step_ms)) or 0)
    assert set(no_live) == {(None, None)}

    # An autoscaled run: the cluster shows scale-ups under way, the instances their states.
    states, starting = set(), 0

    def watch(request, instances, cluster):
        nonlocal starting
        states.update(i.state for i in instances)
        starting = max(starting, cluster.groups[0][2])
        return min((i for i in instances if i.routable), key=lambda i: i.load).index

    watch.wants_cluster = True
    servesim.run(SCALING, BUILT_IN_THRESHOLD, routing=watch, requests=False)
    assert {"serving", "provisioning", "off"} <= states and starting > 0

    # Roles of a P/D pair; admission gets the cluster too.
    roles, sizes = set(), []

    def admit(request, instances, cluster):
        roles.update(i.role for i in instances)
        sizes.append(cluster.groups)
        return True

    admit.wants_cluster = True
    servesim.run(str(ROOT / "scenarios" / "pd-disaggregation.ron"), {"workload.num_requests": 20},
                 admission=admit, requests=False)
    assert "prefill" in roles and len(sizes) == 20
