"""Policy search: candidate programs, their evaluation on a pool, and the GEPA, OpenEvolve and
Optuna examples run end to end with offline proposers. CI installs gepa, openevolve and
optuna and sets SERVESIM_REQUIRE_SEARCH=1, so there a missing package fails instead of
skipping."""

import importlib
import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import servesim
from servesim.report import write_search
from servesim.search import (
    OBJECTIVES,
    CandidateError,
    Workload,
    compile_program,
    evaluate_program,
    evaluate_programs,
    evaluate_workload,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "python" / "examples"
POLICIES = EXAMPLES / "policies"
QUICK = str(ROOT / "scenarios" / "quickstart.ron")
RC = str(ROOT / "scenarios" / "routing-comparison.ron")
WORKLOADS = [
    Workload("rc", RC, {"workload.num_requests": 300}),
    Workload("quick", QUICK, {"workload.num_requests": 200, "cluster.groups[0].count": 3}),
]


def need(package):
    if os.environ.get("SERVESIM_REQUIRE_SEARCH") == "1":
        return importlib.import_module(package)
    return pytest.importorskip(package)


def example(name):
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(EXAMPLES))


def source(name):
    return (POLICIES / name).read_text()


def cli():
    path = Path(os.environ.get("SERVESIM_BIN", ROOT / "target" / "release" / "servesim"))
    assert path.exists(), f"build the CLI first (cargo build --release): {path}"
    return str(path)


def test_a_program_that_does_not_compile_or_defines_nothing_is_a_located_candidate_error():
    with pytest.raises(CandidateError, match=r"<candidate>:2:"):
        compile_program("def route(request, instances):\nreturn 0\n")
    with pytest.raises(CandidateError, match="defines none of route, admit, priority, queue_order"):
        compile_program("x = 1\n")
    with pytest.raises(CandidateError, match="ZeroDivisionError"):
        compile_program("x = 1 / 0\n")
    # A policy's name bound to something that cannot be called was "defines none of …".
    with pytest.raises(CandidateError, match=r"<candidate>: route is int \(5\), not a function"):
        compile_program("route = 5\n")
    # exit() at the top of a program ended the whole search with SystemExit.
    with pytest.raises(CandidateError, match=r"defining the program called exit\(3\)"):
        compile_program("import sys\nsys.exit(3)\n")
    policies = compile_program(source("least_loaded.py") + "\ndef admit(r, i):\n    return True\n")
    assert sorted(policies) == ["admission", "routing"]


def test_a_failing_candidate_scores_zero_with_the_reason_and_a_bad_scenario_raises():
    broken = evaluate_workload("def route(r, i):\n    return 99\n", WORKLOADS[0])
    assert broken["score"] == 0.0 and broken["evaluation"] is None
    assert "returned 99, which is not a routable instance" in broken["error"]
    assert broken["feedback"].startswith("Workload rc: the candidate failed and scores 0.")
    raising = evaluate_workload("def route(r, i):\n    raise KeyError('x')\n", WORKLOADS[0])
    assert raising["error"] == "KeyError: 'x'"
    # A policy that calls exit() fails as a candidate; the search goes on.
    exits = evaluate_workload("def route(r, i):\n    exit(2)\n", WORKLOADS[0])
    assert exits["score"] == 0.0 and exits["error"] == "SystemExit: a policy called exit(2)"
    # No workloads scored every program 0 without running it.
    with pytest.raises(ValueError, match="workloads is empty"):
        evaluate_program(FINE, [])
    r = evaluate_program("def route(r, i):\n    return 99\n", WORKLOADS)
    assert r["score"] == 0.0 and r["fitness"] == {k: 0.0 for k in OBJECTIVES}
    with pytest.raises(servesim.ScenarioError):
        evaluate_workload(source("least_loaded.py"), Workload("bad", QUICK, {"workload.num_requests": -1}))
    # So are the search's own settings: caught as the candidate's failure, each scored every
    # candidate 0 without a word to the search.
    fine = Workload("q", QUICK, {"workload.num_requests": 10})
    for kw, error, said in [
        (dict(seeds=0), ValueError, "seeds = 0: expected a whole number from 1 to 100,000"),
        (dict(seeds="2"), TypeError, "seeds is a whole number"),
        (dict(worst=-1), ValueError, "worst = -1"),
        (dict(max_wall_s=-1.0), ValueError, "max_wall_s must be a finite number of seconds > 0, got -1.0"),
        (dict(max_wall_s=float("nan")), ValueError, "max_wall_s must be a finite number"),
    ]:
        with pytest.raises(error, match=re.escape(said)):
            evaluate_program(FINE, [fine], **kw)
        with pytest.raises(error, match=re.escape(said)):
            evaluate_workload(FINE, fine, **kw)
    with pytest.raises(TypeError, match=re.escape("workload 'odd': override values are RON text, numbers or booleans, not object")):
        evaluate_program(FINE, [Workload("odd", QUICK, {"workload.num_requests": object()})])
    with pytest.raises(TypeError, match=re.escape("sources[1] is a program's source text (a str), not NoneType")):
        evaluate_programs([FINE, None], [fine])
    # The adapters check them when they are built, before the tool's loop starts.
    from servesim.adapters.gepa import ServesimAdapter
    from servesim.adapters.openevolve import Evaluator

    with pytest.raises(ValueError, match="seeds = 0"):
        ServesimAdapter(seeds=0)
    with pytest.raises(ValueError, match="workloads is empty"):
        Evaluator([])
    with pytest.raises(ValueError, match="max_wall_s must be"):
        Evaluator([fine], max_wall_s=0)


FINE = "def route(request, instances):\n    return min((i for i in instances if i.routable), key=lambda i: i.load).index\n"
# A candidate that loops, and swallows what interrupts it (as a retry loop does).
LOOPS = """
def route(request, instances):
    while True:
        try:
            while True:
                pass
        except Exception:
            pass
"""


def test_a_candidate_that_loops_or_runs_too_long_scores_zero_after_max_wall_s(tmp_path):
    # In a subprocess, so that a regression fails the test instead of hanging it.
    script = f"""
import json, servesim
from servesim.search import Workload, evaluate_workload
quick = {QUICK!r}
out = {{}}
looped = evaluate_workload({LOOPS!r}, Workload("w", quick, {{"workload.num_requests": 50}}), max_wall_s=0.5)
out["looped"] = [looped["score"], looped["error"]]
# A run with no Python code that would take hours; nothing is written.
try:
    servesim.run(quick, {{"workload.num_requests": 10**9}}, requests=False, out={str(tmp_path / "out")!r}, max_wall_s=0.5)
except servesim.RunError as e:
    out["long"] = str(e)
try:
    servesim.evaluate(quick, {{"workload.num_requests": 10**9}}, seeds=2, jobs=2, max_wall_s=0.5)
except servesim.RunError as e:
    out["evaluate"] = str(e)
# Nothing is left to go off later, and a program that ends is scored as without the limit.
fine = {FINE!r}
w = Workload("w", quick, {{"workload.num_requests": 50}})
out["fine"] = evaluate_workload(fine, w, max_wall_s=60.0)["score"] == evaluate_workload(fine, w)["score"] > 0
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    said = "stopped after max_wall_s = 0.5 s of wall time; nothing was written"
    assert out["looped"] == [0.0, f"RunError: {said}"]
    assert out["long"] == out["evaluate"] == said
    assert out["fine"] is True
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="max_wall_s must be a finite number of seconds > 0"):
            servesim.run(QUICK, {"workload.num_requests": 10}, max_wall_s=bad)
    # Not a number: was PyO3's "must be real number, not str", naming no argument.
    for bad in ("5", True):
        with pytest.raises(TypeError, match="max_wall_s is a number of seconds or None, not"):
            servesim.run(QUICK, {"workload.num_requests": 10}, max_wall_s=bad)
        with pytest.raises(TypeError, match="max_wall_s is a number of seconds or None, not"):
            servesim.evaluate(QUICK, max_wall_s=bad)


def test_a_program_scores_what_evaluate_gives_its_policies_and_the_mean_over_workloads():
    r = evaluate_program(source("least_loaded.py"), WORKLOADS)
    for w, got in zip(WORKLOADS, r["workloads"]):
        # The program is least_loaded with ties to the lowest index; the built-in takes ties
        # in turn, so compare with the program's own function run directly.
        direct = servesim.evaluate(w.scenario, dict(w.overrides),
                                   routing=compile_program(source("least_loaded.py"))["routing"])
        assert got["evaluation"] == direct
        assert got["score"] == direct["combined"]
        assert got["feedback"] == f"Workload {w.name}: {direct['trace']['text']}"
    assert r["score"] == pytest.approx(sum(w["score"] for w in r["workloads"]) / 2, abs=0)
    for k in OBJECTIVES:
        assert r["fitness"][k] == sum(w["evaluation"]["fitness"][k] for w in r["workloads"]) / 2
    # The poor seed router is worse on both workloads.
    seed = evaluate_program(source("first_routable.py"), WORKLOADS)
    assert all(s["score"] < g["score"] for s, g in zip(seed["workloads"], r["workloads"]))


def test_a_pool_without_map_is_a_type_error_before_any_candidate_runs():
    with pytest.raises(TypeError, match="pool is anything with map"):
        evaluate_programs(["def route(r, i):\n    return 0\n"], WORKLOADS, pool=5)


def test_candidates_evaluated_on_a_process_pool_or_ray_equal_the_serial_evaluation():
    programs = [source(p) for p in ("first_routable.py", "least_loaded.py", "kv_aware.py")]
    serial = evaluate_programs(programs, WORKLOADS)
    with ProcessPoolExecutor(2) as pool:
        assert evaluate_programs(programs, WORKLOADS, pool=pool) == serial
    # (ray.util: a directory named ray on sys.path, such as /tmp/ray, imports as "ray" too.)
    pytest.importorskip("ray.util")
    import ray
    from ray.util.multiprocessing import Pool

    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True)
    try:
        with Pool(2) as pool:
            assert evaluate_programs(programs, WORKLOADS, pool=pool) == serial
    finally:
        ray.shutdown()


def test_gepa_improves_the_seed_router_with_an_offline_proposer_and_reflects_on_the_trace():
    need("gepa")
    import servesim.adapters.gepa

    ex = example("gepa_routing")
    result = ex.optimise(max_metric_calls=16)
    scores = result.val_aggregate_scores
    best = result.best_candidate["policy"]
    assert best in (ex.program("least_loaded.py"), ex.program("kv_aware.py"))
    assert scores[result.best_idx] > scores[0]
    # The adapter's reflective dataset: one record per workload, the trace in its feedback.
    adapter = servesim.adapters.gepa.ServesimAdapter(weights=ex.WEIGHTS)
    batch = adapter.evaluate(ex.WORKLOADS, {"policy": ex.program("first_routable.py")}, capture_traces=True)
    assert len(batch.scores) == 2 and batch.trajectories is not None
    assert sorted(batch.objective_scores[0]) == sorted(OBJECTIVES)
    data = adapter.make_reflective_dataset({"policy": ""}, batch, ["policy"])["policy"]
    assert [d["Inputs"]["workload"] for d in data] == ["routing-comparison", "quickstart"]
    assert "Worst routing decisions" in data[0]["Feedback"]
    assert data[0]["Generated Outputs"]["combined"] == round(batch.scores[0], 6)
    json.dumps(data)  # GEPA's prompt needs it serialisable


def test_openevolve_improves_the_seed_router_with_an_offline_model(tmp_path):
    need("openevolve")
    import servesim.adapters.openevolve

    ex = example("openevolve_routing")
    result = ex.evolve(iterations=3, output_dir=str(tmp_path / "oe"))
    evaluator = servesim.adapters.openevolve.Evaluator(ex.WORKLOADS, weights=ex.WEIGHTS)
    seed = evaluator.metrics(ex.program("first_routable.py"))["metrics"]
    best = evaluator.metrics(result.best_code)["metrics"]
    assert "def route" in result.best_code and "first routable" not in result.best_code
    assert result.best_score == best["combined_score"] > seed["combined_score"]
    assert set(OBJECTIVES) <= set(best) and best["ttft_p99_ms"] > 0
    # What OpenEvolve gets back for a file: the metrics and the trace as an artifact.
    path = tmp_path / "p.py"
    path.write_text(ex.program("first_routable.py"))
    r = evaluator(str(path))
    assert r.metrics == seed and "Worst routing decisions" in r.artifacts["feedback"]


def test_optuna_finds_a_front_no_feasible_trial_dominates_and_the_report_draws_it(tmp_path):
    need("optuna")
    ex = example("optuna_search")
    study = ex.search(trials=4, seeds=1)
    rows = ex.rows(study)
    assert len(rows) == 4
    again = ex.rows(ex.search(trials=4, seeds=1))
    assert again == rows  # seeded sampler, deterministic simulator
    front = [r for r in rows if r["pareto"]]
    assert front and all(r["feasible"] for r in front)

    def dominates(a, b):
        ka, kb = (a["ttft_p99_ms"], a["cost_per_mtok"]), (b["ttft_p99_ms"], b["cost_per_mtok"])
        return all(x <= y for x, y in zip(ka, kb)) and ka != kb

    for r in front:
        assert not any(dominates(o, r) for o in rows if o["feasible"])
    for r in rows:
        if r["feasible"] and not r["pareto"]:
            assert any(dominates(f, r) for f in front)
    # A trial's objectives are what a run of its overrides gives.
    t = study.trials[0]
    m = ex.measure(ex.candidate(optuna_fixed(t)), seeds=1)
    assert (m["ttft_p99_ms"], m["cost_per_mtok"]) == tuple(t.values)
    out = tmp_path / "search"
    write_search(str(out), rows, objectives=list(ex.OBJECTIVES), directions=["minimize", "minimize"],
                 scenario="autoscaling", tool="optuna")
    page = subprocess.run([cli(), "report", str(out)], capture_output=True, text=True)
    assert page.returncode == 0, page.stderr
    html = (out / "report.html").read_text()
    assert "Pareto front" in html and "ttft_p99_ms" in html
    assert html.count('<tr class="front">') == len(front)


def optuna_fixed(trial):
    import optuna

    return optuna.trial.FixedTrial(trial.params)


def test_write_search_refuses_a_trial_without_its_objectives_and_unknown_directions(tmp_path):
    with pytest.raises(ValueError, match="trial 3 has no cost"):
        write_search(str(tmp_path), [{"trial": 3, "ttft": 1.0, "feasible": True, "pareto": True}],
                     objectives=["ttft", "cost"], directions=["minimize", "minimize"])
    with pytest.raises(ValueError, match="neither"):
        write_search(str(tmp_path), [], objectives=["ttft"], directions=["down"])
    # Values of the wrong kind would be drawn as nothing, or counted infeasible, silently.
    good = {"trial": 0, "ttft": 1.0, "feasible": True, "pareto": True}
    for bad, message in [
        ({"ttft": "1.0"}, "trial 0: objective 'ttft' must be a number or None, got '1.0'"),
        ({"ttft": True}, "objective 'ttft' must be a number or None, got True"),
        ({"feasible": "yes"}, "trial 0: `feasible` must be True or False, got 'yes'"),
        ({"pareto": 1}, "`pareto` must be True or False, got 1"),
        ({"trial": "a"}, "trial 'a': `trial` must be a whole number"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            write_search(str(tmp_path / "bad"), [{**good, **bad}], objectives=["ttft"], directions=["minimize"])
    with pytest.raises(ValueError, match="trial 0 is given twice"):
        write_search(str(tmp_path / "bad"), [good, good], objectives=["ttft"], directions=["minimize"])
    with pytest.raises(ValueError, match="objective 'ttft' is named twice"):
        write_search(str(tmp_path / "bad"), [good], objectives=["ttft", "ttft"], directions=["minimize"] * 2)
    with pytest.raises(ValueError, match="'feasible' has the name of one of search.csv's own columns"):
        write_search(str(tmp_path / "bad"), [good], objectives=["feasible"], directions=["minimize"])
    assert not (tmp_path / "bad").exists()
    # None, NaN and infinities are no value: written empty.
    write_search(str(tmp_path / "none"), [good, {**good, "trial": 1, "ttft": None}, {**good, "trial": 2, "ttft": math.inf}],
                 objectives=["ttft"], directions=["minimize"])
    assert (tmp_path / "none" / "search.csv").read_text().splitlines()[2:] == ["1,,true,true", "2,,true,true"]
    # A directory holds one command's results: not a search's beside a run's, nor the reverse.
    servesim.run(QUICK, {"workload.num_requests": 10}, out=str(tmp_path / "run"))
    trial = [{"trial": 0, "ttft": 1.0, "feasible": True, "pareto": True}]
    with pytest.raises(ValueError, match="holds a run's results .*this policy search's would be mixed"):
        write_search(str(tmp_path / "run"), trial, objectives=["ttft"], directions=["minimize"])
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["requests.csv", "summary.json", "timeseries.csv"]
    write_search(str(tmp_path / "search"), trial, objectives=["ttft"], directions=["minimize"])
    with pytest.raises(servesim.RunError, match="holds a policy search's results \\(search.csv, search.json\\)"):
        servesim.run(QUICK, {"workload.num_requests": 10}, out=str(tmp_path / "search"))
