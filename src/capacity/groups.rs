//! One instance group alone (`capacity --group`), and every group of a deployment alone
//! beside the whole (`capacity --each-group`).

use super::{Capacity, CapacityError, Settings, search};
use crate::scenario::{Role, Scenario};

/// `scenario` with only its group `name` (`capacity --group`): what that group alone
/// sustains under the whole workload. A prefill or decode group cannot serve alone.
pub fn group_alone(scenario: &Scenario, name: &str) -> Result<Scenario, String> {
    let groups = &scenario.cluster.groups;
    let Some(g) = groups.iter().find(|g| g.name == name) else {
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        return Err(format!(
            "no instance group \"{name}\"{}",
            crate::scenario::did_you_mean(name, names.iter().copied()).map_or_else(
                || format!(" (the groups: {})", names.join(", ")),
                |s| format!(": did you mean \"{s}\"?")
            )
        ));
    };
    if g.role != Role::Mixed {
        return Err(format!(
            "group \"{name}\" is a {} pool, which cannot serve requests alone: search the whole deployment (without --group), or vary its size with plan.pd_splits",
            g.role.name()
        ));
    }
    let mut alone = scenario.clone();
    alone.cluster.groups.retain(|g| g.name == name);
    alone.plan = None;
    Ok(alone)
}

/// `scenario`'s capacity as a whole, with each of its groups searched alone under the whole
/// workload in [`Capacity::groups`] (in the cluster's order): which group limits the
/// deployment, and what each would carry by itself. A prefill or decode pool cannot serve
/// alone and is left out with a warning; a one-group deployment has nothing to split.
pub fn search_each_group(
    app: &crate::ServesimApp,
    scenario: &Scenario,
    settings: &Settings,
) -> Result<Capacity, CapacityError> {
    let mut whole = search(app, scenario, settings)?;
    let groups = &scenario.cluster.groups;
    if groups.len() == 1 {
        whole.warnings.push(format!(
            "the deployment is one group ({}): its capacity alone is the deployment's",
            groups[0].name
        ));
        return Ok(whole);
    }
    for g in groups {
        if g.role != Role::Mixed {
            whole.warnings.push(format!(
                "group {} is a {} pool, which cannot serve requests alone: it is searched only with the deployment",
                g.name,
                g.role.name()
            ));
            continue;
        }
        let alone = group_alone(scenario, &g.name).map_err(CapacityError::Input)?;
        let c = search(app, &alone, settings)?;
        whole.groups.push(Capacity {
            group: Some(g.name.clone()),
            ..c
        });
    }
    Ok(whole)
}
