//! Default prices of a GPU-hour (`assets/prices.ron`, each with its source and date) and the
//! price a plan uses: the scenario's `plan.prices`, else the bundled one.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A bundled price (`assets/prices.ron`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub gpu: String,
    pub usd_per_gpu_hour: f64,
    pub date: String,
    pub source: String,
}

/// Every bundled price.
pub fn bundled_prices() -> Vec<Price> {
    ron::from_str(include_str!("../../assets/prices.ron")).expect("bundled prices parse (tested)")
}

/// The price of one GPU-hour of `gpu` (an id or alias): the scenario's, else the bundled one.
pub fn price_of(gpu: &str, prices: &BTreeMap<String, f64>) -> Option<f64> {
    let id = super::find_gpu(gpu).map(|g| g.id);
    let same = |name: &str| {
        name.eq_ignore_ascii_case(gpu)
            || super::find_gpu(name).is_some_and(|g| Some(&g.id) == id.as_ref())
    };
    prices
        .iter()
        .find(|(name, _)| same(name))
        .map(|(_, p)| *p)
        .or_else(|| {
            bundled_prices()
                .into_iter()
                .find(|p| same(&p.gpu))
                .map(|p| p.usd_per_gpu_hour)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_prices_parse_name_known_gpus_and_give_way_to_the_scenarios() {
        let prices = bundled_prices();
        assert!(prices.len() >= 4);
        for p in &prices {
            assert!(crate::model::find_gpu(&p.gpu).is_some(), "{}", p.gpu);
            assert!(p.usd_per_gpu_hour > 0.0 && !p.source.is_empty() && !p.date.is_empty());
        }
        let none = BTreeMap::new();
        // By alias, any case.
        assert_eq!(price_of("h100-sxm", &none), Some(3.0));
        assert_eq!(price_of("A100-40", &none), None);
        let mine: BTreeMap<String, f64> = [("H100-SXM".to_string(), 2.25)].into();
        assert_eq!(price_of("H100", &mine), Some(2.25));
    }
}
