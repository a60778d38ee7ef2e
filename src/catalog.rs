//! One mechanism for every family of named, interchangeable policies: a family is a marker
//! type implementing [`PolicyFamily`] (the trait its members implement and the name a
//! scenario knows it by); its members are [`Entry`]s registered once with
//! [`PolicyAppExt::add_policy`]; the [`Catalog`] resource lists, checks and builds them by
//! name; the one a run uses lives in [`Active<F>`] (cluster-wide families) or on each
//! instance (batch formation, latency).
//!
//! ```
//! use servesim::bevy_app::App;
//! use servesim::catalog::{Catalog, Entry, PolicyAppExt, PolicyArgs, PolicyFamily};
//!
//! /// A family of your own: how a request's deadline is set.
//! trait Deadline: Send + Sync {
//!     fn deadline_ms(&self, input_tokens: u32) -> f64;
//! }
//! struct Deadlines;
//! impl PolicyFamily for Deadlines {
//!     type Policy = dyn Deadline;
//!     const NAME: &'static str = "deadline";
//! }
//! struct PerToken(f64);
//! impl Deadline for PerToken {
//!     fn deadline_ms(&self, input_tokens: u32) -> f64 {
//!         self.0 * f64::from(input_tokens)
//!     }
//! }
//!
//! let mut app = App::new();
//! app.add_policy::<Deadlines>(Entry {
//!     name: "per_token",
//!     description: "ms per prompt token",
//!     params: &[("ms", "ms per token (default 0.1)")],
//!     free_params: false,
//!     build: |a| Ok(Box::new(PerToken(a.get("ms", 0.1)))),
//! });
//! let catalog = app.world().resource::<Catalog>();
//! let params = [("ms".to_string(), 0.5)].into();
//! let labels = Default::default();
//! let d = catalog
//!     .build::<Deadlines>("per_token", &PolicyArgs::new(0, &params, &labels))
//!     .unwrap();
//! assert_eq!(d.deadline_ms(100), 50.0);
//! assert_eq!(catalog.names::<Deadlines>(), ["per_token"]);
//! ```

use std::any::{Any, TypeId};
use std::collections::BTreeMap;

use bevy_app::App;
use bevy_ecs::prelude::*;

use crate::labels::Labels;
use crate::model::{GpuProfile, ModelConfig};
use crate::scenario::{Problem, closest, did_you_mean};

/// A family of policies: what its members implement and what scenarios call it.
pub trait PolicyFamily: Send + Sync + 'static {
    /// The members' trait object, e.g. `dyn RoutingPolicy`.
    type Policy: ?Sized + Send + Sync + 'static;
    /// The family's name: `policies.<NAME>` in a scenario (groups' `scheduler` and
    /// `latency: Named(…)` for the per-instance families) and in `servesim list policies`.
    const NAME: &'static str;
}

/// Everything a policy may need at construction.
#[derive(Clone, Copy, Debug)]
pub struct PolicyArgs<'a> {
    pub seed: u64,
    /// The policy's parameters from the scenario (validated against the entry's list).
    pub params: &'a BTreeMap<String, f64>,
    /// Tenant and SLO-class names, for policies keyed by them.
    pub labels: &'a Labels,
    /// The instance group, for per-instance families (batch formation, latency); empty for
    /// cluster-wide ones.
    pub group: GroupFacts<'a>,
    /// The entry's name, set by [`Catalog::build`] (one build function can serve many
    /// entries: the Python package's registered policies share one per family).
    pub name: &'a str,
}

/// What a per-instance policy may know of its instance group.
#[derive(Clone, Copy, Debug, Default)]
pub struct GroupFacts<'a> {
    pub model: Option<&'a ModelConfig>,
    pub gpu: Option<&'a GpuProfile>,
    /// Tensor- and pipeline-parallel degree (0 for cluster-wide policies).
    pub tp: u32,
    pub pp: u32,
}

impl<'a> PolicyArgs<'a> {
    /// Arguments of a cluster-wide policy.
    pub fn new(seed: u64, params: &'a BTreeMap<String, f64>, labels: &'a Labels) -> Self {
        PolicyArgs {
            seed,
            params,
            labels,
            group: GroupFacts::default(),
            name: "",
        }
    }

    /// The same arguments for a policy of one instance group.
    pub fn in_group(self, group: GroupFacts<'a>) -> Self {
        PolicyArgs { group, ..self }
    }

    /// Parameter `name`, or `default` when the scenario does not give it.
    pub fn get(&self, name: &str, default: f64) -> f64 {
        self.params.get(name).copied().unwrap_or(default)
    }

    /// Parameter `name`, which must be finite and ≥ `min`.
    pub fn at_least(&self, name: &str, default: f64, min: f64) -> Result<f64, String> {
        let v = self.get(name, default);
        if v.is_finite() && v >= min {
            Ok(v)
        } else {
            Err(format!("{name} must be a finite number ≥ {min}, got {v}"))
        }
    }
}

/// (family, name, description, parameters) of a registered policy.
pub type PolicyInfo = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// A named, described policy constructor; `T` is the family's trait object.
pub struct Entry<T: ?Sized> {
    pub name: &'static str,
    pub description: &'static str,
    /// Parameters it accepts: (name, meaning with default).
    pub params: &'static [(&'static str, &'static str)],
    /// Whether it accepts parameters named after tenants or SLO classes (free keys).
    pub free_params: bool,
    pub build: fn(&PolicyArgs<'_>) -> Result<Box<T>, String>,
}

impl<T: ?Sized> Clone for Entry<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T: ?Sized> Copy for Entry<T> {}

/// Why a policy could not be built by name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("unknown {family} policy \"{name}\" (known: {})", known.join(", "))]
    Unknown {
        family: &'static str,
        name: String,
        known: Vec<&'static str>,
    },
    /// The policy refused its parameters.
    #[error("{0}")]
    Params(String),
}

/// The members of one family, type-erased so the catalog can hold every family.
trait Members: Send + Sync {
    fn name(&self) -> &'static str;
    fn describe(&self) -> Vec<PolicyInfo>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

struct List<F: PolicyFamily>(Vec<Entry<F::Policy>>);

impl<F: PolicyFamily> Members for List<F> {
    fn name(&self) -> &'static str {
        F::NAME
    }
    fn describe(&self) -> Vec<PolicyInfo> {
        self.0
            .iter()
            .map(|e| (F::NAME, e.name, e.description, e.params))
            .collect()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Every policy the simulation can instantiate, by family and name; families in the order
/// they were first registered, members by name.
#[derive(Resource, Default)]
pub struct Catalog {
    families: Vec<(TypeId, Box<dyn Members>)>,
}

impl Catalog {
    fn list<F: PolicyFamily>(&self) -> Option<&List<F>> {
        let id = TypeId::of::<F>();
        self.families
            .iter()
            .find(|(t, _)| *t == id)
            .and_then(|(_, m)| m.as_any().downcast_ref())
    }

    /// Makes family `F` known (listed even before it has members).
    pub fn declare<F: PolicyFamily>(&mut self) {
        if self.list::<F>().is_none() {
            self.families
                .push((TypeId::of::<F>(), Box::new(List::<F>(Vec::new()))));
        }
    }

    /// Registers a member of `F`. Panics if `F` already has a member of that name: names
    /// are what scenarios say, so two would be ambiguous.
    pub fn add<F: PolicyFamily>(&mut self, entry: Entry<F::Policy>) {
        self.declare::<F>();
        let id = TypeId::of::<F>();
        let list = self
            .families
            .iter_mut()
            .find(|(t, _)| *t == id)
            .and_then(|(_, m)| m.as_any_mut().downcast_mut::<List<F>>())
            .expect("declared above");
        assert!(
            list.0.iter().all(|e| e.name != entry.name),
            "{} policy `{}` registered twice",
            F::NAME,
            entry.name
        );
        list.0.push(entry);
        list.0.sort_by_key(|e| e.name);
    }

    /// The members of `F`, by name.
    pub fn entries<F: PolicyFamily>(&self) -> &[Entry<F::Policy>] {
        self.list::<F>().map_or(&[], |l| &l.0)
    }

    pub fn find<F: PolicyFamily>(&self, name: &str) -> Option<&Entry<F::Policy>> {
        self.entries::<F>().iter().find(|e| e.name == name)
    }

    pub fn names<F: PolicyFamily>(&self) -> Vec<&'static str> {
        self.entries::<F>().iter().map(|e| e.name).collect()
    }

    /// Builds the member of `F` called `name`.
    pub fn build<F: PolicyFamily>(
        &self,
        name: &str,
        args: &PolicyArgs<'_>,
    ) -> Result<Box<F::Policy>, BuildError> {
        let entry = self.find::<F>(name).ok_or_else(|| BuildError::Unknown {
            family: F::NAME,
            name: name.to_string(),
            known: self.names::<F>(),
        })?;
        (entry.build)(&PolicyArgs {
            name: entry.name,
            ..*args
        })
        .map_err(BuildError::Params)
    }

    /// Names of the known families, in registration order.
    pub fn families(&self) -> Vec<&'static str> {
        self.families.iter().map(|(_, m)| m.name()).collect()
    }

    /// (family, name, description, params) of every policy, for `servesim list policies`.
    pub fn describe(&self) -> Vec<PolicyInfo> {
        self.families
            .iter()
            .flat_map(|(_, m)| m.describe())
            .collect()
    }
}

/// The member of cluster-wide family `F` that this run uses, built from the scenario by
/// the setup step of the plugin that uses it (`Active<family::Routing>` is the router).
#[derive(Resource)]
pub struct Active<F: PolicyFamily>(pub Box<F::Policy>);

/// Registers policies on an [`App`]; the one place a policy name is declared.
pub trait PolicyAppExt {
    /// `app.add_policy::<family::Routing>(round_robin::ENTRY)`.
    fn add_policy<F: PolicyFamily>(&mut self, entry: Entry<F::Policy>) -> &mut Self;
}

impl PolicyAppExt for App {
    fn add_policy<F: PolicyFamily>(&mut self, entry: Entry<F::Policy>) -> &mut Self {
        self.world_mut()
            .get_resource_or_init::<Catalog>()
            .add::<F>(entry);
        self
    }
}

/// A member of family `F` named `name` (at `name_at`, called a `kind` policy) with
/// `args.params` (at `params_at`): a known name, parameters it takes, and parameters it
/// accepts (it is built and thrown away).
pub fn check_member<F: PolicyFamily>(
    p: &mut Vec<Problem>,
    catalog: &Catalog,
    kind: &str,
    name_at: &str,
    params_at: &str,
    name: &str,
    args: &PolicyArgs<'_>,
) {
    let Some(e) = catalog.find::<F>(name) else {
        name_in_catalog(p, name_at, kind, name, &catalog.names::<F>());
        return;
    };
    if !e.free_params {
        for k in args.params.keys() {
            if !e.params.iter().any(|(n, _)| n == k) {
                let known: Vec<&str> = e.params.iter().map(|(n, _)| *n).collect();
                let hint = match did_you_mean(k, known.iter().copied()) {
                    Some(s) => format!("did you mean \"{s}\"?"),
                    None if known.is_empty() => format!("{name} takes no parameters"),
                    None => format!("{name} takes: {}", known.join(", ")),
                };
                p.push(
                    Problem::new(
                        format!("{params_at}.{k}"),
                        format!("unknown parameter of {name}"),
                    )
                    .hint(hint),
                );
            }
        }
    }
    if let Err(msg) = (e.build)(&PolicyArgs {
        name: e.name,
        ..*args
    }) {
        p.push(Problem::new(params_at, msg));
    }
}

fn name_in_catalog(
    problems: &mut Vec<Problem>,
    path: &str,
    kind: &str,
    name: &str,
    names: &[&str],
) {
    if !names.contains(&name) {
        let near: Vec<String> = closest(name, names.iter().copied())
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect();
        let hint = if near.is_empty() {
            format!("known {kind} policies: {}", names.join(", "))
        } else {
            format!(
                "did you mean {}? (`servesim list policies` shows all)",
                near.join(" or ")
            )
        };
        problems.push(Problem::new(path, format!("unknown {kind} policy \"{name}\"")).hint(hint));
    }
}
