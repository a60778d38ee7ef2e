//! Python bindings of servesim: run scenarios from Python, get the summary and the
//! per-request rows in memory, and route requests with a Python function.
//!
//! The Python package (`pysrc/servesim`) wraps these functions; see docs/python.md.

use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use servesim::metrics::SharedBuffer;
use servesim::policy::{Active, Catalog, RouterView, RoutingPolicy, family};
use servesim::request::RequestSpec;
use servesim::scenario::{self, Scenario};
use servesim::{RunOptions, SimTime, Simulation};

pyo3::create_exception!(
    _native,
    ScenarioError,
    PyException,
    "The scenario is invalid: the message lists every problem with file, field and line:column."
);
pyo3::create_exception!(
    _native,
    RunError,
    PyException,
    "The run could not complete (an output directory problem, an overloaded cluster, a router error...)."
);

/// Loads a scenario from a path, or from RON text when `is_text`.
fn load(source: &str, is_text: bool, overrides: &[(String, String)]) -> PyResult<Scenario> {
    let app = servesim::default_app();
    let catalog = app.world().resource::<Catalog>();
    let loaded = if is_text {
        scenario::parse(source, "<text>", overrides, catalog)
    } else {
        scenario::load(source.as_ref(), overrides, catalog)
    };
    loaded.map_err(|e| ScenarioError::new_err(e.to_string()))
}

/// Checks a scenario as `servesim validate` does; raises ScenarioError.
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides))]
fn validate(source: &str, is_text: bool, overrides: Vec<(String, String)>) -> PyResult<()> {
    load(source, is_text, &overrides).map(drop)
}

/// A routing policy written in Python: `router(request, instances) -> index`.
struct PyRouter {
    f: Py<PyAny>,
    /// The first exception the function raised (the run stops and re-raises it).
    error: Arc<Mutex<Option<PyErr>>>,
}

impl RoutingPolicy for PyRouter {
    fn choose(&mut self, r: &RequestSpec, now: SimTime, view: &RouterView<'_>) -> Option<u32> {
        if self.error.lock().map_or(true, |e| e.is_some()) {
            return None;
        }
        Python::attach(|py| {
            let call = || -> PyResult<Option<u32>> {
                let request = (
                    r.id,
                    r.input_tokens,
                    r.output_tokens,
                    r.tenant,
                    r.slo_class,
                    r.priority,
                    now.as_us(),
                );
                let instances: Vec<_> = view
                    .instances
                    .iter()
                    .map(|s| {
                        (
                            s.index,
                            s.queue_depth,
                            s.batch_size,
                            s.in_flight,
                            s.kv_used_blocks,
                            s.kv_total_blocks,
                            s.routable,
                        )
                    })
                    .collect();
                let args = PyTuple::new(
                    py,
                    [
                        request.into_pyobject(py)?.into_any(),
                        instances.into_pyobject(py)?.into_any(),
                    ],
                )?;
                let out = self.f.bind(py).call1(args)?;
                let pick: Option<u32> = out.extract()?;
                if let Some(i) = pick
                    && !view.instances.get(i as usize).is_some_and(|s| s.routable)
                {
                    return Err(RunError::new_err(format!(
                        "the Python router returned {i}, which is not a routable instance"
                    )));
                }
                Ok(pick)
            };
            match call() {
                Ok(pick) => pick,
                Err(e) => {
                    if let Ok(mut slot) = self.error.lock() {
                        slot.get_or_insert(e);
                    }
                    None
                }
            }
        })
    }
}

/// Runs a scenario. Returns (summary.json text, requests.csv text or None).
#[pyfunction]
#[pyo3(signature = (source, is_text, overrides, out=None, router=None, requests=true))]
fn run(
    py: Python<'_>,
    source: &str,
    is_text: bool,
    overrides: Vec<(String, String)>,
    out: Option<String>,
    router: Option<Py<PyAny>>,
    requests: bool,
) -> PyResult<(String, Option<String>)> {
    let sc = load(source, is_text, &overrides)?;
    let buffer = requests.then(SharedBuffer::default);
    let options = RunOptions {
        out_dir: out.map(Into::into),
        requests_csv_memory: buffer.clone(),
        ..Default::default()
    };
    let mut sim = Simulation::new(&sc, options).map_err(|e| RunError::new_err(e.to_string()))?;
    let error = Arc::new(Mutex::new(None));
    let result = match router {
        Some(f) => {
            sim.world_mut()
                .insert_resource(Active::<family::Routing>(Box::new(PyRouter {
                    f,
                    error: error.clone(),
                })));
            sim.run()
        }
        // No Python code runs during the simulation: let other Python threads go on.
        None => py.detach(move || sim.run()),
    };
    if let Some(e) = error.lock().ok().and_then(|mut e| e.take()) {
        return Err(e);
    }
    let summary = result.map_err(|e| RunError::new_err(e.to_string()))?;
    let json = serde_json_pretty(&summary);
    let csv = buffer.map(|b| {
        let bytes = b.0.lock().map(|v| v.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    });
    Ok((json, csv))
}

/// summary.json's exact text.
fn serde_json_pretty(summary: &servesim::metrics::Summary) -> String {
    summary.to_json_file()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(validate, m)?)?;
    m.add("ScenarioError", m.py().get_type::<ScenarioError>())?;
    m.add("RunError", m.py().get_type::<RunError>())?;
    Ok(())
}
