use super::*;
use crate::model::{ModelConfig, find_gpu};

fn h100_power() -> PowerFigures {
    PowerFigures {
        idle_w: 70.0,
        floor_w: 300.0,
        max_w: 700.0,
    }
}

#[test]
fn flops_per_token_count_the_active_weights_only() {
    // Llama-3.1-8B: d 4096, 32 layers, 32 heads and 8 KV heads of 128, FFN 14336.
    // Per layer: attention 4096 · (4096 + 2·1024 + 4096) = 41,943,040, MLP 3 · 4096 · 14336
    // = 176,160,768; × 32 layers × 2 FLOPs.
    let llama = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
    assert_eq!(flops_per_token(&llama), 13_958_643_712.0);
    // Mixtral-8x7B: the same attention; 2 of 8 experts of FFN 14336 plus an 8 × 4096 router.
    // Per layer 41,943,040 + 2 · 3 · 4096 · 14336 + 32,768 = 394,297,344; × 32 × 2.
    let mixtral = ModelConfig::bundled("mixtral-8x7b-v0.1").unwrap();
    assert_eq!(flops_per_token(&mixtral), 25_235_030_016.0);
}

#[test]
fn a_decode_step_is_metered_by_hand() {
    let model = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
    let gpu = find_gpu("H100").unwrap();
    // Whole-model KV bytes per token: 32 layers · 2 · 8 heads · 128 · 2 bytes.
    let mut meter = Meter::new(h100_power(), &model, &gpu, 1, 131_072.0);
    // 64 decodes with 64,000 tokens cached in all, 10 ms.
    let work = StepWork::decodes(64, 64_000);
    // FLOPs: 13,958,643,712 · 64 + 2 · 128,256 · 4,096 · 64 (logits) + 4 · 32 · 32 · 128 ·
    // 64,064 (pairs) = 994,184,265,728. KV read 131,072 · 64,064 = 8,396,996,608 bytes.
    // u = 994,184,265,728 / (0.01 · 989.5e12) + 8,396,996,608 / (0.01 · 3.35e12) = 0.351130.
    let u = meter.utilisation(&work, 0.01);
    assert!((u - 0.351_130_012).abs() < 1e-8, "{u}");
    // 0.01 s · (300 + 400 · u) W.
    let joules = meter.step(&work, 0.01);
    assert!((joules - 4.404_520_05).abs() < 1e-7, "{joules}");
    assert_eq!(meter.busy_gpu_s, 0.01);
    // The same step on two GPUs (tp 2) takes the same time: twice the GPU time, half u.
    let mut tp2 = Meter::new(h100_power(), &model, &gpu, 2, 131_072.0);
    assert!((tp2.utilisation(&work, 0.01) - u / 2.0).abs() < 1e-12);
    let j2 = tp2.step(&work, 0.01);
    assert!((j2 - 0.02 * (300.0 + 400.0 * u / 2.0)).abs() < 1e-9);
}

#[test]
fn work_of_items_matches_the_lockstep_sums_and_utilisation_saturates() {
    let mut items = StepWork::default();
    items.add(1, 100, false);
    items.add(1, 300, false);
    assert_eq!(items, StepWork::decodes(2, 400));
    // A 2,048-token prefill chunk after 1,000 cached tokens.
    let mut chunk = StepWork::default();
    chunk.add(2048, 1000, true);
    assert_eq!(chunk.tokens, 2048.0);
    assert_eq!(chunk.pairs, 2048.0 * (1000.0 + 2049.0 / 2.0));
    assert_eq!(chunk.kv_tokens, 3048.0);
    // Absurdly fast: u is capped at 1 and the GPU draws max_w.
    let model = ModelConfig::bundled("llama-3.1-8b-instruct").unwrap();
    let gpu = find_gpu("H100").unwrap();
    let mut meter = Meter::new(h100_power(), &model, &gpu, 1, 131_072.0);
    assert_eq!(meter.utilisation(&chunk, 1e-6), 1.0);
    assert!((meter.step(&chunk, 1e-6) - 700.0e-6).abs() < 1e-15);
}

#[test]
fn power_figures_are_checked() {
    assert!(h100_power().problems().is_empty());
    let bad = PowerFigures {
        idle_w: 400.0,
        floor_w: 300.0,
        max_w: 700.0,
    };
    assert_eq!(bad.problems()[0].0, "floor_w");
    let nan = PowerFigures {
        idle_w: f64::NAN,
        ..h100_power()
    };
    assert_eq!(nan.problems()[0].0, "idle_w");
    // Every bundled GPU has sane figures, max_w its datasheet's board power.
    for g in crate::model::bundled_gpus() {
        let p = g
            .power
            .unwrap_or_else(|| panic!("{} has power figures", g.id));
        assert!(p.problems().is_empty(), "{}", g.id);
    }
    assert_eq!(find_gpu("MI300X").unwrap().power.unwrap().max_w, 750.0);
}
