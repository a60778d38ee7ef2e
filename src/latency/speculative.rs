//! Speculative decoding as a group is configured for it (`cluster.groups[i].speculative`,
//! docs/speculative.md): the acceptance per draft position and its published defaults, the
//! drafter's shape, its pricing on the roofline and the memory it takes. The instance runs
//! it (`instance::speculative`).

use std::sync::Arc;

use super::LatencyModel;

/// A group's speculative decoding, resolved from its scenario block.
#[derive(Clone)]
pub struct SpecConfig {
    /// The method as the scenario names it (`ngram`, `eagle`, `eagle3`, `mtp`,
    /// `draft_model`).
    pub method: &'static str,
    /// Draft tokens per request and step (vLLM `num_speculative_tokens`).
    pub k: u32,
    /// P(the draft at position i + 1 is accepted), non-increasing, `k` values.
    pub per_position: Vec<f64>,
    /// Per-client rates overriding `per_position` (by client index; `None` = the group's),
    /// from `by_name` once the workload's clients are known ([`SpecConfig::for_clients`]).
    pub by_client: Vec<Option<Vec<f64>>>,
    /// `acceptance_by_client`: client name and its rates.
    pub by_name: Vec<(String, Vec<f64>)>,
    /// Prices the drafter's passes (its own shape, no CPU overheads); `None` for n-grams.
    pub drafter: Option<Arc<dyn LatencyModel>>,
    /// The drafter's weights (GiB, whole replica) and KV bytes per token on one GPU, taken
    /// from the memory the KV cache is derived from.
    pub draft_weights_gib: f64,
    pub draft_kv_bytes_per_token: f64,
    /// The acceptance draws' key: the run's seed mixed with the name of the stream
    /// ([`draw_key`]).
    pub seed: u64,
}

impl std::fmt::Debug for SpecConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecConfig")
            .field("method", &self.method)
            .field("k", &self.k)
            .field("per_position", &self.per_position)
            .finish_non_exhaustive()
    }
}

impl SpecConfig {
    /// Expected tokens a request emits per verification with all k drafts: 1 + Σ p_i.
    pub fn expected_tokens_per_step(&self) -> f64 {
        1.0 + self.per_position.iter().sum::<f64>()
    }

    /// The configuration with `by_name` placed by client index (`clients` = the names of
    /// the workload's clients, in request `client` order).
    pub fn for_clients(&self, clients: &[String]) -> SpecConfig {
        let mut c = self.clone();
        c.by_client = clients
            .iter()
            .map(|n| {
                self.by_name
                    .iter()
                    .find(|(m, _)| m == n)
                    .map(|(_, r)| r.clone())
            })
            .collect();
        c
    }

    /// The per-position rates of client `client`'s requests.
    pub fn rates(&self, client: u32) -> &[f64] {
        match self.by_client.get(client as usize) {
            Some(Some(r)) => r,
            _ => &self.per_position,
        }
    }
}

/// The key of a run's acceptance draws: its seed and the stream name `speculative`, so
/// they share nothing with any other subsystem's randomness.
pub fn draw_key(seed: u64) -> u64 {
    crate::rng::mix(&[seed, crate::rng::fnv1a(b"speculative")])
}

/// The per-position rates of `acceptance` for `k` drafts, or what is wrong with it.
pub fn per_position(acceptance: &crate::scenario::Acceptance, k: u32) -> Result<Vec<f64>, String> {
    use crate::scenario::Acceptance;
    let rates: Vec<f64> = match acceptance {
        Acceptance::Rate(r) => {
            if !(r.is_finite() && (0.0..=1.0).contains(r)) {
                return Err(format!("Rate must be a probability within 0..=1, got {r}"));
            }
            (1..=k as i32).map(|i| r.powi(i)).collect()
        }
        Acceptance::PerPosition(v) => {
            if v.len() < k as usize {
                return Err(format!(
                    "PerPosition gives {} positions for num_speculative_tokens {k}; give one per draft token",
                    v.len()
                ));
            }
            if let Some(x) = v
                .iter()
                .find(|x| !(x.is_finite() && (0.0..=1.0).contains(*x)))
            {
                return Err(format!(
                    "PerPosition values are probabilities within 0..=1, got {x}"
                ));
            }
            if v.windows(2).any(|w| w[1] > w[0]) {
                return Err(format!(
                    "PerPosition must not increase (a draft is accepted only after every one before it), got {v:?}"
                ));
            }
            v[..k as usize].to_vec()
        }
    };
    Ok(rates)
}

/// vLLM's EAGLE-3 acceptance baseline for Llama-3.1-8B-Instruct with
/// RedHatAI/Llama-3.1-8B-Instruct-speculator.eagle3, k = 3, MT-Bench at temperature 0
/// (`tests/v1/spec_decode/test_acceptance_length.py`, mean acceptance length 2.60).
pub const EAGLE3_PER_POSITION: [f64; 3] = [0.7296, 0.5208, 0.3545];

/// DeepSeek-V3's MTP module: "the acceptance rate of the second token prediction ranges
/// between 85% and 90%" (DeepSeek-V3 Technical Report, §5.4.3); the low end.
pub const MTP_RATE: f64 = 0.85;

/// The default per-position rates of a method for `k` drafts, if it has any: EAGLE-3's
/// measured three positions, continued past them at the ratio of the last two; MTP's rate
/// per position.
pub fn default_rates(method: &crate::scenario::SpecMethod, k: u32) -> Option<Vec<f64>> {
    use crate::scenario::SpecMethod;
    match method {
        SpecMethod::Eagle3 => {
            let e = EAGLE3_PER_POSITION;
            let ratio = e[2] / e[1];
            Some(
                (0..k as usize)
                    .map(|i| {
                        if i < e.len() {
                            e[i]
                        } else {
                            e[2] * ratio.powi((i - 2) as i32)
                        }
                    })
                    .collect(),
            )
        }
        SpecMethod::Mtp => Some((1..=k as i32).map(|i| MTP_RATE.powi(i)).collect()),
        _ => None,
    }
}

/// The drafter of an EAGLE, EAGLE-3 or MTP head: one decoder layer of the target's shape
/// (MTP: of its kind, MoE for a MoE model; EAGLE heads are dense, with the target's dense
/// FFN width or, for a MoE target, the width of the experts a token uses), sharing the
/// target's embedding; EAGLE and MTP also share its LM head, EAGLE-3 has one of its own over
/// `draft_vocab` tokens.
pub fn head_config(
    target: &crate::model::ModelConfig,
    method: &crate::scenario::SpecMethod,
    draft_vocab: u32,
) -> crate::model::ModelConfig {
    use crate::scenario::SpecMethod;
    let mut m = target.clone();
    m.id = format!("{}-{}-head", target.id, method_name(method));
    m.layers = 1;
    m.first_dense_layers = 0;
    m.interleave_moe_step = 0;
    if !matches!(method, SpecMethod::Mtp) {
        if m.ffn_dense == 0 {
            m.ffn_dense = m.ffn_expert * m.experts_per_token.max(1) + m.ffn_shared;
        }
        m.experts = 0;
    }
    if matches!(method, SpecMethod::Eagle3) {
        m.vocab = draft_vocab;
        m.tied_embeddings = false;
    } else {
        m.tied_embeddings = true;
    }
    m
}

/// The method's name in outputs.
pub fn method_name(method: &crate::scenario::SpecMethod) -> &'static str {
    use crate::scenario::SpecMethod;
    match method {
        SpecMethod::Ngram => "ngram",
        SpecMethod::Eagle => "eagle",
        SpecMethod::Eagle3 => "eagle3",
        SpecMethod::Mtp => "mtp",
        SpecMethod::DraftModel(_) => "draft_model",
    }
}

/// EAGLE-3 heads' LM head rows (`draft_vocab_size` of the published Llama-3.1-8B heads).
pub const EAGLE3_DRAFT_VOCAB: u32 = 32_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_checked_and_defaults_named() {
        use crate::scenario::{Acceptance, SpecMethod};
        let r = per_position(&Acceptance::Rate(0.5), 3).unwrap();
        assert_eq!(r, [0.5, 0.25, 0.125]);
        let r = per_position(&Acceptance::PerPosition(vec![0.9, 0.8, 0.7, 0.6]), 2).unwrap();
        assert_eq!(r, [0.9, 0.8]);
        assert!(per_position(&Acceptance::PerPosition(vec![0.5, 0.6]), 2).is_err());
        assert!(per_position(&Acceptance::Rate(f64::NAN), 2).is_err());
        // EAGLE-3 past its three measured positions: on at 0.3545 / 0.5208 a position.
        let e = default_rates(&SpecMethod::Eagle3, 5).unwrap();
        assert_eq!(e[..3], EAGLE3_PER_POSITION);
        let ratio = 0.3545 / 0.5208;
        assert!((e[3] - 0.3545 * ratio).abs() < 1e-12);
        assert!((e[4] - 0.3545 * ratio * ratio).abs() < 1e-12);
        assert_eq!(default_rates(&SpecMethod::Mtp, 1).unwrap(), [0.85]);
        assert!(default_rates(&SpecMethod::Ngram, 3).is_none());
    }

    #[test]
    fn an_eagle3_head_is_one_dense_layer_with_its_own_small_lm_head() {
        use crate::scenario::SpecMethod;
        let mixtral = crate::model::ModelConfig::bundled("mixtral-8x7b-v0.1").unwrap();
        let head = head_config(&mixtral, &SpecMethod::Eagle3, 32_000);
        assert_eq!((head.layers, head.experts, head.vocab), (1, 0, 32_000));
        // A MoE target's EAGLE head: the target's dense FFN width (its config's
        // `intermediate_size`), or without one the width of the experts a token uses.
        assert_eq!(head.ffn_dense, mixtral.ffn_dense);
        let mut no_dense = mixtral.clone();
        no_dense.ffn_dense = 0;
        let head = head_config(&no_dense, &SpecMethod::Eagle3, 32_000);
        assert_eq!(head.ffn_dense, 2 * mixtral.ffn_expert);
        assert!(!head.tied_embeddings);
        assert_eq!(head.vocab, 32_000);
        let mtp = head_config(&mixtral, &SpecMethod::Mtp, 0);
        assert_eq!((mtp.layers, mtp.experts, mtp.vocab), (1, 8, mixtral.vocab));
        assert_eq!(mtp.moe_layers(), 1);
    }
}
