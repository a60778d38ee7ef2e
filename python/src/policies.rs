//! Policies written in Python, and the typed views they see (docs/python.md, "Policies in
//! Python"): `Request` and `Instance` objects with named attributes (which also index as the
//! tuples of earlier versions did). Each family is a plain function; its first exception
//! stops the run and is raised by `servesim.run`.

use std::sync::{Arc, Mutex, OnceLock};

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyTuple};
use servesim::SimTime;
use servesim::bevy_ecs::world::World;
use servesim::engine::InstanceSnapshot;
use servesim::policy::{
    Active, Admission, AdmissionPolicy, PriorityPolicy, QueueOrder, RouterView, RoutingPolicy,
    family,
};
use servesim::request::{PromptContent, RequestSpec};
use servesim::time::SimDuration;

use crate::RunError;

/// Where a Python policy's first exception goes (the run stops and re-raises it).
pub type Failure = Arc<Mutex<Option<PyErr>>>;

/// A request as a Python policy sees it.
#[pyclass(frozen, get_all, module = "servesim")]
pub struct Request {
    pub id: u64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Tenant and SLO class: index, and name.
    pub tenant: u32,
    pub tenant_name: String,
    pub slo_class: u32,
    pub slo_class_name: String,
    /// The workload's priority (the SLO class's is added by the priority policy).
    pub priority: i32,
    /// Arrival at the cluster, seconds.
    pub arrival_s: f64,
    /// The simulated time of the decision, µs and seconds.
    pub now_us: u64,
    pub now_s: f64,
    /// Session id and turn (0 first), or None outside sessions.
    pub session: Option<u64>,
    pub turn: Option<u32>,
    /// Leading prompt tokens shared with other requests (a system prompt, a session's earlier
    /// turns), 0 when none, and the shared part's content id (equal ids: the same prefix).
    pub shared_prefix_tokens: u32,
    pub prefix_id: Option<u64>,
}

/// The shared prefix of a prompt: its content id and length in tokens.
fn prefix(c: &PromptContent) -> (Option<u64>, u32) {
    match c {
        PromptContent::Simple {
            prefix_id,
            prefix_tokens,
            ..
        } => ((*prefix_tokens > 0).then_some(*prefix_id), *prefix_tokens),
        PromptContent::Segments(s) if s.len() > 1 => (Some(s[0].id), s[s.len() - 2].end),
        PromptContent::Segments(_) => (None, 0),
    }
}

#[pymethods]
impl Request {
    /// The tuple of earlier versions: (id, input_tokens, output_tokens, tenant, slo_class,
    /// priority, now_us).
    fn __getitem__(&self, py: Python<'_>, k: isize) -> PyResult<Py<PyAny>> {
        let t = (
            self.id,
            self.input_tokens,
            self.output_tokens,
            self.tenant,
            self.slo_class,
            self.priority,
            self.now_us,
        )
            .into_pyobject(py)?;
        Ok(t.get_item(if k < 0 { k + 7 } else { k } as usize)?.unbind())
    }

    fn __len__(&self) -> usize {
        7
    }

    fn __repr__(&self) -> String {
        format!(
            "Request(id={}, input_tokens={}, output_tokens={}, tenant={:?}, slo_class={:?}, priority={}, arrival_s={})",
            self.id,
            self.input_tokens,
            self.output_tokens,
            self.tenant_name,
            self.slo_class_name,
            self.priority,
            self.arrival_s
        )
    }
}

/// An instance as a Python policy sees it (the routers' view: possibly stale by
/// `snapshot_refresh_interval_us`).
#[pyclass(frozen, get_all, module = "servesim")]
pub struct Instance {
    pub index: u32,
    /// Index of its group in `cluster.groups`, and the group's name.
    pub group: u32,
    pub group_name: String,
    pub queue_depth: u32,
    pub batch_size: u32,
    pub in_flight: u32,
    pub kv_used_blocks: u32,
    pub kv_total_blocks: u32,
    pub free_blocks: u32,
    /// queue_depth + batch_size + in_flight.
    pub load: u32,
    pub routable: bool,
    /// Leading prompt blocks of the request being routed that this instance has cached, when
    /// the router reads caches (`router.reads_cache = True`), else None.
    pub cached_blocks: Option<u32>,
    /// The group's role: `mixed`, `prefill` or `decode`.
    pub role: &'static str,
    /// Life-cycle state: `serving`, `provisioning`, `loading`, `warming_up`, `draining` or
    /// `off`, at the decision — for policies with `wants_cluster = True`, else None.
    pub state: Option<&'static str>,
    /// Duration of the instance's last step, ms (None before its first, and for policies
    /// without `wants_cluster = True`).
    pub last_step_ms: Option<f64>,
}

#[pymethods]
impl Instance {
    /// The tuple of earlier versions: (index, queue_depth, batch_size, in_flight,
    /// kv_used_blocks, kv_total_blocks, routable).
    fn __getitem__(&self, py: Python<'_>, k: isize) -> PyResult<Py<PyAny>> {
        let t = (
            self.index,
            self.queue_depth,
            self.batch_size,
            self.in_flight,
            self.kv_used_blocks,
            self.kv_total_blocks,
            self.routable,
        )
            .into_pyobject(py)?;
        Ok(t.get_item(if k < 0 { k + 7 } else { k } as usize)?.unbind())
    }

    fn __len__(&self) -> usize {
        7
    }

    fn __repr__(&self) -> String {
        format!(
            "Instance(index={}, group={:?}, queue_depth={}, batch_size={}, in_flight={}, kv_used_blocks={}/{}, routable={})",
            self.index,
            self.group_name,
            self.queue_depth,
            self.batch_size,
            self.in_flight,
            self.kv_used_blocks,
            self.kv_total_blocks,
            self.routable
        )
    }
}

/// Names the views carry, shared by the policies of a run: set when they are installed, or —
/// for a policy the catalogue builds before the run's instances exist — bound once the run
/// is built ([`crate::registry::Scope::bind`]).
#[derive(Clone, Debug, Default)]
pub struct SharedNames(Arc<OnceLock<Names>>);

static NO_NAMES: Names = Names {
    tenants: Vec::new(),
    slo_classes: Vec::new(),
    instance_groups: Vec::new(),
    roles: Vec::new(),
    groups: Vec::new(),
    live: None,
};

impl SharedNames {
    pub fn of(names: Names) -> Self {
        let cell = OnceLock::new();
        let _ = cell.set(names);
        SharedNames(Arc::new(cell))
    }

    /// Sets the names if they are not set yet.
    pub fn bind(&self, names: &Names) {
        let _ = self.0.set(names.clone());
    }

    fn get(&self) -> &Names {
        self.0.get().unwrap_or(&NO_NAMES)
    }
}

/// Names the views carry.
#[derive(Clone, Debug, Default)]
pub struct Names {
    pub tenants: Vec<String>,
    pub slo_classes: Vec<String>,
    /// Group index and name of each instance, by index.
    pub instance_groups: Vec<(u32, String)>,
    /// Role of each instance's group, by index.
    pub roles: Vec<&'static str>,
    /// Group names, by group index.
    pub groups: Vec<String>,
    /// States, last steps and group sizes, refreshed before each routing decision.
    pub live: Option<crate::live::Live>,
}

impl Names {
    fn request(&self, r: &RequestSpec, arrival: Option<SimTime>, now: SimTime) -> Request {
        let name = |v: &[String], k: u32| v.get(k as usize).cloned().unwrap_or_default();
        Request {
            id: r.id,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            tenant: r.tenant,
            tenant_name: name(&self.tenants, r.tenant),
            slo_class: r.slo_class,
            slo_class_name: name(&self.slo_classes, r.slo_class),
            priority: r.priority,
            arrival_s: arrival.unwrap_or(now).as_us() as f64 / 1e6,
            now_us: now.as_us(),
            now_s: now.as_us() as f64 / 1e6,
            session: r.session.map(|s| s.id),
            turn: r.session.map(|s| s.turn),
            shared_prefix_tokens: prefix(&r.content).1,
            prefix_id: prefix(&r.content).0,
        }
    }

    fn instance(
        &self,
        s: &InstanceSnapshot,
        cached_blocks: Option<u32>,
        live: Option<&crate::live::LiveData>,
    ) -> Instance {
        let now = live.and_then(|d| d.instances.get(s.index as usize));
        let (group, group_name) = self
            .instance_groups
            .get(s.index as usize)
            .cloned()
            .unwrap_or_default();
        Instance {
            index: s.index,
            group,
            group_name,
            queue_depth: s.queue_depth,
            batch_size: s.batch_size,
            in_flight: s.in_flight,
            kv_used_blocks: s.kv_used_blocks,
            kv_total_blocks: s.kv_total_blocks,
            free_blocks: s.kv_total_blocks.saturating_sub(s.kv_used_blocks),
            load: s.effective_load(),
            routable: s.routable,
            cached_blocks,
            role: self.roles.get(s.index as usize).copied().unwrap_or("mixed"),
            state: now.map(|l| l.state),
            last_step_ms: now.and_then(|l| l.last_step_ms),
        }
    }

    /// The cluster at a decision, for policies with `wants_cluster = True`.
    pub fn cluster(&self) -> crate::live::Cluster {
        self.live.as_ref().map_or_else(
            || crate::live::Live::default().cluster(&self.groups),
            |l| l.cluster(&self.groups),
        )
    }

    /// The views of `snapshots`; with `live`, each carries its state and last step.
    fn instances<'py>(
        &self,
        py: Python<'py>,
        snapshots: &[InstanceSnapshot],
        live: bool,
        cached: impl Fn(&InstanceSnapshot) -> Option<u32>,
    ) -> PyResult<Vec<Bound<'py, Instance>>> {
        let live = self
            .live
            .as_ref()
            .filter(|_| live)
            .and_then(|l| l.0.lock().ok());
        snapshots
            .iter()
            .map(|s| Bound::new(py, self.instance(s, cached(s), live.as_deref())))
            .collect()
    }
}

/// Calls `f` with the GIL unless an earlier call failed; records the first failure.
pub fn guarded<T>(failure: &Failure, fallback: T, f: impl FnOnce(Python<'_>) -> PyResult<T>) -> T {
    if failure.lock().map_or(true, |e| e.is_some()) {
        return fallback;
    }
    Python::attach(|py| match f(py) {
        Ok(v) => v,
        Err(e) => {
            if let Ok(mut slot) = failure.lock() {
                slot.get_or_insert(e);
            }
            fallback
        }
    })
}

/// What a policy returned, as Python shows it (`repr`), for an error. An object Python shows
/// by its address (`<generator object route at 0x7f…>`) is named by its type instead, so the
/// message, and a policy search's feedback, is the same on every run.
pub fn shown(v: &Bound<'_, PyAny>) -> String {
    let repr = v.repr().map_or_else(|_| "?".into(), |r| r.to_string());
    if !(repr.starts_with('<') && repr.contains(" at 0x")) {
        return repr;
    }
    let kind = v
        .get_type()
        .name()
        .map_or_else(|_| "object".into(), |n| n.to_string());
    match kind.as_str() {
        "generator" => "a generator (the function yields: return the answer instead)".into(),
        "coroutine" => {
            "a coroutine (the function is `async def`: policies are called synchronously, so \
             define it with `def`)"
                .into()
        }
        _ => format!("an object of type {kind}"),
    }
}

/// `routing(request, instances) -> index or None`.
pub struct PyRouter {
    pub f: Py<PyAny>,
    pub names: SharedNames,
    /// The function has `reads_cache = True`: instances carry `cached_blocks`.
    pub reads_cache: bool,
    /// The function has `wants_cluster = True`: a `servesim.Cluster` is its third argument.
    pub wants_cluster: bool,
    pub failure: Failure,
}

impl RoutingPolicy for PyRouter {
    fn choose(&mut self, r: &RequestSpec, now: SimTime, view: &RouterView<'_>) -> Option<u32> {
        guarded(&self.failure, None, |py| {
            let request = Bound::new(py, self.names.get().request(r, None, now))?;
            let instances =
                self.names
                    .get()
                    .instances(py, view.instances, self.wants_cluster, |s| {
                        self.reads_cache.then(|| {
                            view.probe
                                .cached_blocks(s.index, &r.content, r.input_tokens)
                        })
                    })?;
            let mut args = vec![request.into_any(), instances.into_pyobject(py)?.into_any()];
            if self.wants_cluster {
                args.push(Bound::new(py, self.names.get().cluster())?.into_any());
            }
            let returned = self.f.bind(py).call1(PyTuple::new(py, args)?)?;
            if returned.is_instance_of::<PyBool>() {
                // A bool is an int in Python: True would route to instance 1.
                return Err(RunError::new_err(format!(
                    "the Python router returned {returned}, a bool: return an instance's index (an int) or None (rejected)"
                )));
            }
            let pick: Option<u32> = returned.extract().map_err(|_| {
                RunError::new_err(format!(
                    "the Python router returned {}, which is neither an instance index (an int ≥ 0) nor None (rejected)",
                    shown(&returned)
                ))
            })?;
            if let Some(i) = pick
                && !view.instances.get(i as usize).is_some_and(|s| s.routable)
            {
                return Err(RunError::new_err(format!(
                    "the Python router returned {i}, which is not a routable instance"
                )));
            }
            Ok(pick)
        })
    }

    fn wants_kv_events(&self) -> bool {
        self.reads_cache
    }
}

/// `admission(request, instances) -> True (admit), or False / a reason (reject)`.
pub struct PyAdmission {
    pub f: Py<PyAny>,
    pub names: SharedNames,
    /// As the router's: a `servesim.Cluster` third argument.
    pub wants_cluster: bool,
    pub failure: Failure,
    /// Reasons given so far, leaked once each (the counters key on `&'static str`).
    pub reasons: Vec<&'static str>,
}

impl AdmissionPolicy for PyAdmission {
    fn admit(
        &mut self,
        r: &RequestSpec,
        now: SimTime,
        instances: &[InstanceSnapshot],
    ) -> Admission {
        let failure = self.failure.clone();
        let said: Option<String> = guarded(&failure, None, |py| {
            let request = Bound::new(py, self.names.get().request(r, None, now))?;
            let list = self
                .names
                .get()
                .instances(py, instances, self.wants_cluster, |_| None)?;
            let out = if self.wants_cluster {
                let cluster = Bound::new(py, self.names.get().cluster())?;
                self.f.bind(py).call1((request, list, cluster))?
            } else {
                self.f.bind(py).call1((request, list))?
            };
            if let Ok(admit) = out.extract::<bool>() {
                return Ok((!admit).then(|| "python".to_string()));
            }
            match out.extract::<String>() {
                Ok(reason) if reason.is_empty() => Err(RunError::new_err(
                    "the Python admission policy returned an empty reason: return True to admit, False or a reason that names why to reject",
                )),
                Ok(reason) => Ok(Some(reason)),
                Err(_) => Err(RunError::new_err(format!(
                    "the Python admission policy must return True, False or a reason (str), got {}",
                    shown(&out)
                ))),
            }
        });
        match said {
            None => Admission::Admit,
            Some(reason) => {
                let reason = match self.reasons.iter().find(|x| **x == reason) {
                    Some(r) => *r,
                    None => {
                        let leaked: &'static str = Box::leak(reason.into_boxed_str());
                        self.reasons.push(leaked);
                        leaked
                    }
                };
                Admission::Reject(reason)
            }
        }
    }
}

/// `priority(request, class_priority, age_s) -> number` (higher is served first by priority
/// queue orders).
pub struct PyPriority {
    pub f: Py<PyAny>,
    pub names: SharedNames,
    pub failure: Failure,
}

impl PriorityPolicy for PyPriority {
    fn priority(&self, r: &RequestSpec, class_priority: i32, age: SimDuration) -> f64 {
        guarded(&self.failure, 0.0, |py| {
            let request = Bound::new(py, self.names.get().request(r, None, SimTime::ZERO))?;
            let out = self
                .f
                .bind(py)
                .call1((request, class_priority, age.as_secs_f64()))?;
            match out.extract::<f64>() {
                Ok(p) if !p.is_nan() && !out.is_instance_of::<PyBool>() => Ok(p),
                _ => Err(RunError::new_err(format!(
                    "the Python priority policy must return a number (higher is served first), got {}",
                    shown(&out)
                ))),
            }
        })
    }
}

/// `queue_order(request, arrival_s, priority) -> (number, number)`: the wait queue is sorted
/// by it before each batch, smaller first (ties: request id).
pub struct PyQueueOrder {
    pub f: Py<PyAny>,
    pub names: SharedNames,
    pub failure: Failure,
}

impl QueueOrder for PyQueueOrder {
    fn key(&self, r: &RequestSpec, arrival: SimTime, priority: f64) -> (f64, f64) {
        guarded(&self.failure, (0.0, 0.0), |py| {
            let request = Bound::new(py, self.names.get().request(r, Some(arrival), arrival))?;
            let out = self
                .f
                .bind(py)
                .call1((request, arrival.as_us() as f64 / 1e6, priority))?;
            match out.extract::<(f64, f64)>() {
                Ok((a, b)) if !a.is_nan() && !b.is_nan() => Ok((a, b)),
                _ => Err(RunError::new_err(format!(
                    "the Python queue order must return a sort key of two numbers (a tuple, smaller first), got {}",
                    shown(&out)
                ))),
            }
        })
    }
}

/// True when the router function has `reads_cache = True`.
pub fn reads_cache(py: Python<'_>, router: Option<&Py<PyAny>>) -> bool {
    flag(py, router, "reads_cache")
}

/// True when the policy has the attribute `name` and it is true.
pub fn flag(py: Python<'_>, policy: Option<&Py<PyAny>>, name: &str) -> bool {
    policy.is_some_and(|f| {
        f.bind(py)
            .getattr(name)
            .and_then(|v| v.is_truthy())
            .unwrap_or(false)
    })
}

/// The Python policies given to `run` or `evaluate`.
pub struct Given {
    pub router: Option<Py<PyAny>>,
    pub admission: Option<Py<PyAny>>,
    pub priority: Option<Py<PyAny>>,
    pub queue_order: Option<Py<PyAny>>,
    pub reads_cache: bool,
}

impl Given {
    /// A router or admission policy has `wants_cluster = True`.
    pub fn wants_live(&self, py: Python<'_>) -> bool {
        flag(py, self.router.as_ref(), "wants_cluster")
            || flag(py, self.admission.as_ref(), "wants_cluster")
    }

    pub fn any(&self) -> bool {
        self.router.is_some()
            || self.admission.is_some()
            || self.priority.is_some()
            || self.queue_order.is_some()
    }

    /// Puts the policies in place of the scenario's in a built run.
    pub fn install(self, world: &mut World, failure: &Failure) {
        let names = SharedNames::of(names(world));
        if let Some(f) = self.router {
            let wants_cluster = Python::attach(|py| flag(py, Some(&f), "wants_cluster"));
            world.insert_resource(Active::<family::Routing>(Box::new(PyRouter {
                f,
                names: names.clone(),
                reads_cache: self.reads_cache,
                wants_cluster,
                failure: failure.clone(),
            })));
        }
        if let Some(f) = self.admission {
            let wants_cluster = Python::attach(|py| flag(py, Some(&f), "wants_cluster"));
            world.insert_resource(Active::<family::Admission>(Box::new(PyAdmission {
                f,
                names: names.clone(),
                wants_cluster,
                failure: failure.clone(),
                reasons: Vec::new(),
            })));
        }
        if let Some(f) = self.priority {
            world.insert_resource(Active::<family::Priority>(Box::new(PyPriority {
                f,
                names: names.clone(),
                failure: failure.clone(),
            })));
        }
        if let Some(f) = self.queue_order {
            world.insert_resource(Active::<family::Scheduling>(Box::new(PyQueueOrder {
                f,
                names,
                failure: failure.clone(),
            })));
        }
    }

    /// A deep copy of every policy (`copy.deepcopy`), so each run of an evaluation starts
    /// from the state the caller gave (a router's counters, a bucket's tokens).
    pub fn fresh(&self, py: Python<'_>) -> PyResult<Given> {
        let deepcopy = py.import("copy")?.getattr("deepcopy")?;
        let copy = |f: &Option<Py<PyAny>>| -> PyResult<Option<Py<PyAny>>> {
            f.as_ref()
                .map(|f| deepcopy.call1((f.bind(py),)).map(Bound::unbind))
                .transpose()
        };
        Ok(Given {
            router: copy(&self.router)?,
            admission: copy(&self.admission)?,
            priority: copy(&self.priority)?,
            queue_order: copy(&self.queue_order)?,
            reads_cache: self.reads_cache,
        })
    }
}

/// The names the policy views carry, from the run's labels and instances.
pub fn names(world: &mut World) -> Names {
    let labels = world.resource::<servesim::labels::Labels>().clone();
    let mut groups: Vec<(u32, u32, &'static str)> = world
        .query::<(&servesim::instance::Instance, &servesim::instance::Limits)>()
        .iter(world)
        .map(|(i, l)| (i.index, i.group, l.role.name()))
        .collect();
    groups.sort_unstable();
    Names {
        instance_groups: groups
            .iter()
            .map(|&(_, g, _)| {
                (
                    g,
                    labels.groups.get(g as usize).cloned().unwrap_or_default(),
                )
            })
            .collect(),
        roles: groups.iter().map(|g| g.2).collect(),
        groups: labels.groups,
        tenants: labels.tenants,
        slo_classes: labels.slo_classes,
        live: world.get_resource::<crate::live::Live>().cloned(),
    }
}
