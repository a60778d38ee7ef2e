//! Fuzzes the parsers of the files a scenario or a fidelity check names: HuggingFace model
//! configs (and pricing a step with the models they give), measured step tables, measured
//! benchmark runs (CSV, vLLM JSON and inference-perf's per-request JSON) and traces. The first byte picks the parser. Any
//! panic is a bug: bad input must come back as an error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use servesim::latency::{
    BatchShape, Extrapolation, LatencyModel, MeasuredTable, Roofline, StepItem,
};
use servesim::model::{ModelConfig, find_gpu, kv_capacity};
use servesim::scenario::{TraceFormat, TraceSpec};
use servesim::workload::TraceReader;

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    match which % 5 {
        0 => {
            let Ok(m) = ModelConfig::from_hf_json("fuzz", text) else {
                return;
            };
            let gpu = find_gpu("H100").expect("bundled");
            let _ = kv_capacity(&m, &gpu, 1, 1, 0.9, 16);
            let r = Roofline {
                model: m,
                gpu,
                tp: 1,
                alpha: [0.0; 3],
                step_overhead_us: 0.0,
                request_overhead_us: 0.0,
                top_p_sort: true,
            };
            let items = [
                StepItem {
                    new_tokens: 64,
                    context_tokens: 0,
                    input_tokens: 64,
                    prefill: true,
                },
                StepItem {
                    new_tokens: 1,
                    context_tokens: 300,
                    input_tokens: 200,
                    prefill: false,
                },
            ];
            let _ = r.step_time(&BatchShape {
                items: &items,
                prefill_tokens: 64,
                decode_tokens: 1,
            });
        }
        1 => {
            if let Ok(t) = MeasuredTable::parse(text, "fuzz.csv", Extrapolation::Linear) {
                let _ = t.step_time(&BatchShape {
                    items: &[],
                    prefill_tokens: 100,
                    decode_tokens: 7,
                });
            }
        }
        2 => {
            let _ = servesim::fidelity::measured::from_csv(text, "fuzz.csv");
        }
        3 => {
            let _ = servesim::fidelity::measured::from_vllm_json(text);
            let _ = servesim::fidelity::measured::from_inference_perf_json(text);
        }
        _ => {
            let path =
                std::env::temp_dir().join(format!("servesim-fuzz-{}.trace", std::process::id()));
            if std::fs::write(&path, rest).is_err() {
                return;
            }
            for format in [
                TraceFormat::VidurCsv,
                TraceFormat::Mooncake,
                TraceFormat::ServesimCsv,
            ] {
                let spec = TraceSpec {
                    format,
                    file: path.display().to_string(),
                    time_scale: 1.0,
                    rate_scale: 1.0,
                    token_scale: 1.0,
                    hash_block_tokens: 16,
                    tenant: None,
                    slo_class: None,
                    timeout_s: None,
                };
                if let Ok(mut r) = TraceReader::open(&spec, std::path::Path::new(""), 1) {
                    for _ in 0..10_000 {
                        match r.next_row() {
                            Ok(Some(_)) => {}
                            _ => break,
                        }
                    }
                }
            }
            let _ = std::fs::remove_file(&path);
        }
    }
});
