//! Python policies in the catalogue: `servesim.register(family, name, make, ...)` adds an
//! entry to the catalogue of every app this package builds, so a scenario names the policy as
//! it names a built-in one (`policies: (routing: "my_router", routing_params: {...})`), the
//! loader validates the name (did-you-mean included) and the parameters (unknown names when
//! the policy lists its parameters, and whatever `make(params)` raises, located at the
//! parameters' field), and `run`, `evaluate` and `sweep` build it like any other.
//!
//! `make(params)` is called with the scenario's parameters (a dict of floats) for every run
//! — so every run, and every seed of an evaluation, starts from a fresh policy — and returns
//! the policy: for routing, admission, priority and scheduling (queue order) a callable with
//! the protocol of `run`'s keyword of that family; for autoscale a scaler
//! ([`crate::autoscale`]).
//!
//! A policy the catalogue builds before the run's instances exist gets its names (tenants,
//! classes, each instance's group) and its failure slot through a [`Scope`]: the run opens
//! one, binds it once the run is built, and reads the first exception after the run.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use servesim::ServesimApp;
use servesim::bevy_ecs::world::World;
use servesim::catalog::{Entry, PolicyAppExt, PolicyArgs};
use servesim::policy::{
    AdmissionPolicy, PriorityPolicy, QueueOrder, RoutingPolicy, ScalePolicy, family,
};
use servesim::scenario::Scenario;

use crate::autoscale::{PyScaler, interval};
use crate::policies::{
    Failure, Names, PyAdmission, PyPriority, PyQueueOrder, PyRouter, SharedNames, flag, names,
    reads_cache,
};

/// The families a Python policy can belong to, by their scenario field's name.
pub const FAMILIES: [&str; 5] = [
    "admission",
    "routing",
    "priority",
    "scheduling",
    "autoscale",
];

/// One registered policy.
struct Registered {
    family: &'static str,
    name: &'static str,
    description: &'static str,
    /// Parameter names and their meaning; `None` takes any parameters.
    params: Option<&'static [(&'static str, &'static str)]>,
    make: Py<PyAny>,
}

static REGISTRY: Mutex<Vec<Registered>> = Mutex::new(Vec::new());

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// `servesim.register(family, name, make, description, params)`: adds (or replaces) a
/// Python policy in the catalogue of every app built from now on.
#[pyfunction]
#[pyo3(signature = (family, name, make, description=String::new(), params=None))]
pub fn register(
    family: &str,
    name: &str,
    make: Py<PyAny>,
    description: String,
    params: Option<BTreeMap<String, String>>,
) -> PyResult<()> {
    let Some(fam) = FAMILIES.iter().find(|f| **f == family) else {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown policy family {family:?}: one of {}",
            FAMILIES.join(", ")
        )));
    };
    if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c == '"') {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "a policy name is a word without spaces or quotes, got {name:?}"
        )));
    }
    let builtin = ServesimApp::new().build();
    let catalog = builtin.world().resource::<servesim::catalog::Catalog>();
    let taken = match *fam {
        "admission" => catalog.find::<family::Admission>(name).is_some(),
        "routing" => catalog.find::<family::Routing>(name).is_some(),
        "priority" => catalog.find::<family::Priority>(name).is_some(),
        "scheduling" => catalog.find::<family::Scheduling>(name).is_some(),
        _ => catalog.find::<family::Autoscale>(name).is_some(),
    };
    let mut registry = REGISTRY
        .lock()
        .map_err(|e| crate::RunError::new_err(e.to_string()))?;
    let ours = registry
        .iter()
        .position(|r| r.family == *fam && r.name == name);
    if taken && ours.is_none() {
        return Err(pyo3::exceptions::PyValueError::new_err(format!(
            "{fam} policy {name:?} is built in: give yours another name"
        )));
    }
    let entry = Registered {
        family: fam,
        name: match ours {
            Some(i) => registry[i].name,
            None => leak(name.to_string()),
        },
        description: leak(if description.is_empty() {
            "a Python policy".to_string()
        } else {
            description
        }),
        params: params.map(|p| {
            let list: Vec<(&'static str, &'static str)> =
                p.into_iter().map(|(k, v)| (leak(k), leak(v))).collect();
            &*Box::leak(list.into_boxed_slice())
        }),
        make,
    };
    match ours {
        Some(i) => registry[i] = entry,
        None => registry.push(entry),
    }
    Ok(())
}

/// One registered policy as Python gets it: (family, name, make, description, params).
type Listed = (
    String,
    String,
    Py<PyAny>,
    String,
    Option<BTreeMap<String, String>>,
);

/// `servesim.registered()`: every registered policy, so that a worker process can register
/// them again.
#[pyfunction]
pub fn registered(py: Python<'_>) -> PyResult<Vec<Listed>> {
    let registry = REGISTRY
        .lock()
        .map_err(|e| crate::RunError::new_err(e.to_string()))?;
    Ok(registry
        .iter()
        .map(|r| {
            (
                r.family.to_string(),
                r.name.to_string(),
                r.make.clone_ref(py),
                r.description.to_string(),
                r.params.map(|p| {
                    p.iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect()
                }),
            )
        })
        .collect())
}

/// Adds every registered policy to the catalogue of the apps `app` builds.
pub fn with_registered(app: ServesimApp) -> ServesimApp {
    app.with(|app| {
        let Ok(registry) = REGISTRY.lock() else {
            return;
        };
        for r in registry.iter() {
            let (params, free_params) = match r.params {
                Some(p) => (p, false),
                None => (&[][..], true),
            };
            macro_rules! add {
                ($family:ty, $build:expr) => {
                    app.add_policy::<$family>(Entry {
                        name: r.name,
                        description: r.description,
                        params,
                        free_params,
                        build: $build,
                    })
                };
            }
            match r.family {
                "admission" => add!(family::Admission, build_admission),
                "routing" => add!(family::Routing, build_routing),
                "priority" => add!(family::Priority, build_priority),
                "scheduling" => add!(family::Scheduling, build_queue_order),
                _ => add!(family::Autoscale, build_scaler),
            };
        }
    })
}

/// True when the scenario names a registered policy (its runs then call Python).
pub fn used_by(sc: &Scenario) -> bool {
    let Ok(registry) = REGISTRY.lock() else {
        return false;
    };
    let p = &sc.policies;
    let named = |family: &str, name: &str| {
        registry
            .iter()
            .any(|r| r.family == family && r.name == name)
    };
    named("admission", &p.admission)
        || named("routing", &p.routing)
        || named("routing", &p.decode_routing)
        || named("priority", &p.priority)
        || named("scheduling", &p.scheduling)
        || named("autoscale", &p.autoscale)
}

/// What the catalogue built on this thread since the scope opened: each policy's names to
/// bind and failure slot to read.
#[derive(Default)]
struct Built {
    names: Vec<SharedNames>,
    failures: Vec<Failure>,
    /// Some policy has `wants_cluster = True`.
    wants_live: bool,
}

thread_local! {
    static BUILT: RefCell<Built> = RefCell::new(Built::default());
}

/// The Python policies a run builds through the catalogue (see the module's text).
pub struct Scope;

impl Scope {
    /// Forgets what was built before (validation builds policies too).
    pub fn open() -> Scope {
        BUILT.with(|b| *b.borrow_mut() = Built::default());
        Scope
    }

    /// Gives the policies built so far the run's names.
    pub fn bind(&self, world: &mut World) {
        let names: Names = names(world);
        BUILT.with(|b| b.borrow().names.iter().for_each(|n| n.bind(&names)));
    }

    /// A policy built so far has `wants_cluster = True` (see [`crate::live`]).
    pub fn wants_live(&self) -> bool {
        BUILT.with(|b| b.borrow().wants_live)
    }

    /// The first exception a built policy raised.
    pub fn failure(&self) -> Option<PyErr> {
        BUILT.with(|b| {
            b.borrow()
                .failures
                .iter()
                .find_map(|f| f.lock().ok().and_then(|mut e| e.take()))
        })
    }
}

/// Calls the registered `make(params)` of the entry being built; records its names and
/// failure slot in the open scope.
fn make(family: &str, args: &PolicyArgs<'_>) -> Result<Made, String> {
    let (f, name) = {
        let registry = REGISTRY.lock().map_err(|e| e.to_string())?;
        let r = registry
            .iter()
            .find(|r| r.family == family && r.name == args.name)
            .ok_or_else(|| format!("{family} policy {:?} is not registered", args.name))?;
        (Python::attach(|py| r.make.clone_ref(py)), r.name)
    };
    let policy = Python::attach(|py| -> PyResult<Py<PyAny>> {
        let params = PyDict::new(py);
        for (k, v) in args.params {
            params.set_item(k, v)?;
        }
        let policy = f.bind(py).call1((params,))?;
        if !policy.is_callable() {
            return Err(PyTypeError::new_err(format!(
                "make(params) returned {}, which is not callable: return the policy (a function, or an object with __call__)",
                crate::policies::shown(&policy)
            )));
        }
        Ok(policy.unbind())
    })
    .map_err(|e| format!("{}: {e}", args.name))?;
    let names = SharedNames::default();
    let failure: Failure = Arc::new(Mutex::new(None));
    BUILT.with(|b| {
        let mut b = b.borrow_mut();
        b.names.push(names.clone());
        b.failures.push(failure.clone());
    });
    Ok(Made {
        f: policy,
        name,
        names,
        failure,
    })
}

/// A policy `make` returned, with its entry's name, its names and its failure slot.
struct Made {
    f: Py<PyAny>,
    name: &'static str,
    names: SharedNames,
    failure: Failure,
}

fn wants_live(yes: bool) {
    BUILT.with(|b| b.borrow_mut().wants_live |= yes);
}

fn build_routing(args: &PolicyArgs<'_>) -> Result<Box<dyn RoutingPolicy>, String> {
    let Made {
        f, names, failure, ..
    } = make("routing", args)?;
    let (reads_cache, wants_cluster) = Python::attach(|py| {
        (
            reads_cache(py, Some(&f)),
            flag(py, Some(&f), "wants_cluster"),
        )
    });
    wants_live(wants_cluster);
    Ok(Box::new(PyRouter {
        f,
        names,
        reads_cache,
        wants_cluster,
        failure,
    }))
}

fn build_admission(args: &PolicyArgs<'_>) -> Result<Box<dyn AdmissionPolicy>, String> {
    let Made {
        f, names, failure, ..
    } = make("admission", args)?;
    let wants_cluster = Python::attach(|py| flag(py, Some(&f), "wants_cluster"));
    wants_live(wants_cluster);
    Ok(Box::new(PyAdmission {
        f,
        names,
        wants_cluster,
        failure,
        reasons: Vec::new(),
    }))
}

fn build_priority(args: &PolicyArgs<'_>) -> Result<Box<dyn PriorityPolicy>, String> {
    let Made {
        f, names, failure, ..
    } = make("priority", args)?;
    Ok(Box::new(PyPriority { f, names, failure }))
}

fn build_queue_order(args: &PolicyArgs<'_>) -> Result<Box<dyn QueueOrder>, String> {
    let Made {
        f, names, failure, ..
    } = make("scheduling", args)?;
    Ok(Box::new(PyQueueOrder { f, names, failure }))
}

fn build_scaler(args: &PolicyArgs<'_>) -> Result<Box<dyn ScalePolicy>, String> {
    let Made {
        f, name, failure, ..
    } = make("autoscale", args)?;
    let every = Python::attach(|py| interval(py, &f)).map_err(|e| format!("{}: {e}", args.name))?;
    Ok(Box::new(PyScaler::new(
        f,
        every,
        args.labels.groups.clone(),
        name,
        failure,
    )))
}
