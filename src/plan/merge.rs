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
        } else if (&o.file, &o.set, o.replicas, o.shard.1, o.configurations)
            != (&f.file, &f.set, f.replicas, n, f.configurations)
        {
            Some(
                "the scenario path, --set, --replicas, the number of shards or of configurations differ"
                    .into(),
            )
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
            crate::scenario::some_of(missing.iter().map(String::as_str))
        ));
    }
    // Each shard holds the configurations whose place is its number modulo N, each once, and
    // together they hold every place from the first to the last: an edited or cut plan.json
    // would otherwise answer from part of the plan.
    let mut places = std::collections::BTreeSet::new();
    for (name, p) in &parts {
        let (i, n) = (p.origin.shard.0 as usize, n.max(1) as usize);
        for o in &p.outcomes {
            if o.position % n != i {
                return Err(format!(
                    "{name}: configuration {} is not one of shard {i}/{n}'s (was plan.json edited?)",
                    o.position
                ));
            }
            if !places.insert(o.position) {
                return Err(format!(
                    "{name}: configuration {} appears twice (was plan.json edited?)",
                    o.position
                ));
            }
            let prices = [
                o.price_per_hour,
                o.price_per_million_tokens,
                Some(o.config.price_per_gpu_hour),
            ];
            if prices
                .iter()
                .flatten()
                .any(|v| !(v.is_finite() && *v >= 0.0))
            {
                return Err(format!(
                    "{name}: configuration {} has a price that is not a number ≥ 0 (was plan.json edited?)",
                    o.position
                ));
            }
        }
    }
    // A plan.json of an earlier version does not say how many there are: then the last
    // place any shard holds bounds them.
    let total = match first.origin.configurations {
        0 => places.last().map_or(0, |&last| last + 1),
        n => n,
    };
    if let Some(&last) = places.last()
        && last >= total
    {
        return Err(format!(
            "configuration {last} is beyond the plan's {total} (was a plan.json edited?)"
        ));
    }
    if places.len() != total {
        let absent: Vec<String> = (0..total)
            .filter(|k| !places.contains(k))
            .take(5)
            .map(|k| k.to_string())
            .collect();
        let (which, are) = if total - places.len() == 1 {
            ("configuration", "is")
        } else {
            ("configurations", "are")
        };
        return Err(format!(
            "{which} {}{} of the plan {are} in no shard: a shard's plan.json was cut or edited",
            absent.join(", "),
            if total.saturating_sub(places.len()) > absent.len() {
                ", …"
            } else {
                ""
            }
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
