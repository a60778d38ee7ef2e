"""The Python package: results equal the CLI's byte for byte, located exceptions, Python
routers, the evaluator, and sweeps. Run: pytest python/tests (after `maturin develop`)."""

import json
import re
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import servesim
from servesim.sweep import METRICS, run_point, sweep

ROOT = Path(__file__).resolve().parents[2]
QUICK = str(ROOT / "scenarios" / "quickstart.ron")


def cli():
    """The release CLI (`cargo build --release`), or SERVESIM_BIN."""
    path = Path(os.environ.get("SERVESIM_BIN", ROOT / "target" / "release" / "servesim"))
    assert path.exists(), f"build the CLI first (cargo build --release): {path}"
    return str(path)


def small(src_requests=300):
    return {"workload.num_requests": src_requests}


def test_results_equal_the_cli_byte_for_byte(tmp_path):
    out = tmp_path / "cli"
    subprocess.run(
        [cli(), "run", QUICK, "--out", str(out), "--seed", "7", "--set", "workload.num_requests=300"],
        check=True,
        capture_output=True,
    )
    r = servesim.run(QUICK, overrides=small(), seed=7)
    assert r.summary_json == (out / "summary.json").read_text()
    assert r.requests_csv == (out / "requests.csv").read_text()
    # out= writes the same files as the CLI.
    mine = tmp_path / "py"
    servesim.run(QUICK, overrides=small(), seed=7, out=str(mine))
    assert (mine / "summary.json").read_bytes() == (out / "summary.json").read_bytes()
    assert (mine / "requests.csv").read_bytes() == (out / "requests.csv").read_bytes()
    # A later run that does not write requests.csv leaves it, and says so as the CLI does (it
    # was silent in Python).
    with pytest.warns(servesim.ServesimWarning) as said:
        servesim.run(QUICK, overrides={**small(), "outputs.requests_csv": False}, out=str(mine))
    assert f"left alone in {mine}: requests.csv (from an earlier run; this run does not write it)" in [
        str(w.message) for w in said
    ]


def test_requests_are_a_dataframe_with_the_csv_columns():
    r = servesim.run(QUICK, overrides=small(200), seed=3)
    df = r.requests
    assert len(df) == 200
    header = r.requests_csv.splitlines()[0].split(",")
    assert list(df.columns) == header
    assert (df["state"] == "completed").sum() == r.summary["requests"]["completed"]
    assert abs(df["ttft_ms"].max() - r.summary["ttft_ms"]["max"]) < 1e-3


def test_a_bad_scenario_raises_with_every_problem_located():
    with pytest.raises(servesim.ScenarioError) as e:
        servesim.validate(QUICK, overrides={"cluster.groups[0].kv_blocks": 0, "workload.num_requests": 0})
    text = str(e.value)
    assert "2 problems" in text
    assert "cluster.groups[0].kv_blocks: must be > 0" in text
    assert "workload.num_requests: must be ≥ 1" in text
    assert "quickstart.ron (after the overrides):" in text
    with pytest.raises(servesim.ScenarioError, match="no/such.ron: 1 problem"):
        servesim.run("no/such.ron")
    with pytest.raises(servesim.ScenarioError, match="workload.num_requests: must be ≥ 1"):
        servesim.load(QUICK, {"workload.num_requests": 0})
    # A loaded scenario runs like its path, with further overrides.
    sc = servesim.load(QUICK, small(50), seed=4)
    assert servesim.run(sc).summary_json == servesim.run(QUICK, small(50), seed=4).summary_json
    assert servesim.run(sc, {"workload.num_requests": 20}).summary["requests"]["injected"] == 20
    # validate and load take it too (validate said "scenario is a path (str or os.PathLike),
    # RON text or a servesim.Scenario, not Scenario").
    servesim.validate(sc)
    with pytest.raises(servesim.ScenarioError, match="workload.num_requests: must be ≥ 1"):
        servesim.validate(sc, {"workload.num_requests": 0})
    again = servesim.load(sc, {"workload.num_requests": 30})
    assert servesim.run(again).summary_json == servesim.run(QUICK, small(30), seed=4).summary_json
    with pytest.raises(TypeError):
        servesim.run(QUICK, overrides={"seed": [1]})


def round_robin():
    """round_robin in Python: the next routable index after the last one, wrapping."""
    last = [None]

    def choose(request, instances):
        routable = [i[0] for i in instances if i[6]]
        if not routable:
            return None
        pick = next((i for i in routable if last[0] is not None and i > last[0]), routable[0])
        last[0] = pick
        return pick

    return choose


def test_a_python_router_reproduces_round_robin_exactly():
    ov = {"workload.num_requests": 400, "cluster.groups[0].count": 3, "policies.routing": '"round_robin"'}
    rust = servesim.run(QUICK, overrides=ov, seed=5)
    py = servesim.run(QUICK, overrides=ov, seed=5, routing=round_robin())
    assert py.requests_csv == rust.requests_csv
    assert py.summary_json == rust.summary_json
    # And it differs from another policy on the same load.
    other = servesim.run(QUICK, overrides={**ov, "policies.routing": '"least_loaded"'}, seed=5)
    assert other.requests_csv != rust.requests_csv


def test_the_router_sees_the_request_and_the_instances():
    seen = []

    def spy(request, instances):
        seen.append((request, instances))
        return 1

    servesim.run(QUICK, overrides={"workload.num_requests": 3}, routing=spy)
    request, instances = seen[0]
    assert request[0] == 0  # id
    assert request[1] > 0 and request[2] > 0  # input and output tokens
    assert [i[0] for i in instances] == [0, 1]
    assert all(i[6] for i in instances)  # routable
    assert instances[0][5] == 26583  # KV blocks of the quickstart instances (vLLM's profile)
    # The requests sent to instance 1 show up in its snapshot at the next decision.
    later = [instances[1] for _, instances in seen[1:]]
    assert any(i[1] + i[2] + i[3] > 0 for i in later)


def test_router_errors_stop_the_run():
    def boom(request, instances):
        raise ValueError("no idea")

    with pytest.raises(ValueError, match="no idea"):
        servesim.run(QUICK, overrides=small(10), routing=boom)
    with pytest.raises(servesim.RunError, match="returned 7, which is not a routable instance"):
        servesim.run(QUICK, overrides=small(10), routing=lambda r, i: 7)
    # What is not an index at all is said as such, with what came back.
    for bad in ("0", -1, 1.0):
        with pytest.raises(servesim.RunError, match=f"returned {re.escape(repr(bad))}, which is "
                           "neither an instance index"):
            servesim.run(QUICK, overrides=small(10), routing=lambda r, i, bad=bad: bad)
    # A bool is an int in Python: True routed every request to instance 1.
    with pytest.raises(servesim.RunError, match="returned True, a bool"):
        servesim.run(QUICK, overrides=small(10), routing=lambda r, i: True)
    # An object Python shows by its address is named by its type: the message is the same
    # on every run (a policy search's feedback too).
    def yields(request, instances):
        yield 0

    async def waits(request, instances):
        return 0

    for f, said in ((yields, "returned a generator (the function yields"),
                    (waits, "returned a coroutine (the function is `async def`"),
                    (lambda r, i: object(), "returned an object of type object, which is neither")):
        with pytest.raises(servesim.RunError, match=re.escape(said)) as e:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the coroutine never awaited
                servesim.run(QUICK, overrides=small(10), routing=f)
        assert "0x" not in str(e.value)


def test_what_a_policy_returns_is_checked_and_named():
    # Each of these ran before: a priority of "high" or NaN and a sort key with NaN ordered
    # the queue by nothing, an empty reason counted rejections under "".
    by_priority = dict(small(20), **{"policies.scheduling": '"priority_fcfs"'})
    for bad in ("high", float("nan"), True):
        with pytest.raises(servesim.RunError, match=f"priority policy must return a number .*got {re.escape(repr(bad))}"):
            servesim.run(QUICK, by_priority, priority=lambda r, c, a, bad=bad: bad)
    for bad in ((1.0,), (float("nan"), 0.0), 1.0, [1, 2]):
        with pytest.raises(servesim.RunError, match=f"queue order must return a sort key of two numbers .*got {re.escape(repr(bad))}"):
            servesim.run(QUICK, small(200), queue_order=lambda r, a, p, bad=bad: bad)
    with pytest.raises(servesim.RunError, match="returned an empty reason"):
        servesim.run(QUICK, small(20), admission=lambda r, i: "")
    with pytest.raises(servesim.RunError, match="True, False or a reason .*got None"):
        servesim.run(QUICK, small(20), admission=lambda r, i: None)
    # Infinite priorities order as any number.
    r = servesim.run(QUICK, by_priority, priority=lambda r, c, a: float("inf") if r.id % 2 else 0.0)
    assert r.summary["requests"]["completed"] == 20
    # With FCFS queues and tail preemption no priority is read: said, not silently ignored.
    with pytest.warns(servesim.ServesimWarning, match=r"priority= orders nothing here: scheduling \"fcfs\""):
        servesim.run(QUICK, small(20), priority=lambda r, c, a: 1.0)
    # A policy search would score every priority candidate alike: evaluate says so too.
    with pytest.warns(servesim.ServesimWarning, match="priority= orders nothing here"):
        servesim.evaluate(QUICK, small(20), priority=lambda r, c, a: 1.0)


def test_the_scenario_seed_and_out_arguments_are_checked(tmp_path):
    # A pathlib.Path is a path (it raised "'PosixPath' object is not an instance of 'str'").
    by_path = servesim.run(Path(QUICK), small(10), seed=3, out=tmp_path / "p")
    assert by_path.summary_json == servesim.run(QUICK, small(10), seed=3).summary_json
    assert (tmp_path / "p" / "summary.json").read_text() == by_path.summary_json
    for bad in (None, 5, b"(seed: 1)"):
        with pytest.raises(TypeError, match=f"scenario is a path .* not {type(bad).__name__}"):
            servesim.run(bad)
    # A scenario file's text as read begins with its comments: it was taken for a path and
    # failed as a missing file named by the whole text. So are attributes and a struct name.
    text = Path(QUICK).read_text()
    assert text.startswith("//")
    by_text = servesim.run(text, small(10), seed=3)
    assert by_text.summary_json == by_path.summary_json.replace(QUICK, "<text>")
    for variant in ("#![enable(implicit_some)]\n" + text, "/* a */ Scenario" + text.split("\n(", 1)[1].join(["(", ""])):
        assert servesim.run(variant, small(10), seed=3).summary["requests"]["completed"] == 10
    with pytest.raises(servesim.ScenarioError, match=r"<text>:2:1: "):
        servesim.validate("// a comment\n)")
    # A missing file is still a missing file, named, also with parentheses in its name.
    for missing in ("nowhere.ron", "x(1).ron"):
        with pytest.raises(servesim.ScenarioError, match=re.escape(f"{missing}: No such file")):
            servesim.run(missing)
    # seed=1.5 ran seed 1 and seed="7" seed 7, silently.
    for bad in (1.5, "7", True):
        with pytest.raises(TypeError, match=f"seed is a whole number .*not {type(bad).__name__}"):
            servesim.run(QUICK, small(10), seed=bad)
    with pytest.raises(ValueError, match="out is an empty path"):
        servesim.run(QUICK, small(10), out="")
    # The seed in the overrides and as an argument: the argument's silently won.
    with pytest.raises(ValueError, match=r"the seed is given twice \(overrides\['seed'\] = 1 and seed=2\)"):
        servesim.run(QUICK, {**small(10), "seed": 1}, seed=2)
    # A loaded scenario's seed gives way to the run's.
    assert (servesim.run(servesim.load(QUICK, small(10), seed=1), seed=2).summary_json
            == servesim.run(QUICK, small(10), seed=2).summary_json)


def test_bad_counts_and_override_keys_name_the_argument():
    # Negative counts raised OverflowError("can't convert negative int to unsigned").
    for call, says in [
        (lambda: servesim.evaluate(QUICK, small(10), seeds=-1), "seeds = -1: expected a whole number"),
        (lambda: servesim.evaluate(QUICK, small(10), worst=2**40), "worst = 1099511627776"),
        (lambda: servesim.capacity(QUICK, small(10), replicas=-2), "replicas = -2"),
        (lambda: servesim.calibrate(QUICK, "m.csv", max_evals=-5), "max_evals = -5"),
        # In range for the type but not for the call: the same ValueError, not a
        # ScenarioError (the scenario is fine).
        (lambda: servesim.evaluate(QUICK, small(10), seeds=0), r"seeds must be in \[1, 100,000\], got 0"),
        (lambda: servesim.evaluate(QUICK, small(10), worst=1001), "worst=1001: at most 1000"),
        (lambda: servesim.capacity(QUICK, small(10), replicas=0), r"replicas must be in \[1, 10,000\], got 0"),
        (lambda: servesim.capacity(QUICK, small(10), tolerance=0.0), "the tolerance must be in"),
        (lambda: servesim.capacity(QUICK, small(10), served_share=1.5), "the served share must be in"),
        (lambda: servesim.capacity(QUICK, small(10), group="a", each_group=True), "give group or each_group, not both"),
    ]:
        with pytest.raises(ValueError, match=says):
            call()
    with pytest.raises(ValueError, match="scenario is empty: give a scenario file's path"):
        servesim.run(" ")
    # A policy that is not callable is named before the run, not at its first call.
    for call, says in [
        (lambda: servesim.run(QUICK, small(10), routing=5), r"routing is a function .* not int \(5\)"),
        (lambda: servesim.run(QUICK, small(10), summary_hook="x"), r"summary_hook is .* not str \('x'\)"),
        (lambda: servesim.evaluate(QUICK, small(10), admission=[1]), r"admission is .* not list"),
        (lambda: sweep(QUICK, [small(10)], backend="process", queue_order=1.5), r"queue_order is .* not float"),
    ]:
        with pytest.raises(TypeError, match=says):
            call()
    with pytest.raises(TypeError, match="override keys are field paths .* not int"):
        servesim.run(QUICK, overrides={1: 2})
    # A count or weight of another type is named ("'str' object cannot be interpreted as an
    # integer" and "must be real number, not str" named none).
    for call, says in [
        (lambda: servesim.evaluate(QUICK, small(10), seeds="2"), r"seeds is a whole number from 0 to 4,294,967,295, not str \('2'\)"),
        (lambda: servesim.evaluate(QUICK, small(10), worst=True), r"worst is a whole number .* not bool \(True\)"),
        (lambda: servesim.capacity(QUICK, small(10), replicas=2.0), r"replicas is a whole number .* not float \(2.0\)"),
        (lambda: servesim.evaluate(QUICK, small(10), weights={"ttft_p99": "1"}), r"the weight of ttft_p99 is a number ≥ 0, not str \('1'\)"),
        # A list said "cannot convert dictionary update sequence element #0 to a sequence".
        (lambda: servesim.evaluate(QUICK, small(10), weights=[1, 2]), r"weights maps each objective to its weight, .* not list"),
    ]:
        with pytest.raises(TypeError, match=says):
            call()
    # jobs=0 ran on one thread (Ray given num_cpus=0 waited for ever), as --jobs 0 did.
    for call in (
        lambda: servesim.evaluate(QUICK, small(10), jobs=0),
        lambda: servesim.capacity(QUICK, small(10), jobs=0),
        lambda: sweep(QUICK, [small(10)], backend="process", jobs=0),
    ):
        with pytest.raises(ValueError, match="jobs = 0: 0 threads cannot run anything"):
            call()
    with pytest.raises(ValueError, match="jobs = -2: expected a whole number from 1 to"):
        servesim.evaluate(QUICK, small(10), jobs=-2)
    with pytest.raises(TypeError, match=r"jobs is a whole number .* not float \(1.5\)"):
        sweep(QUICK, [small(10)], backend="process", jobs=1.5)
    # Python's NaN reaches the scenario's own check (it did not parse as RON).
    with pytest.raises(servesim.ScenarioError, match="horizon_s: must be a finite number > 0, got NaN"):
        servesim.validate(QUICK, overrides={"horizon_s": float("nan")})


def test_evaluate_returns_the_objectives_of_the_run_and_the_cli_s_json(tmp_path):
    e = servesim.evaluate(QUICK, small(200), seed=2, weights={"fairness": 0.0})
    s = servesim.run(QUICK, small(200), seed=2, requests=False).summary
    # Each objective from the run's own summary, by its definition (docs/evaluate.md).
    f = e["fitness"]
    assert f["ttft_p99"] == 1.0 / (1.0 + s["ttft_ms"]["p99"] / 100.0)
    assert f["itl_p99"] == 1.0 / (1.0 + s["itl_ms"]["p99"] / 10.0)
    assert f["e2e_p99"] == 1.0 / (1.0 + s["e2e_ms"]["p99"] / 1000.0)
    assert f["served"] == s["requests"]["completed"] / s["requests"]["injected"]
    rest = [k for k in f if k != "fairness"]
    assert abs(e["combined"] - sum(f[k] for k in rest) / len(rest) * f["served"]) < 1e-12
    assert e["overall"]["injected"] == s["requests"]["injected"]
    assert e["anomalies"] == s["anomalies"]
    assert e["checks"]["accounted"] and e["checks"]["flags"] == []
    assert e["trace"]["text"].startswith("Evaluation of quickstart over 1 seed")
    # The CLI prints the same JSON; the same candidate twice, and on two threads, the same.
    cli_out = subprocess.run(
        [cli(), "evaluate", QUICK, "--set", "workload.num_requests=200", "--set", "seed=2",
         "--weight", "fairness=0", "--format", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert e == json.loads(cli_out)
    two = servesim.evaluate(QUICK, small(200), seeds=3, jobs=2)
    assert two == servesim.evaluate(QUICK, small(200), seeds=3, jobs=1)
    assert two["seeds"] == [two["seeds"][0] + k for k in range(3)]
    with pytest.raises(servesim.ScenarioError, match="no objective"):
        servesim.evaluate(QUICK, small(20), weights={"speed": 1.0})
    # Overrides by the name run takes, or by their earlier name; not both.
    named = servesim.evaluate(QUICK, overrides=small(20))
    assert named == servesim.evaluate(QUICK, params=small(20))
    assert named["overall"]["injected"] == 20
    with pytest.raises(TypeError, match="overrides or params"):
        servesim.evaluate(QUICK, small(20), params=small(20))


def test_a_sweep_gives_the_rows_of_the_points_run_one_by_one():
    points = [
        {"workload.num_requests": 100, "policies.routing": f'"{p}"'}
        for p in ("round_robin", "least_loaded", "random")
    ]
    rows = sweep(QUICK, points, jobs=2, seed=1)
    assert rows == [run_point(QUICK, p, seed=1) for p in points]
    assert set(METRICS) <= set(rows[0])
    assert rows[0]["policies.routing"] == '"round_robin"'


def test_a_directory_named_ray_is_not_taken_for_ray(monkeypatch):
    # Without Ray, Python run in /tmp imported Ray's temporary directory /tmp/ray as an empty
    # namespace package, and the sweep stopped on "module 'ray' has no attribute ...".
    import types

    monkeypatch.setitem(sys.modules, "ray", types.ModuleType("ray"))
    points = [{"workload.num_requests": 20}]
    assert sweep(QUICK, points, jobs=1, seed=1) == [run_point(QUICK, points[0], seed=1)]
    with pytest.raises(RuntimeError, match="backend='ray' but Ray is not installed"):
        sweep(QUICK, points, backend="ray", jobs=1)


def test_a_sweep_takes_a_loaded_scenario_and_reports_a_bad_point_as_the_run_does():
    base = servesim.load(QUICK, small(40), seed=4)
    points = [{"policies.routing": '"least_loaded"'}, {"policies.routing": '"random"'}]
    rows = sweep(base, points, backend="process", jobs=2)
    assert rows == [run_point(base, p) for p in points]
    # Each point starts from the loaded scenario's overrides and seed.
    for row, p in zip(rows, points):
        alone = servesim.run(QUICK, {**small(40), **p}, seed=4).summary
        assert row["requests.completed"] == alone["requests"]["completed"] == 40
        assert row["ttft_ms.p99"] == alone["ttft_ms"]["p99"]
    # A worker's ScenarioError came back as "PicklingError: Can't pickle <class
    # '_native.ScenarioError'>": the exception is now the run's own.
    with pytest.raises(servesim.ScenarioError, match="workload.nope: unknown field"):
        sweep(QUICK, [{"workload.nope": 1}], backend="process", jobs=1)
    with pytest.raises(ValueError, match='backend is "auto", "ray" or "process", not \'nope\''):
        sweep(QUICK, points, backend="nope")
    with pytest.raises(TypeError, match="points is a list of dicts"):
        sweep(QUICK, {"policies.routing": '"random"'}, backend="process")
    # A lambda cannot travel to a worker: it failed as a point ran, with pickle's
    # "AttributeError: Can't pickle local object"; it is named before any worker starts.
    with pytest.raises(TypeError, match=r"routing= cannot be sent to the process backend's workers .* top level of a module"):
        sweep(QUICK, points, backend="process", routing=lambda request, instances: 0)


@pytest.mark.parametrize("call", [
    "run(QUICK, {'workload.num_requests': 10**9}, requests=False, out=OUT)",
    "evaluate(QUICK, {'workload.num_requests': 10**9}, seeds=2, jobs=2)",
    "capacity(QUICK, {'workload.num_requests': 10**9}, replicas=1, jobs=1)",
    "calibrate(SERVER, MEASURED, max_evals=400)",
])
def test_ctrl_c_stops_a_long_call_and_writes_nothing(tmp_path, call):
    # Python's SIGINT handler only sets a flag that Python code checks: a run without Python
    # policies ignored Ctrl-C until it ended (for a billion requests, hours).
    server, measured = tmp_path / "server.ron", tmp_path / "measured.csv"
    if call.startswith("calibrate"):
        # ~5,000 measured requests: 400 replays take ~15 s.
        server.write_text(SERVER.replace("(rate_per_s: 12.0, duration_s: 30.0)",
                                         "(rate_per_s: 8.0, duration_s: 600.0)"))
        rows = servesim.run(str(server)).requests
        rows[["arrival_us", "input_tokens", "output_tokens", "ttft_ms", "e2e_ms"]].to_csv(
            measured, index=False)
    script = (
        "import signal, servesim\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        f"QUICK, OUT = {QUICK!r}, {str(tmp_path / 'out')!r}\n"
        f"SERVER, MEASURED = {str(server)!r}, {str(measured)!r}\n"
        "print('started', flush=True)\n"
        "try:\n"
        f"    servesim.{call}\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "started\n"
        time.sleep(1.5)  # into the simulation
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=120)
    finally:
        p.kill()
    assert out == "interrupted\n"
    assert p.returncode == 0
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


RELEASE = '(vllm: "{}")'


def newer(release):
    return f"vLLM {release} is newer than the releases servesim's serving path was taken from"


def test_load_validate_and_run_issue_what_the_cli_warns_of():
    import warnings

    ov = {**small(50), "cluster.groups[0].engine": RELEASE.format("0.18.0")}
    for call in (servesim.validate, servesim.load):
        with pytest.warns(servesim.ServesimWarning, match=newer("0.18.0")):
            call(QUICK, ov)
    # evaluate and capacity said nothing of it, as `servesim evaluate` did not.
    with pytest.warns(servesim.ServesimWarning, match=newer("0.18.0")):
        servesim.evaluate(QUICK, ov)
    with pytest.warns(servesim.ServesimWarning, match=newer("0.18.0")):
        servesim.capacity(QUICK, {**ov, **small(200)}, replicas=1, tolerance=0.2)
    for command in (["evaluate"], ["capacity", "--replicas", "1", "--tolerance", "0.2"]):
        err = subprocess.run(
            [cli(), *command, QUICK, "--set", "workload.num_requests=200",
             "--set", "cluster.groups[0].engine=" + RELEASE.format("0.18.0")],
            check=True, capture_output=True, text=True,
        ).stderr
        assert "warning: " in err and newer("0.18.0") in err, (command, err)
    with pytest.warns(servesim.ServesimWarning, match=newer("0.18.0")):
        r = servesim.run(QUICK, overrides=ov, seed=1)
    assert [w for w in r.input_warnings if newer("0.18.0") in w], r.input_warnings
    # The CLI says the same on stderr.
    err = subprocess.run(
        [cli(), "validate", QUICK, "--set", "cluster.groups[0].engine=" + RELEASE.format("0.18.0")],
        check=True, capture_output=True, text=True,
    ).stderr
    assert "warning: " + r.input_warnings[0] in err
    # A scenario the CLI has nothing to say of gives no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error", servesim.ServesimWarning)
        assert servesim.run(QUICK, overrides=small(50), seed=1).input_warnings == []
        servesim.validate(QUICK, small(50))


@pytest.mark.parametrize("backend", ["process", "ray"])
def test_a_sweep_issues_each_input_warning_once(backend):
    if backend == "ray":
        pytest.importorskip("ray.util")  # not a directory named ray
    import warnings

    key = "cluster.groups[0].engine"
    releases = ["0.15.1", "0.18.0", "0.18.0", "0.19.2"]
    points = [{**small(30), key: RELEASE.format(r)} for r in releases]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", servesim.ServesimWarning)
        rows = sweep(QUICK, points, backend=backend, jobs=2, seed=1)
    said = [str(w.message) for w in seen if w.category is servesim.ServesimWarning]
    # One warning per distinct message, naming the points that have it (not every one does;
    # equal points once).
    assert len(said) == 2, said
    assert said[0].startswith(
        f"at workload.num_requests=30, {key}={RELEASE.format('0.18.0')}: {key}.vllm: "
        + newer("0.18.0")
    ), said
    assert newer("0.19.2") in said[1], said
    assert len(rows) == 4
    # A warning every point has is said plainly, once.
    ov = {key: RELEASE.format("0.20.0")}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", servesim.ServesimWarning)
        sweep(QUICK, [{**small(20), **ov}, {**small(30), **ov}], backend=backend, jobs=2)
    said = [str(w.message) for w in seen if w.category is servesim.ServesimWarning]
    assert len(said) == 1 and said[0].startswith(f"{key}.vllm: " + newer("0.20.0")), said


def send_to_last(request, instances):
    """A routing policy of one's own (module-level: the process pool imports it, Ray gets it by value)."""
    return [i[0] for i in instances if i[6]][-1]


def busy_seconds(state):
    """A summary system of one's own: each instance's busy time and the busiest."""
    busy = [i["busy_s"] for i in state["instances"]]
    return {"busy_s": busy, "busiest_instance": max(range(len(busy)), key=busy.__getitem__)}


def test_a_custom_policy_and_summary_system_work_in_a_run_and_in_a_sweep():
    ov = {"workload.num_requests": 200}
    r = servesim.run(QUICK, overrides=ov, seed=3, routing=send_to_last, summary_hook=busy_seconds)
    extras = r.summary["extras"]
    assert extras["busiest_instance"] == 1
    assert extras["busy_s"][0] == 0.0 and extras["busy_s"][1] > 0.0
    assert set(r.requests["instance"]) == {1}
    points = [ov, {**ov, "cluster.groups[0].count": 3}]
    rows = sweep(QUICK, points, jobs=2, seed=3, routing=send_to_last, summary_hook=busy_seconds)
    assert [row["extras.busiest_instance"] for row in rows] == [1, 2]
    assert rows[0]["requests.completed"] == 200


def test_a_summary_hook_that_returns_no_dict_stops_the_run():
    with pytest.raises(servesim.RunError, match="must return a dict"):
        servesim.run(QUICK, overrides=small(10), summary_hook=lambda state: [1, 2])


def test_capacity_and_plan_give_what_the_cli_prints(tmp_path):
    cap = str(ROOT / "scenarios" / "capacity.ron")
    args = ["--set", "workload.num_requests=1500", "--set", "cluster.groups[0].count=2"]
    cli_out = subprocess.run(
        [cli(), "capacity", cap, *args, "--replicas", "2", "--format", "json", "-q"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    mine = servesim.capacity(
        cap, {"workload.num_requests": 1500, "cluster.groups[0].count": 2}, replicas=2
    )
    import json

    assert mine == json.loads(cli_out)
    assert mine["limits"][0]["criterion"] == "sustained"
    plan_file = str(ROOT / "scenarios" / "plan.ron")
    small_plan = {
        "workload.num_requests": 800,
        "plan.gpus": '["H100"]',
        "plan.tp": "[4]",
        "plan.pp": "[1]",
        "plan.max_num_seqs": "[256]",
        "plan.max_num_batched_tokens": "[8192]",
        "plan.routing": '["round_robin"]',
        "plan.max_instances": 8,
    }
    p = servesim.plan(plan_file, small_plan)
    assert len(p["outcomes"]) == 1
    assert p["outcomes"][0]["status"] in ("best", "infeasible")
    # What the CLI's plan warns of, once: the release is newer than modelled at TP 4.
    release = {**small_plan, "cluster.groups[0].engine": RELEASE.format("0.18.0")}
    with pytest.warns(servesim.ServesimWarning, match=newer("0.18.0")) as seen:
        servesim.plan(plan_file, release)
    said = [str(w.message) for w in seen if w.category is servesim.ServesimWarning]
    assert len(said) == 1 and "PR #34299" in said[0], said
    err = subprocess.run(
        [cli(), "plan", plan_file, *(f"--set={k}={v}" for k, v in release.items()), "-q"],
        capture_output=True, text=True,
    ).stderr
    assert "warning: " + said[0] in err, err
    with pytest.raises(servesim.ScenarioError):
        servesim.capacity(QUICK, {"workload.clients[0].arrival": "AllAtZero(count: 10)"})
    # One group alone (--group): the CLI's answer, naming the group; an unknown group refused.
    alone = servesim.capacity(
        cap, {"workload.num_requests": 1500, "cluster.groups[0].count": 2}, replicas=1,
        group="70b-tp4",
    )
    cli_alone = subprocess.run(
        [cli(), "capacity", cap, *args, "--replicas", "1", "--group", "70b-tp4",
         "--format", "json", "-q"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert alone == json.loads(cli_alone)
    assert alone["group"] == "70b-tp4"
    with pytest.raises(servesim.ScenarioError, match="did you mean"):
        servesim.capacity(cap, group="70b-tp5")
    # Arguments of the wrong type are named (PyO3 said "must be real number, not str" and
    # "'int' object is not an instance of 'str'").
    for given, said in (
        ({"group": 0}, "group is an instance group's name (a str) or None, not int (0)"),
        ({"tolerance": "0.02"}, "tolerance is a fraction or None, not str ('0.02')"),
        ({"served_share": True}, "served_share is a fraction or None, not bool (True)"),
    ):
        with pytest.raises(TypeError) as e:
            servesim.capacity(cap, **given)
        assert str(e.value) == said
    with pytest.raises(TypeError, match="timeout_s is a number of seconds or None, not str"):
        servesim.check_real(QUICK, "measured.json", timeout_s="5")
    # Every group alone (--each-group): a one-group deployment has nothing to split, and says so.
    each = servesim.capacity(
        cap, {"workload.num_requests": 1500, "cluster.groups[0].count": 2}, replicas=1,
        each_group=True,
    )
    assert "groups" not in each
    assert each["limits"] == alone["limits"]
    assert any("its capacity alone is the deployment's" in w for w in each["warnings"])
    with pytest.raises(ValueError, match="not both"):
        servesim.capacity(cap, group="70b-tp4", each_group=True)


TENANTS = str(ROOT / "scenarios" / "multi-tenant.ron")


class LeastLoaded:
    """A port of the built-in least_loaded router: fewest queued + running + in-flight
    requests, ties in turn (the next index after the last pick, wrapping)."""

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


class TokenBucket:
    """A port of the built-in token_bucket admission: a request costs its prompt tokens."""

    def __init__(self, capacity, refill_per_s):
        self.capacity, self.refill_per_us = capacity, refill_per_s / 1e6
        self.tokens, self.last = capacity, 0

    def __call__(self, request, instances):
        elapsed = float(request.now_us - self.last)
        self.tokens = min(self.tokens + elapsed * self.refill_per_us, self.capacity)
        self.last = request.now_us
        if self.tokens >= request.input_tokens:
            self.tokens -= request.input_tokens
            return True
        return "token_bucket"


def test_python_ports_of_built_in_policies_give_byte_identical_results():
    def both(overrides, **policies):
        rust = servesim.run(TENANTS, overrides)
        mine = servesim.run(TENANTS, overrides, **policies)
        assert mine.summary_json == rust.summary_json
        assert mine.requests_csv == rust.requests_csv
        return rust.summary

    # Routing: least_loaded, on the typed views.
    both({"policies.routing": '"least_loaded"'}, routing=LeastLoaded())
    # Admission: a token bucket that rejects part of the load.
    bucket = {"policies.admission": '"token_bucket"',
              "policies.admission_params": '{"capacity": 20000.0, "refill_per_s": 30000.0}'}
    s = both(bucket, admission=TokenBucket(20000.0, 30000.0))
    assert 0 < s["rejections"]["token_bucket"] < s["requests"]["injected"]
    # Priority (slo_based with an age weight) under a priority queue order.
    slo = {"policies.scheduling": '"priority_fcfs"', "policies.priority": '"slo_based"',
           "policies.priority_params": '{"age_weight": 0.5}'}
    both(slo, priority=lambda r, class_priority, age_s: class_priority + 0.5 * age_s)
    # Queue order: shortest prompt first.
    both({"policies.scheduling": '"sjf"'},
         queue_order=lambda r, arrival_s, priority: (float(r.input_tokens), arrival_s))


def test_the_views_carry_names_sessions_and_prefixes():
    seen = []

    def router(request, instances):
        seen.append((request, instances))
        return min((i for i in instances if i.routable), key=lambda i: (i.load, i.index)).index

    servesim.run(TENANTS, {"workload.num_requests": 200}, routing=router)
    r, insts = seen[-1]
    assert r.tenant_name in ("acme", "globex", "initech")
    assert r.slo_class_name in ("interactive", "batch")
    assert tuple(r[k] for k in range(7)) == (
        r.id, r.input_tokens, r.output_tokens, r.tenant, r.slo_class, r.priority, r.now_us)
    assert [i.index for i in insts] == [0, 1, 2, 3]
    assert all(i.free_blocks == i.kv_total_blocks - i.kv_used_blocks for i in insts)
    assert all(i.load == i.queue_depth + i.batch_size + i.in_flight for i in insts)
    assert all(i.cached_blocks is None for i in insts)
    # The chat tenant shares a 512-token system prompt among 4 variants: 4 prefix ids.
    chat = {q.prefix_id for q, _ in seen if q.tenant_name == "acme"}
    assert len(chat) == 4 and all(q.shared_prefix_tokens == 512 for q, _ in seen
                                  if q.tenant_name == "acme")
    # A router that reads caches sees the blocks each instance holds of the request.
    cached = []

    def reader(request, instances):
        cached.append(max(i.cached_blocks for i in instances))
        return router(request, instances)

    reader.reads_cache = True
    servesim.run(TENANTS, {"workload.num_requests": 200}, routing=reader)
    assert max(cached) >= 512 // 16
    # An admission policy's reason is counted; an exception stops the run.
    r = servesim.run(TENANTS, {"workload.num_requests": 100},
                     admission=lambda q, i: q.tenant_name != "globex" or "no batch today")
    assert r.summary["rejections"]["no batch today"] > 0
    with pytest.raises(ZeroDivisionError):
        servesim.run(TENANTS, {"workload.num_requests": 50, "policies.scheduling": '"priority_fcfs"'},
                     priority=lambda q, c, a: 1 / 0)


def test_evaluate_takes_python_policies_each_seed_with_its_own_copy():
    rust = servesim.evaluate(TENANTS, {"policies.routing": '"least_loaded"'}, seeds=3, jobs=2)
    mine = servesim.evaluate(TENANTS, seeds=3, jobs=2, routing=LeastLoaded())
    assert mine == rust
    with pytest.raises(ZeroDivisionError):
        servesim.evaluate(TENANTS, {"workload.num_requests": 50}, routing=lambda r, i: 1 / 0)


def shortest_first(request, arrival_s, priority):
    """A port of the built-in sjf queue order (module-level: the process pool imports it)."""
    return (float(request.input_tokens), arrival_s)


def test_python_policies_of_each_family_work_in_a_sweep():
    points = [{"workload.num_requests": n} for n in (300, 600)]
    mine = sweep(TENANTS, points, jobs=2, seed=5, routing=LeastLoaded(),
                 admission=TokenBucket(20000.0, 30000.0), queue_order=shortest_first)
    builtin = {"policies.routing": '"least_loaded"', "policies.admission": '"token_bucket"',
               "policies.admission_params": '{"capacity": 20000.0, "refill_per_s": 30000.0}',
               "policies.scheduling": '"sjf"'}
    rust = sweep(TENANTS, [{**p, **builtin} for p in points], jobs=2, seed=5)
    assert [{m: r[m] for m in METRICS} for r in mine] == [{m: r[m] for m in METRICS} for r in rust]
    assert mine[0]["requests.rejected"] > 0


def test_energy_accounts_reach_python(tmp_path):
    """scenarios/energy.ron: the requests frame has energy_j, the summary its energy block,
    and the requests' shares add up to the steps' energy (to each row's millijoule)."""
    energy = str(ROOT / "scenarios" / "energy.ron")
    r = servesim.run(energy, {"workload.num_requests": 200})
    e = r.summary["energy"]
    df = r.requests
    assert "energy_j" in df.columns
    assert abs(df["energy_j"].sum() - e["step_kwh"] * 3.6e6) <= 0.0005 * len(df)
    assert e["facility_kwh"] == pytest.approx(1.3 * e["gpu_kwh"])
    rows = sweep(energy, [{"workload.num_requests": 100}], backend="process", jobs=1)
    assert rows[0]["energy.facility_kwh"] > 0
    # Without an energy block the column and the block are absent.
    plain = servesim.run(QUICK, small(50))
    assert "energy_j" not in plain.requests.columns
    assert "energy" not in plain.summary


def test_flow_control_reaches_python():
    """scenarios/flow-control.ron: the summary has the gateway's bands, the shed requests are
    rejected rows with the gateway's reasons, and `flow_control=None` turns the gateway off."""
    fc = str(ROOT / "scenarios" / "flow-control.ron")
    r = servesim.run(fc)
    bands = r.summary["flow_control"]["bands"]
    assert [b["priority"] for b in bands] == [1, 0]
    shed = sum(b["shed_full"] + b["shed_expired"] for b in bands)
    assert shed > 0
    assert (r.requests["state"] == "rejected").sum() == shed
    reasons = r.summary["rejections"]
    assert set(reasons) == {"gateway_band_full", "gateway_wait_expired"}
    off = servesim.run(fc, {"flow_control": "None"})
    assert "flow_control" not in off.summary
    assert off.summary["requests"]["rejected"] == 0


def test_faults_reach_python():
    """scenarios/faults.ron: the summary's straggler with its SLO spans; every request is
    in one span."""
    r = servesim.run(str(ROOT / "scenarios" / "faults.ron"), {"workload.duration_s": 90.0})
    st = r.summary["faults"]["stragglers"][0]
    assert (st["instance"], st["slowdown"]) == (1, 4.0)
    assert st["steps_slowed"] > 0
    spans = [st[k]["arrived"] for k in ("before", "during", "after")]
    assert sum(spans) == len(r.requests)


def test_crashes_reach_python():
    """scenarios/crashes.ron cut to 90 s: the crash's summary, `failed` rows with Fail and a
    `retries` column that counts the requests sent again with Retry."""
    path = str(ROOT / "scenarios" / "crashes.ron")
    retry = servesim.run(path, {"workload.duration_s": 90.0})
    c = retry.summary["faults"]["crashes"]
    assert (c["crashes"], c["policy"], c["events"][0]["instance"]) == (1, "retry", 1)
    assert c["lost"] > 0 and c["failed"] == 0
    assert int((retry.requests["retries"] > 0).sum()) == c["completed_after_retry"]
    fail = servesim.run(path, {"workload.duration_s": 90.0, "faults.on_crash": "Fail"})
    failed = fail.requests[fail.requests["state"] == "failed"]
    assert len(failed) == fail.summary["requests"]["failed"] == fail.summary["faults"]["crashes"]["lost"]
    assert set(failed["instance"]) == {1}


def test_speculative_decoding_reaches_python():
    """scenarios/spec-decode.ron cut to 30 s: the summary's per-group acceptance, and the
    `drafted_tokens` / `accepted_tokens` columns that add up to it."""
    r = servesim.run(str(ROOT / "scenarios" / "spec-decode.ron"), {"workload.duration_s": 30.0})
    (sp,) = r.summary["speculative"]
    assert (sp["group"], sp["method"], sp["num_speculative_tokens"]) == ("eagle3", "eagle3", 3)
    eagle = r.requests[r.requests["instance"].isin([2, 3])]
    assert int(eagle["accepted_tokens"].sum()) == sp["accepted"]
    assert int(eagle["drafted_tokens"].sum()) == sp["drafted"]
    plain = r.requests[r.requests["instance"].isin([0, 1])]
    assert int(plain["drafted_tokens"].sum()) == 0
    assert eagle["mean_itl_ms"].mean() < plain["mean_itl_ms"].mean()


def test_kv_hierarchy_reaches_python():
    """scenarios/kv-hierarchy.ron cut to 400 requests: per-tier hit rates that sum to the
    prefix hit rate, and a shared store that serves prefixes written by other instances."""
    r = servesim.run(str(ROOT / "scenarios" / "kv-hierarchy.ron"), {"workload.num_requests": 400})
    kv = r.summary["kv"]
    store, nvme = kv["store"], kv["nvme"]
    assert store["write"] == "write_through"
    assert 0 < store["cross_instance_loaded_blocks"] <= store["loaded_blocks"]
    tiers = kv["gpu_hit_rate"] + kv["cpu_hit_rate"] + nvme["hit_rate"] + store["hit_rate"]
    assert abs(tiers - kv["hit_rate"]) < 1e-9
    assert len(r.requests) == 400


def test_topology_reaches_python():
    """scenarios/topology.ron cut to 300 requests: where each instance sits, and a thinner
    rack uplink slows the KV transfers that cross it."""
    path = str(ROOT / "scenarios" / "topology.ron")
    wide = servesim.run(path, {"workload.num_requests": 300})
    thin = servesim.run(
        path,
        {"workload.num_requests": 300, "cluster.topology.rack_uplink_gb_per_s": 10.0},
    )
    net = wide.summary["network"]
    assert [p["node"] for p in net["instances"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert {l["level"] for l in net["levels"]} == {"nvlink", "nic", "rack"}
    mean = lambda r: r.summary["disaggregation"]["transfer_ms"]["mean"]
    assert mean(thin) > 2 * mean(wide)
    assert thin.requests["kv_transfer_ms"].mean() > wide.requests["kv_transfer_ms"].mean()


def test_lora_reaches_python():
    """scenarios/lora.ron cut to 400 requests: each request's adapter, and with one GPU slot
    per server requests for other adapters wait longer than with four."""
    path = str(ROOT / "scenarios" / "lora.ron")
    four = servesim.run(path, {"workload.num_requests": 400})
    one = servesim.run(
        path,
        {"workload.num_requests": 400, "cluster.groups[0].lora.max_loras": 1},
    )
    lora = four.summary["lora"]
    assert [a["name"] for a in lora["adapters"]][:2] == ["lora0", "lora1"]
    assert lora["groups"][0]["max_loras"] == 4
    named = four.requests["adapter"].fillna("")
    assert (named == "lora0").sum() > (named == "lora31").sum()
    assert (named == "").sum() > 0  # the base-model client
    ttft = lambda r: r.requests[r.requests["adapter"].fillna("") != ""]["ttft_ms"].mean()
    assert ttft(one) > 2 * ttft(four)


def test_expert_parallelism_reaches_python():
    """scenarios/moe-wide-ep.ron cut to 300 requests at 24 req/s: every instance counts its
    16 GPUs, and vLLM's default all-gather backend makes prefill across the two nodes
    slower than DeepEP's high-throughput kernels."""
    path = str(ROOT / "scenarios" / "moe-wide-ep.ron")
    cut = {"workload.num_requests": 300, "workload.clients[0].rate_per_s": 24.0}
    deepep = servesim.run(path, cut)
    gather = servesim.run(
        path,
        {**cut, "cluster.groups[0].expert_parallel.all2all": "AllgatherReducescatter"},
    )
    assert [g["gpus_per_instance"] for g in deepep.summary["groups"]] == [16, 16]
    assert len(deepep.requests) == 300
    assert gather.requests["ttft_ms"].mean() > deepep.requests["ttft_ms"].mean()


def test_hybrid_attention_reaches_python():
    """scenarios/hybrid-attention.ron cut to 400 requests: Gemma-3's sliding-window layers
    keep only their window, so with vLLM's hybrid KV cache manager disabled every layer
    keeps every token, the servers hold fewer requests at once and preempt."""
    path = str(ROOT / "scenarios" / "hybrid-attention.ron")
    cut = {"workload.num_requests": 400}
    hybrid = servesim.run(path, cut)
    full = servesim.run(path, {**cut, "cluster.groups[0].disable_hybrid_kv_cache_manager": True})
    assert len(hybrid.requests) == 400
    # The CLI run of the same cut: 2 preemptions with the hybrid manager, 143 without.
    assert full.summary["preemptions"] > 20 * max(1, hybrid.summary["preemptions"])
    assert full.requests["ttft_ms"].mean() > 2 * hybrid.requests["ttft_ms"].mean()


def test_sliding_window_reaches_python(tmp_path):
    """scenarios/sliding-window.ron cut to 400 requests: every layer of Mistral-7B-v0.1
    slides over 4,096 tokens; the same config with "sliding_window": null (a model file
    given as an override) keeps every token, so its decodes of ~16,000-token documents
    read about four times the K and V."""
    path = str(ROOT / "scenarios" / "sliding-window.ron")
    config = json.loads((ROOT / "assets" / "models" / "mistral-7b-v0.1.json").read_text())
    config["sliding_window"] = None
    full_config = tmp_path / "mistral-full.json"
    full_config.write_text(json.dumps(config))
    cut = {"workload.num_requests": 400}
    window = servesim.run(path, cut)
    full = servesim.run(path, {**cut, "cluster.groups[0].model": f'"{full_config}"'})
    assert len(window.requests) == len(full.requests) == 400
    assert window.summary["preemptions"] == 0
    assert full.requests["mean_itl_ms"].mean() > 1.5 * window.requests["mean_itl_ms"].mean()


SERVER = """(seed: 11, cluster: (groups: [(kv_blocks: 8000, max_num_seqs: 64, max_num_batched_tokens: 1024,
    latency: Blackbox(alpha: [15000.0, 0.0, 0.0], beta: [6000.0, 25.0, 180.0]))]),
  workload: (clients: [(arrival: Staged(stages: [(rate_per_s: 1.0, duration_s: 60.0),
      (rate_per_s: 5.0, duration_s: 40.0), (rate_per_s: 12.0, duration_s: 30.0)]),
    input_tokens: Uniform(min: 64, max: 1500), output_tokens: Uniform(min: 8, max: 300))]))"""


def test_check_real_and_calibrate_give_what_the_cli_prints(tmp_path):
    # The server's own run is the measurement: replayed through the same server it is exact,
    # and both functions return the JSON the CLI prints, measured file and all.
    scenario = tmp_path / "server.ron"
    scenario.write_text(SERVER)
    rows = servesim.run(str(scenario)).requests
    measured = tmp_path / "measured.csv"
    rows.rename(columns={"mean_itl_ms": "itl_ms"})[
        ["arrival_us", "input_tokens", "output_tokens", "ttft_ms", "e2e_ms", "itl_ms"]
    ].to_csv(measured, index=False)
    report = servesim.check_real(str(scenario), str(measured))
    assert report["measured_requests"] == len(rows) > 300
    assert report["mean_ape_pct"] < 0.01
    cli_report = subprocess.run(
        [cli(), "check-real", str(scenario), str(measured), "--format", "json",
         "--out", str(tmp_path / "out")],
        check=True, capture_output=True, text=True,
    ).stdout
    assert report == json.loads(cli_report)
    fit = servesim.calibrate(str(scenario), str(measured), max_evals=24)
    cli_fit = subprocess.run(
        [cli(), "calibrate", str(scenario), str(measured), "--max-evals", "24", "--format", "json"],
        check=True, capture_output=True, text=True,
    ).stdout
    assert fit == json.loads(cli_fit)
    assert fit["ron"].startswith("latency: Blackbox(alpha: [")
    assert [name for name, _ in fit["params"]][:2] == ["alpha0_us", "beta0_us"]
    # What cannot be fitted is said before anything runs.
    few = tmp_path / "few.csv"
    few.write_text("\n".join(measured.read_text().splitlines()[:10]) + "\n")
    with pytest.raises(ValueError, match="9 measured requests are too few"):
        servesim.calibrate(str(scenario), str(few))
    with pytest.raises(ValueError, match="group 1: the scenario has 1 instance group"):
        servesim.calibrate(str(scenario), str(measured), group=1)
    with pytest.raises(ValueError, match="max_evals 7: a fit needs at least 8"):
        servesim.calibrate(str(scenario), str(measured), max_evals=7)
    with pytest.raises(ValueError, match='model="physics"'):
        servesim.calibrate(str(scenario), str(measured), model="physics")
    with pytest.raises(ValueError, match="no `output_tokens` column"):
        bad = tmp_path / "bad.csv"
        bad.write_text("arrival_s,input_tokens\n1,2\n")
        servesim.check_real(str(scenario), str(bad))
    # A benchmark that did not stream (each answer whole: E2E = TTFT) is refused by both.
    whole = tmp_path / "whole.csv"
    whole.write_text("arrival_s,input_tokens,output_tokens,ttft_ms,e2e_ms\n"
                     + "".join(f"{k}.0,200,20,300.0,300.0\n" for k in range(20)))
    for fn in (servesim.check_real, servesim.calibrate):
        with pytest.raises(ValueError, match="the benchmark did not stream"):
            fn(str(scenario), str(whole))
    # Our roofline needs the group's model and GPU: bad input said before anything runs, as
    # on the command line (exit 2; it was a run error).
    with pytest.raises(ValueError, match='model="roofline" fits a model computed from the group'):
        servesim.calibrate(str(scenario), str(measured), model="roofline", max_evals=8)


def test_check_real_replays_timeouts_as_the_cli_does(tmp_path):
    # A server that falls behind, its clients giving up after 20 s: the run's own
    # requests.csv (timed-out rows and all) replayed with the same timeout times out the
    # same requests; timeout_s is --timeout-s.
    scenario = tmp_path / "server.ron"
    scenario.write_text("""(seed: 5, cluster: (groups: [(kv_blocks: 4000, max_num_seqs: 1,
        latency: Blackbox(alpha: [2000.0, 0.0, 0.0], beta: [4000.0, 12.0, 90.0]))]),
      workload: (num_requests: 300, clients: [(rate_per_s: 6.0, timeout_s: 20.0,
        input_tokens: Uniform(min: 32, max: 900), output_tokens: Uniform(min: 2, max: 120))]),
      outputs: (dir: "out"))""")
    rows = servesim.run(str(scenario)).requests
    timed_out = int((rows["state"] == "timed_out").sum())
    assert 20 < timed_out < 250
    measured = tmp_path / "measured.csv"
    rows.to_csv(measured, index=False)
    report = servesim.check_real(str(scenario), str(measured), timeout_s=20.0)
    assert report["timeout_s"] == 20.0
    assert report["overall"]["timeouts"] == {"measured": timed_out, "simulated": timed_out}
    assert report["mean_ape_pct"] < 0.01
    cli_report = subprocess.run(
        [cli(), "check-real", str(scenario), str(measured), "--timeout-s", "20",
         "--format", "json", "--out", str(tmp_path / "cmp")],
        check=True, capture_output=True, text=True,
    ).stdout
    assert report == json.loads(cli_report)
    patient = servesim.check_real(str(scenario), str(measured))
    assert patient["timeout_s"] is None
    assert patient["overall"]["timeouts"]["simulated"] == 0
    with pytest.raises(ValueError, match="timeout_s: the client timeout must be"):
        servesim.check_real(str(scenario), str(measured), timeout_s=-1.0)
