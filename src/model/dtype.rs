//! Quantised weights and KV cache per instance group (`weight_dtype`, `kv_cache_dtype`):
//! what a data type costs in bytes, and the model as a group serves it.
//!
//! | `weight_dtype` | bytes per weight | GEMM rate the roofline uses |
//! |---|---|---|
//! | `bf16`, `fp16` | 2 | the GPU's bf16 tensor rate |
//! | `fp8` (W8A8, e.g. vLLM's `--quantization fp8`) | 1 | the fp8 tensor rate (`tflops_fp8`; bf16 where the GPU has none) |
//! | `int8` (W8A8 int8) | 1 | the same rate (int8 TOPS equal fp8 TFLOPS on H100/H200/L40S datasheets) |
//! | `int4`, `awq`, `gptq` (W4A16) | 0.5 | bf16: the kernels (Marlin) dequantise to bf16 and multiply there |
//!
//! `kv_cache_dtype` is vLLM's option of that name: `auto` (the model's dtype), `bf16`,
//! `fp16`, `fp8`, `fp8_e4m3`, `fp8_e5m2` (1 byte per element). The KV bytes set the blocks
//! that fit (an fp8 cache holds twice as many), the bytes attention reads per step in our
//! roofline, KV transfers and the CPU tier. BLIS's models keep BLIS's reading (the model's
//! own bytes), as for every other term. Scales (one per tensor or per channel) are left out:
//! under 0.1 % of the bytes.

use super::ModelConfig;

/// The weight data types a group may set, with their bytes per weight.
pub const WEIGHT_DTYPES: [(&str, f64); 7] = [
    ("bf16", 2.0),
    ("fp16", 2.0),
    ("fp8", 1.0),
    ("int8", 1.0),
    ("int4", 0.5),
    ("awq", 0.5),
    ("gptq", 0.5),
];

/// The KV-cache data types (vLLM's `--kv-cache-dtype`), with their bytes per element;
/// `auto` keeps the model's.
pub const KV_DTYPES: [(&str, f64); 5] = [
    ("bf16", 2.0),
    ("fp16", 2.0),
    ("fp8", 1.0),
    ("fp8_e4m3", 1.0),
    ("fp8_e5m2", 1.0),
];

fn lookup(table: &[(&str, f64)], name: &str) -> Option<f64> {
    table.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Bytes per weight of `name`, or what was expected.
pub fn weight_bytes(name: &str) -> Result<f64, String> {
    lookup(&WEIGHT_DTYPES, name).ok_or_else(|| {
        format!(
            "unknown weight_dtype \"{name}\": one of {}",
            WEIGHT_DTYPES.map(|(n, _)| n).join(", ")
        )
    })
}

/// Bytes per KV element of `name` (`auto`: None, the model's), or what was expected.
pub fn kv_bytes(name: &str) -> Result<Option<f64>, String> {
    if name == "auto" {
        return Ok(None);
    }
    lookup(&KV_DTYPES, name).map(Some).ok_or_else(|| {
        format!(
            "unknown kv_cache_dtype \"{name}\": auto or one of {} (vLLM's KV cache is 16- or 8-bit)",
            KV_DTYPES.map(|(n, _)| n).join(", ")
        )
    })
}

/// The model as a group with these data types serves it.
pub fn quantised(
    mut m: ModelConfig,
    weight: Option<&str>,
    kv: Option<&str>,
) -> Result<ModelConfig, Vec<(&'static str, String)>> {
    let mut problems = Vec::new();
    if let Some(w) = weight {
        match weight_bytes(w) {
            // vLLM's online quantisation (`--quantization`) covers every linear layer,
            // the attention projections too; the embedding and LM head stay as they are.
            Ok(b) => {
                m.weight_bytes = b;
                m.attn_weight_bytes = b;
            }
            Err(e) => problems.push(("weight_dtype", e)),
        }
    }
    if let Some(k) = kv {
        match kv_bytes(k) {
            Ok(Some(b)) => m.kv_bytes = b,
            Ok(None) => {}
            Err(e) => problems.push(("kv_cache_dtype", e)),
        }
    }
    if problems.is_empty() {
        Ok(m)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{find_gpu, kv_capacity};

    fn llama() -> ModelConfig {
        ModelConfig::bundled("llama-3.1-8b-instruct").unwrap()
    }

    #[test]
    fn an_fp8_kv_cache_holds_twice_the_blocks() {
        // Llama-3.1-8B on one H100 at 0.9 (capacity.rs works the bf16 case): params
        // 8,030,261,248 × 2 B = 14.9575 GiB; spare 72 − 14.9575 − 5.5 − 0.15 = 51.3925 GiB.
        // bf16 blocks of 2 MiB: ⌊51.3925 × 512⌋ = 26,312; fp8 blocks of 1 MiB: ⌊51.3925 × 1024⌋
        // = ⌊52,625.9⌋ = 52,625.
        let h100 = find_gpu("H100").unwrap();
        let fp8 = quantised(llama(), None, Some("fp8")).unwrap();
        let c = kv_capacity(&fp8, &h100, 1, 1, 0.9, 16).unwrap();
        assert_eq!(c.per_block_bytes, 1_048_576.0);
        assert_eq!(c.blocks, 52_625);
        assert_eq!(
            kv_capacity(&llama(), &h100, 1, 1, 0.9, 16).unwrap().blocks,
            26_312
        );
        // `auto` and bf16 keep the model's 2 bytes.
        for k in ["auto", "bf16"] {
            let m = quantised(llama(), None, Some(k)).unwrap();
            assert_eq!(
                kv_capacity(&m, &h100, 1, 1, 0.9, 16).unwrap().blocks,
                26_312
            );
        }
    }

    #[test]
    fn fp8_weights_free_half_their_memory_for_kv() {
        // 8,030,261,248 parameters, of which the embedding and the LM head are
        // 2 × 128,256 × 4,096 = 1,050,673,152, which vLLM keeps in bf16: fp8 weights take
        // 6,979,588,096 + 2,101,346,304 B = 8.4573 GiB; spare 72 − 8.4573 − 5.65 = 57.8927 GiB
        // → ⌊× 512⌋ = 29,641.
        let h100 = find_gpu("H100").unwrap();
        let m = quantised(llama(), Some("fp8"), None).unwrap();
        assert_eq!(
            (m.weight_bytes, m.attn_weight_bytes, m.head_bytes),
            (1.0, 1.0, 2.0)
        );
        let c = kv_capacity(&m, &h100, 1, 1, 0.9, 16).unwrap();
        assert!((c.weights_gib - 8.4573).abs() < 1e-4, "{}", c.weights_gib);
        assert_eq!(c.blocks, 29_641);
        // int4: 0.5 B a weight but the same bf16 head: 3,489,794,048 + 2,101,346,304 B.
        let int4 = quantised(llama(), Some("awq"), None).unwrap();
        assert_eq!(int4.weight_bytes, 0.5);
        let c = kv_capacity(&int4, &h100, 1, 1, 0.9, 16).unwrap();
        assert!((c.weights_gib - 5.2072).abs() < 1e-4, "{}", c.weights_gib);
    }

    #[test]
    fn unknown_data_types_are_named_with_what_is_expected() {
        let e = quantised(llama(), Some("fp9"), Some("int4")).unwrap_err();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].0, "weight_dtype");
        assert!(
            e[0].1.contains(
                "unknown weight_dtype \"fp9\": one of bf16, fp16, fp8, int8, int4, awq, gptq"
            ),
            "{}",
            e[0].1
        );
        assert_eq!(e[1].0, "kv_cache_dtype");
        assert!(e[1].1.contains("auto or one of bf16"), "{}", e[1].1);
    }
}
