//! Python bindings of servesim: run scenarios from Python, get the summary and the
//! per-request rows in memory, route requests with a Python function and add results of a
//! Python function to the summary; find a deployment's capacity and plan the cheapest one; compare a scenario with a measured run and calibrate its latency model. Every app is built by one [`ServesimApp`] ([`app`]), as the
//! command line's are, so an extension compiled into it works here as there.
//!
//! The Python package (`pysrc/servesim`) wraps these functions; see docs/python.md.

mod autoscale;
mod live;
mod policies;
mod registry;
mod stop;

use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use servesim::bevy_ecs;
use servesim::bevy_ecs::prelude::{Query, Res, ResMut, Resource};
use servesim::instance::{Instance, Limits, Scheduler};
use servesim::metrics::SharedBuffer;
use servesim::scenario::Scenario;
use servesim::{RunOptions, ServesimApp, SimTime};

// Named as `servesim` exports them, so that pickle finds them again: a sweep's worker
// process sends its exception back pickled ("_native" is no module one can import).
pyo3::create_exception!(
    servesim,
    ScenarioError,
    PyException,
    "The scenario is invalid: the message lists every problem with file, field and line:column."
);
pyo3::create_exception!(
    servesim,
    RunError,
    PyException,
    "The run could not complete (an output directory problem, an overloaded cluster, a router error...)."
);

/// The app builder every function here uses: the catalogue holds the policies registered
/// from Python ([`registry`]).
fn app() -> ServesimApp {
    registry::with_registered(ServesimApp::new())
}

/// A Python scaler given to `run` or `evaluate` (`autoscale=`), waiting for the set-up step
/// that puts it in place of the scenario's policy.
#[derive(Resource)]
struct PendingScaler {
    f: Py<PyAny>,
    failure: policies::Failure,
}

/// Installs a Python scaler for every app `app` builds: each build (each run, each seed)
/// gets its own `copy.deepcopy` of it, put in place while the run is set up — after the
/// scenario's policy is built and before the first evaluation is scheduled from it.
fn with_scaler(app: ServesimApp, scaler: Py<PyAny>, failure: policies::Failure) -> ServesimApp {
    use servesim::setup::{SetupAppExt, SetupStage};
    let scaler = Arc::new(scaler);
    app.with(move |app| {
        let copy = Python::attach(|py| -> PyResult<Py<PyAny>> {
            let deepcopy = py.import("copy")?.getattr("deepcopy")?;
            Ok(deepcopy.call1((scaler.bind(py),))?.unbind())
        });
        let f = match copy {
            Ok(f) => f,
            Err(e) => {
                if let Ok(mut slot) = failure.lock() {
                    slot.get_or_insert(e);
                }
                Python::attach(|py| scaler.clone_ref(py))
            }
        };
        app.insert_resource(PendingScaler {
            f,
            failure: failure.clone(),
        })
        .add_setup(SetupStage::Policies, install_scaler);
    })
}

fn install_scaler(
    app: &mut servesim::bevy_app::App,
    _: &servesim::setup::SetupCtx<'_>,
) -> Result<(), servesim::SimError> {
    use servesim::policy::{Active, family};
    let Some(p) = app.world_mut().remove_resource::<PendingScaler>() else {
        return Ok(());
    };
    let every = Python::attach(|py| autoscale::interval(py, &p.f)).map_err(|e| {
        servesim::SimError::Setup(servesim::SetupError::Policy {
            path: "autoscale".into(),
            message: e.to_string(),
        })
    })?;
    let groups = app
        .world()
        .resource::<servesim::labels::Labels>()
        .groups
        .clone();
    app.insert_resource(Active::<family::Autoscale>(Box::new(
        autoscale::PyScaler::new(p.f, every, groups, "python", p.failure),
    )));
    Ok(())
}

/// A scaler given as `autoscale=` fits the scenario: its `interval_s` is one, and some group
/// has `scaling` (as `servesim validate` refuses a scaling policy with nothing to scale).
fn check_scaler(py: Python<'_>, scaler: Option<&Py<PyAny>>, sc: &Scenario) -> PyResult<()> {
    let Some(scaler) = scaler else {
        return Ok(());
    };
    autoscale::interval(py, scaler)?;
    if sc.cluster.groups.iter().all(|g| g.scaling.is_none()) {
        return Err(ScenarioError::new_err(
            "autoscale= scales the groups with `scaling`, and no group of this scenario has it: give a group scaling: (min: 1, max: 8)",
        ));
    }
    Ok(())
}

/// Loads a scenario from a path, or from RON text when `is_text`.
fn load(
    app: &ServesimApp,
    source: &str,
    is_text: bool,
    overrides: &[(String, String)],
) -> PyResult<Scenario> {
    let loaded = if is_text {
        app.parse(source, "<text>", overrides)
    } else {
        app.load(source.as_ref(), overrides)
    };
    loaded.map_err(|mut e| {
        // The loader names overrides as the command line gives them (--set).
        if !overrides.is_empty() {
            let name = if is_text { "<text>" } else { source };
            e.file = format!("{name} (after the overrides)");
        }
        ScenarioError::new_err(e.to_string())
    })
}

/// Checks a scenario as `servesim validate` does; raises ScenarioError. Returns what
/// `validate` would warn of.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides))]
fn validate(
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
) -> PyResult<Vec<String>> {
    let builder = app();
    let sc = load(&builder, source, is_text, &overrides)?;
    Ok(builder.input_warnings(&sc))
}

/// What a summary hook sees when the run ends: every instance's counters.
fn finish_state(
    py: Python<'_>,
    instances: &Query<(&Instance, &Scheduler, &Limits)>,
    now: SimTime,
) -> PyResult<Py<PyAny>> {
    let state = PyDict::new(py);
    state.set_item("now_s", now.as_us() as f64 / 1e6)?;
    let mut rows: Vec<(u32, Bound<'_, PyDict>)> = Vec::new();
    for (inst, sched, limits) in instances {
        let d = PyDict::new(py);
        let c = &sched.counters;
        d.set_item("index", inst.index)?;
        d.set_item("group", inst.group)?;
        d.set_item("gpus", limits.tp * limits.pp)?;
        d.set_item("steps", c.steps)?;
        d.set_item("busy_s", c.busy.as_secs_f64())?;
        d.set_item("completed", c.completed)?;
        d.set_item("preemptions", c.preemptions)?;
        d.set_item("prefill_tokens", c.prefill_tokens)?;
        d.set_item("decode_tokens", c.decode_tokens)?;
        rows.push((inst.index, d));
    }
    rows.sort_by_key(|r| r.0);
    let list = PyList::new(py, rows.into_iter().map(|r| r.1))?;
    state.set_item("instances", list)?;
    Ok(state.into_any().unbind())
}

/// A Python summary hook and where its first error goes.
#[derive(Resource)]
struct SummaryHook {
    f: Arc<Py<PyAny>>,
    error: Arc<Mutex<Option<PyErr>>>,
}

/// A `SimFinish` system: calls the hook with every instance's counters and puts the dict it
/// returns (JSON values) in the summary's `extras`.
fn call_summary_hook(
    hook: Res<SummaryHook>,
    instances: Query<(&Instance, &Scheduler, &Limits)>,
    clock: Res<servesim::SimClock>,
    mut extras: ResMut<servesim::metrics::SummaryExtras>,
) {
    let out = Python::attach(|py| -> PyResult<String> {
        let state = finish_state(py, &instances, clock.now)?;
        let value = hook.f.bind(py).call1((state,))?;
        let json = py.import("json")?.getattr("dumps")?.call1((value,))?;
        json.extract()
    });
    let parsed = out.and_then(|text| match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(RunError::new_err(
            "the summary hook must return a dict of JSON values",
        )),
    });
    match parsed {
        Ok(map) => extras.0.extend(map),
        Err(e) => {
            if let Ok(mut slot) = hook.error.lock() {
                slot.get_or_insert(e);
            }
        }
    }
}

/// What `run` hands Python: `summary.json`, `requests.csv` (when kept), the input warnings,
/// and the note on an earlier run's files left in `out` (`run` prints it).
type RunAnswer = (String, Option<String>, Vec<String>, Option<String>);

/// Runs a scenario. Returns (summary.json text, requests.csv text or None, what `run` would
/// warn of before the run, what it left of an earlier run's files in `out`).
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, out=None, router=None, requests=true, summary_hook=None, admission=None, priority=None, queue_order=None, autoscale=None, max_wall_s=None))]
#[expect(
    clippy::too_many_arguments,
    reason = "the Python function's keyword arguments"
)]
fn run(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    out: Option<String>,
    router: Option<Py<PyAny>>,
    requests: bool,
    summary_hook: Option<Py<PyAny>>,
    admission: Option<Py<PyAny>>,
    priority: Option<Py<PyAny>>,
    queue_order: Option<Py<PyAny>>,
    autoscale: Option<Py<PyAny>>,
    max_wall_s: Option<f64>,
) -> PyResult<RunAnswer> {
    let stop = stop::Stop::new(max_wall_s)?;
    let error: policies::Failure = Arc::new(Mutex::new(None));
    let mut builder = app();
    let mut python_code = router.is_some()
        || summary_hook.is_some()
        || admission.is_some()
        || priority.is_some()
        || queue_order.is_some()
        || autoscale.is_some();
    let scaler = autoscale;
    let reads_cache = policies::reads_cache(py, router.as_ref());
    if let Some(hook) = summary_hook {
        let (hook, error) = (Arc::new(hook), error.clone());
        builder = builder.with(move |app| {
            app.insert_resource(SummaryHook {
                f: hook.clone(),
                error: error.clone(),
            })
            .add_systems(servesim::SimFinish, call_summary_hook);
        });
    }
    let mut sc = load(&builder, source, is_text, &overrides)?;
    check_scaler(py, scaler.as_ref(), &sc)?;
    if let Some(scaler) = scaler {
        builder = with_scaler(builder, scaler, error.clone());
    }
    let registered = registry::used_by(&sc);
    python_code |= registered;
    let given = policies::Given {
        router,
        admission,
        priority,
        queue_order,
        reads_cache,
    };
    let wants_live = given.wants_live(py);
    if wants_live || registered {
        // The policies' views of states, last steps and group sizes.
        builder = builder.with(live::plugin);
    }
    // A router that reads caches needs the instances' KV events (as a Rust one turns on).
    sc.outputs.kv_events |= reads_cache;
    let buffer = requests.then(SharedBuffer::default);
    let options = RunOptions {
        out_dir: out.map(Into::into),
        requests_csv_memory: buffer.clone(),
        interrupt: Some(stop.flag.clone()),
        ..Default::default()
    };
    let scope = registry::Scope::open();
    let built = builder.simulation(&sc, options);
    if let Some(e) = error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    let mut sim = built.map_err(|e| RunError::new_err(e.to_string()))?;
    // What `run` warns of before the run, from the simulation's own catalog (no other app).
    let mut warnings = servesim::loader::estimate::slow_inputs(
        &sc,
        sim.world().resource::<servesim::policy::Catalog>(),
    );
    if given.priority.is_some() && given.queue_order.is_none() {
        warnings.extend(servesim::loader::estimate::priority_unused(
            &sc,
            "priority=",
        ));
    }
    scope.bind(sim.world_mut());
    if wants_live || scope.wants_live() {
        live::every_tick(sim.world_mut());
    }
    given.install(sim.world_mut(), &error);
    let result = if python_code {
        stop.with_python(py, || sim.run_reporting())?
    } else {
        // No Python code runs during the simulation: let other Python threads go on, and
        // Ctrl-C stop it.
        stop.without_python(py, move || sim.run_reporting())?
    };
    if let Some(e) = error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    if let Some(e) = scope.failure() {
        return Err(e);
    }
    let (summary, files) = result.map_err(|e| RunError::new_err(e.to_string()))?;
    let json = serde_json_pretty(&summary);
    let csv = buffer.map(|b| {
        let bytes = b.0.lock().map(|v| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    });
    Ok((json, csv, warnings, files.earlier_note()))
}

/// `capacity` and `plan` run their simulations on threads without Python: a scenario that
/// names a policy registered from Python is refused with the way round it.
fn no_python_policies(sc: &Scenario, what: &str) -> PyResult<()> {
    if registry::used_by(sc) {
        let hint = if matches!(what, "capacity" | "plan") {
            "; search with servesim.evaluate or servesim.sweep over rates instead"
        } else {
            "; name a built-in policy of the same family for the replay"
        };
        return Err(ScenarioError::new_err(format!(
            "{what} runs the built-in (Rust) policies only, and this scenario names a policy registered from Python{hint}"
        )));
    }
    Ok(())
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// `servesim capacity`: its answer as the JSON `--format json` prints.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, replicas=3, tolerance=0.02, served_share=0.97, jobs=None, group=None, each_group=false))]
#[expect(
    clippy::too_many_arguments,
    reason = "the Python function's keyword arguments"
)]
fn capacity(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    replicas: u32,
    tolerance: f64,
    served_share: f64,
    jobs: Option<usize>,
    group: Option<String>,
    each_group: bool,
) -> PyResult<String> {
    use servesim::capacity::{
        Capacity, CapacityError, Settings, group_alone, search, search_each_group,
    };
    if each_group && group.is_some() {
        return Err(PyValueError::new_err("give group or each_group, not both"));
    }
    let app = app();
    let sc = load(&app, source, is_text, &overrides)?;
    no_python_policies(&sc, "capacity")?;
    let sc = match &group {
        Some(name) => group_alone(&sc, name).map_err(ScenarioError::new_err)?,
        None => sc,
    };
    let stop = stop::Stop::new(None)?;
    let settings = Settings {
        replicas,
        tolerance,
        served_share,
        jobs: jobs.unwrap_or_else(cores).max(1),
        interrupt: Some(stop.flag.clone()),
        runs_done: None,
        scale_now: None,
    };
    // The arguments' own ranges, before the scenario is read: a ValueError, as a negative
    // count's is.
    settings.check().map_err(PyValueError::new_err)?;
    let searched = stop.without_python(py, || {
        if each_group {
            search_each_group(&app, &sc, &settings)
        } else {
            search(&app, &sc, &settings)
        }
    })?;
    match searched {
        Ok(c) => serde_json::to_string_pretty(&Capacity { group, ..c })
            .map_err(|e| RunError::new_err(e.to_string())),
        Err(CapacityError::Input(e)) => Err(ScenarioError::new_err(e)),
        Err(e) => Err(RunError::new_err(e.to_string())),
    }
}

/// `servesim evaluate`: the evaluation as the JSON `--format json` prints.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, seeds=1, weights=std::collections::BTreeMap::new(), worst=5, jobs=None, router=None, admission=None, priority=None, queue_order=None, autoscale=None, max_wall_s=None))]
#[expect(
    clippy::too_many_arguments,
    reason = "the Python function's keyword arguments"
)]
fn evaluate(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    seeds: u32,
    weights: std::collections::BTreeMap<String, f64>,
    worst: u32,
    jobs: Option<usize>,
    router: Option<Py<PyAny>>,
    admission: Option<Py<PyAny>>,
    priority: Option<Py<PyAny>>,
    queue_order: Option<Py<PyAny>>,
    autoscale: Option<Py<PyAny>>,
    max_wall_s: Option<f64>,
) -> PyResult<(String, Vec<String>)> {
    use servesim::evaluate::{Settings, evaluate_with};
    let stop = stop::Stop::new(max_wall_s)?;
    let failure: policies::Failure = Arc::new(Mutex::new(None));
    let mut app = app();
    let scales = autoscale.is_some();
    let mut sc = load(&app, source, is_text, &overrides)?;
    check_scaler(py, autoscale.as_ref(), &sc)?;
    if let Some(scaler) = autoscale {
        app = with_scaler(app, scaler, failure.clone());
    }
    let given = policies::Given {
        reads_cache: policies::reads_cache(py, router.as_ref()),
        router,
        admission,
        priority,
        queue_order,
    };
    sc.outputs.kv_events |= given.reads_cache;
    let warnings: Vec<String> = if given.priority.is_some() && given.queue_order.is_none() {
        servesim::loader::estimate::priority_unused(&sc, "priority=")
            .into_iter()
            .collect()
    } else {
        Vec::new()
    };
    let registered = registry::used_by(&sc);
    let python_code = given.any() || scales || registered;
    let wants_live = given.wants_live(py);
    if wants_live || registered {
        app = app.with(live::plugin);
    }
    if worst > 1000 {
        return Err(PyValueError::new_err(format!(
            "worst={worst}: at most 1000"
        )));
    }
    servesim::evaluate::check_seeds(seeds).map_err(PyValueError::new_err)?;
    let settings = Settings {
        seeds,
        jobs: jobs.unwrap_or_else(cores).max(1),
        worst,
        weights,
        interrupt: Some(stop.flag.clone()),
    };
    // Each run gets its own copy of the policies, so seeds do not share their state and the
    // answer does not depend on the thread count.
    let scope = registry::Scope::open();
    let prepare = |_: u64, sim: &mut servesim::Simulation| -> Result<(), String> {
        scope.bind(sim.world_mut());
        if wants_live || scope.wants_live() {
            live::every_tick(sim.world_mut());
        }
        if !given.any() {
            return Ok(());
        }
        let fresh = Python::attach(|py| given.fresh(py)).map_err(|e| e.to_string())?;
        fresh.install(sim.world_mut(), &failure);
        Ok(())
    };
    let evaluated = if python_code {
        // Python policies run under the GIL anyway: one seed after the other on this thread,
        // which holds it (taking it on another thread for every call costs ~35 µs).
        let settings = Settings {
            jobs: 1,
            ..settings
        };
        stop.with_python(py, || evaluate_with(&app, &sc, &settings, &prepare))?
    } else {
        stop.without_python(py, || evaluate_with(&app, &sc, &settings, &prepare))?
    };
    if let Some(e) = failure.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    if let Some(e) = scope.failure() {
        return Err(e);
    }
    match evaluated {
        Ok(e) => serde_json::to_string_pretty(&e)
            .map(|json| (json, warnings))
            .map_err(|e| RunError::new_err(e.to_string())),
        Err(e) if e.starts_with("seed ") => Err(RunError::new_err(e)),
        Err(e) => Err(ScenarioError::new_err(e)),
    }
}

/// Runs (or configurations) by label, each with its warnings.
type Labelled = Vec<(String, Vec<String>)>;

/// `servesim plan` of a scenario file with a `plan` block: its answer as JSON, and each
/// configuration not excluded with what `validate` would warn of in it.
#[pyfunction]
#[pyo3(signature = (path, overrides, replicas=1, jobs=None))]
fn plan(
    py: Python<'_>,
    path: &str,
    overrides: Vec<(String, String)>,
    replicas: u32,
    jobs: Option<usize>,
) -> PyResult<(String, Labelled)> {
    use servesim::plan::{PlanError, Settings, Status, search};
    servesim::capacity::check_replicas(replicas).map_err(PyValueError::new_err)?;
    let app = app();
    let sc = load(&app, path, false, &overrides)?;
    no_python_policies(&sc, "plan")?;
    let stop = stop::Stop::new(None)?;
    let settings = Settings {
        replicas,
        jobs: jobs.unwrap_or_else(cores).max(1),
        interrupt: Some(stop.flag.clone()),
        ..Default::default()
    };
    let path = std::path::Path::new(path);
    match stop.without_python(py, || search(&app, path, &overrides, &sc, &settings))? {
        Ok(p) => {
            let found = p
                .outcomes
                .iter()
                .filter(|o| o.status != Status::Excluded)
                .map(|o| (o.config.label(), o.warnings.clone()))
                .collect();
            serde_json::to_string_pretty(&p)
                .map(|json| (json, found))
                .map_err(|e| RunError::new_err(e.to_string()))
        }
        Err(PlanError::Input(e)) => Err(ScenarioError::new_err(e)),
        Err(e) => Err(RunError::new_err(e.to_string())),
    }
}

/// Raises ValueError when `dir` holds another command's results than a policy search's
/// (`write_search`): `servesim report` reads one kind per directory.
#[pyfunction]
fn search_may_write(dir: &str) -> PyResult<()> {
    servesim::output::Results::Search
        .check_unmixed(std::path::Path::new(dir))
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

/// The warnings of many runs (each run's label and warnings), each said once, as `sweep` and
/// `plan` print them (`servesim::loader::estimate::said_once`).
#[pyfunction]
fn said_once(found: Labelled, what: &str, how: &str) -> Vec<String> {
    servesim::loader::estimate::said_once(&found, what, how)
}

/// Loads the measured run `check_real` and `calibrate` compare with (vLLM's benchmark JSON
/// or a CSV, as on the command line); raises ValueError naming the file and line.
fn measured(path: &str) -> PyResult<servesim::fidelity::Measurement> {
    servesim::fidelity::measured::load(std::path::Path::new(path))
        .map_err(pyo3::exceptions::PyValueError::new_err)
}

/// `servesim check-real`: the comparison as the JSON `--format json` prints.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, measured_path, timeout_s=None))]
fn check_real(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    measured_path: &str,
    timeout_s: Option<f64>,
) -> PyResult<String> {
    let app = app();
    let sc = load(&app, source, is_text, &overrides)?;
    no_python_policies(&sc, "check_real")?;
    let m = measured(measured_path)?;
    let timeout = servesim::fidelity::replay_timeout(&m, timeout_s)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("timeout_s: {e}")))?;
    let stop = stop::Stop::new(None)?;
    let app = stop.for_every_run(app);
    match stop.without_python(py, || {
        servesim::fidelity::check_real(&app, &sc, &m, timeout)
    })? {
        Ok(r) => serde_json::to_string_pretty(&r).map_err(|e| RunError::new_err(e.to_string())),
        Err(e) => Err(RunError::new_err(e.to_string())),
    }
}

/// `servesim calibrate`: the fit as the JSON `--format json` prints.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, measured_path, model="blackbox", group=0, max_evals=400))]
#[expect(
    clippy::too_many_arguments,
    reason = "the Python function's keyword arguments"
)]
fn calibrate(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    measured_path: &str,
    model: &str,
    group: usize,
    max_evals: usize,
) -> PyResult<String> {
    use servesim::fidelity::calibrate::{Family, calibrate, input_problem};
    let family = Family::named(model).map_err(pyo3::exceptions::PyValueError::new_err)?;
    let app = app();
    let sc = load(&app, source, is_text, &overrides)?;
    no_python_policies(&sc, "calibrate")?;
    // A fit matches completed requests and replays them alone.
    let rows = measured(measured_path)?.completed();
    if let Some(problem) = input_problem(
        &sc,
        group,
        rows.len(),
        max_evals,
        family,
        ["group", "max_evals", "model=\"{}\""],
    ) {
        return Err(pyo3::exceptions::PyValueError::new_err(problem));
    }
    let stop = stop::Stop::new(None)?;
    let app = stop.for_every_run(app);
    match stop.without_python(py, || calibrate(&app, &sc, group, &rows, family, max_evals))? {
        Ok(f) => serde_json::to_string_pretty(&f).map_err(|e| RunError::new_err(e.to_string())),
        Err(e) => Err(RunError::new_err(e.to_string())),
    }
}

/// summary.json's exact text.
fn serde_json_pretty(summary: &servesim::metrics::Summary) -> String {
    summary.to_json_file()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_class::<policies::Request>()?;
    m.add_class::<policies::Instance>()?;
    m.add_class::<autoscale::Group>()?;
    m.add_class::<live::Cluster>()?;
    m.add_function(wrap_pyfunction!(registry::register, m)?)?;
    m.add_function(wrap_pyfunction!(registry::registered, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add_function(wrap_pyfunction!(capacity, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(plan, m)?)?;
    m.add_function(wrap_pyfunction!(said_once, m)?)?;
    m.add_function(wrap_pyfunction!(search_may_write, m)?)?;
    m.add_function(wrap_pyfunction!(check_real, m)?)?;
    m.add_function(wrap_pyfunction!(calibrate, m)?)?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    Ok(())
}
