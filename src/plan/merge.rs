//! Joining a plan's shards (`plan --shard I/N`, then `servesim merge`).

use super::search::{Header, Outcome, PlanResult, Status, finish};

/// Joins the results of a plan's shards (`plan --shard I/N`, each one's `plan.json`) into
/// the plan's result: the same best configuration as one unsharded search (each shard's best
/// is the cheapest of its configurations, and the cheapest of those is the cheapest of all);
/// the shards pruned less, so more configurations were run and the front may hold more.
/// Refuses parts that are not the N shards of one plan on the same inputs.
pub fn merge(parts: Vec<(String, PlanResult)>) -> Result<PlanResult, String> {
    let Some((first_name, first)) = parts.first() else {
        return Err("no shards to merge".into());
    };
    let n = first.origin.shard.1;
    let mut seen = vec![None::<&str>; n as usize];
    for (name, p) in &parts {
        let o = &p.origin;
        let f = &first.origin;
        let differs = if o.inputs != f.inputs {
            Some(format!(
                "its inputs differ ({}): the scenario or a file it names was edited between shards",
                o.inputs
                    .iter()
                    .filter(|(k, v)| f.inputs.get(*k) != Some(*v))
                    .chain(f.inputs.iter().filter(|(k, _)| !o.inputs.contains_key(*k)))
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        } else if o.version != f.version {
            Some(format!(
                "servesim {} ran it, {} the other",
                o.version, f.version
            ))
        } else if (&o.file, &o.set, o.replicas, o.shard.1) != (&f.file, &f.set, f.replicas, n) {
            Some("the scenario path, --set, --replicas or the number of shards differ".into())
        } else {
            None
        };
        if let Some(why) = differs {
            return Err(format!(
                "{name} is not a shard of the plan in {first_name}: {why}"
            ));
        }
        let i = o.shard.0 as usize;
        match seen.get_mut(i) {
            Some(Some(other)) => {
                return Err(format!(
                    "{name} and {other} are both shard {i}/{n}: give each shard once"
                ));
            }
            Some(slot) => *slot = Some(name),
            None => return Err(format!("{name}: shard {i}/{n} is out of range")),
        }
    }
    let missing: Vec<String> = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| s.is_none())
        .map(|(i, _)| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "shard {} missing: a plan's answer needs every shard",
            missing.join(", ")
        ));
    }
    let mut outcomes: Vec<Outcome> = parts
        .iter()
        .flat_map(|(_, p)| p.outcomes.iter().cloned())
        .map(|mut o| {
            if o.status == Status::Best {
                o.status = Status::Feasible;
            }
            o
        })
        .collect();
    outcomes.sort_by_key(|o| o.position);
    let mut origin = first.origin.clone();
    origin.shard = (0, 1);
    Ok(finish(
        Header {
            origin,
            scenario: first.scenario.clone(),
            group: first.group.clone(),
            objective: first.objective,
            seeds: first.seeds.clone(),
            targets: first.targets.clone(),
            bound: first.bound,
        },
        outcomes,
    ))
}
