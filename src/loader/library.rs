//! What a group names from the library: its model (a bundled id, the HuggingFace repository
//! id vLLM's `--model` takes, a `config.json` or a model's directory, with the
//! `generation_config.json` beside it) and its GPU (a bundled id or alias, or a profile file),
//! and the hint a name that matches nothing gets. Used by [`resolve_group`](super::resolve_group).

use std::path::{Path, PathBuf};

use crate::model::{BUNDLED_MODELS, GpuProfile, ModelConfig, bundled_gpus, find_gpu};
use crate::scenario::did_you_mean;

fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".json") || s.ends_with(".ron")
}

/// Whether a group's `model` or `gpu` names a path: it looks like one (a `/` or `\`, a
/// `.json` or `.ron` ending), or it is no bundled name (`bundled`) and names something beside
/// the scenario (`my-model`, a model's directory).
fn names_a_path(name: &str, base: &Path, bundled: impl FnOnce(&str) -> bool) -> bool {
    looks_like_path(name) || (!name.is_empty() && !bundled(name) && base.join(name).exists())
}

fn is_bundled_model(name: &str) -> bool {
    ModelConfig::bundled(name).is_some()
}

fn is_bundled_gpu(name: &str) -> bool {
    find_gpu(name).is_some()
}

/// The files a group's model and GPU are read from when they name files (a model's
/// `config.json` and the `generation_config.json` beside it, a GPU profile), by field path:
/// what [`input_files`](super::input_files) adds to the scenario's own.
pub(super) fn library_files(
    g: &crate::scenario::InstanceGroup,
    i: usize,
    base: &Path,
) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    if let Some(name) = g
        .model
        .as_deref()
        .filter(|m| names_a_path(m, base, is_bundled_model))
    {
        let path = base.join(name);
        let config = if path.is_dir() {
            path.join("config.json")
        } else {
            path
        };
        if config.exists() {
            let field = format!("cluster.groups[{i}].model");
            files.extend(generation_config_beside(&config).map(|g| (field.clone(), g)));
            files.push((field, config));
        }
    }
    if let Some(name) = g
        .gpu
        .as_deref()
        .filter(|n| names_a_path(n, base, is_bundled_gpu))
    {
        let path = base.join(name);
        if path.exists() {
            files.push((format!("cluster.groups[{i}].gpu"), path));
        }
    }
    files
}

pub(super) fn load_model(name: &str, base: &Path) -> Result<ModelConfig, String> {
    if names_a_path(name, base, is_bundled_model) {
        let mut path = base.join(name);
        // `meta-llama/Llama-2-7b-hf`, as vLLM's `--model` takes it, where no such path
        // exists: the bundled model of that name (nothing is fetched from the Hub).
        if !path.exists()
            && let Some(repo) = crate::model::hub_repo_name(name)
        {
            return ModelConfig::bundled(repo).ok_or_else(|| match meant_model(repo) {
                Some(m) => format!(
                    "no file {} and no bundled model \"{repo}\"; {m}",
                    path.display()
                ),
                None => format!(
                    "no file {} and no bundled model \"{repo}\"; servesim fetches nothing \
                     from the HuggingFace Hub: give the path of the model's config.json (with \
                     its generation_config.json beside it)",
                    path.display()
                ),
            });
        }
        // A model's directory, as vLLM loads one: its config.json.
        if path.is_dir() {
            let config = path.join("config.json");
            if !config.exists() {
                return Err(format!(
                    "{} is a directory without a config.json (a model's directory holds one)",
                    path.display()
                ));
            }
            path = config;
        }
        let text = crate::input::read_text(&path)?;
        // Named by its file, or by its directory when the file is a model directory's
        // config.json.
        let named = match path.file_stem() {
            Some(s) if s == "config" => path.parent().and_then(Path::file_name),
            stem => stem,
        };
        let id = named.map_or(name.to_string(), |s| s.to_string_lossy().into_owned());
        let m = ModelConfig::from_hf_json(&id, &text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        return match generation_config_beside(&path) {
            Some(g) => {
                let text = crate::input::read_text(&g)?;
                m.with_generation_config(&text)
                    .map_err(|e| format!("{}: {e}", g.display()))
            }
            None => Ok(m),
        };
    }
    ModelConfig::bundled(name).ok_or_else(|| match meant_model(name) {
        Some(m) => format!("unknown model \"{name}\"; {m} (`servesim list models`)"),
        None => format!(
            "unknown model \"{name}\" (`servesim list models` shows the bundled ones; or give \
             a path to a config.json)"
        ),
    })
}

/// What a model name that names no bundled model may have meant: a bundled id a few edits
/// away, or the bundled base of a fine-tune (`mixtral-8x7b-instruct-v0.1`, `llama-2-7b-chat-hf`:
/// the same architecture, not always the same sampling defaults).
fn meant_model(name: &str) -> Option<String> {
    let ids = || BUNDLED_MODELS.iter().map(|(k, _)| *k);
    if let Some(s) = did_you_mean(&name.to_ascii_lowercase(), ids()) {
        return Some(format!("did you mean \"{s}\"?"));
    }
    let base = |id: &str| -> String {
        id.to_ascii_lowercase()
            .split('-')
            .filter(|w| !matches!(*w, "instruct" | "chat" | "it"))
            .collect::<Vec<_>>()
            .join("-")
    };
    let wanted = base(name);
    let found = ids().find(|id| base(id) == wanted && !id.eq_ignore_ascii_case(name))?;
    Some(format!(
        "servesim bundles \"{found}\", the same model with or without instruction tuning, \
         which as a rule keeps its architecture (its steps, its KV cache): name it, or give the \
         model's own config.json (with generation_config.json, for its sampling defaults)"
    ))
}

/// The `generation_config.json` a model config file brings, as vLLM finds it in a model's
/// directory: `generation_config.json` beside a `config.json`, else `<name>.generation_config.json`
/// beside `<name>.json` (as the bundled models are kept).
fn generation_config_beside(config: &Path) -> Option<PathBuf> {
    let dir = config.parent()?;
    let stem = config.file_stem()?.to_string_lossy();
    let name = if stem == "config" {
        "generation_config.json".to_string()
    } else {
        format!("{stem}.generation_config.json")
    };
    Some(dir.join(name)).filter(|p| p.is_file())
}

pub(super) fn load_gpu(name: &str, base: &Path) -> Result<GpuProfile, String> {
    if names_a_path(name, base, is_bundled_gpu) {
        let path = base.join(name);
        let text = crate::input::read_text(&path)?;
        // As scenarios: an optional field takes its value bare or in `Some(…)`.
        let gpu: GpuProfile = ron::Options::default()
            .with_default_extension(ron::extensions::Extensions::IMPLICIT_SOME)
            .from_str(&text)
            .map_err(|e| {
                let (message, _) = super::explain::explain_ron_error(&e.code, "");
                format!(
                    "{}:{}: {message}: not a GPU profile as servesim reads one (the fields of an \
                     entry of assets/gpus.ron; `servesim list hardware` shows the bundled GPUs)",
                    path.display(),
                    e.span.start
                )
            })?;
        let p = gpu.problems();
        return if p.is_empty() {
            Ok(gpu)
        } else {
            Err(format!("{}: {}", path.display(), p.join("; ")))
        };
    }
    find_gpu(name).ok_or_else(|| {
        let all = bundled_gpus();
        let names: Vec<&str> = all.iter().map(|g| g.id.as_str()).collect();
        let kin = crate::model::gpus_of_chip(name);
        if !kin.is_empty() {
            let ids: Vec<&str> = kin.iter().map(|g| g.id.as_str()).collect();
            return format!(
                "unknown GPU \"{name}\"; of that chip servesim bundles {}: name {} if it is your \
                 part (`servesim list hardware` shows peaks and other names); another part \
                 (a PCIe or NVL card, another memory size) has its own peaks: give them as a GPU \
                 profile file",
                ids.join(" and "),
                if ids.len() == 1 { "it" } else { "one" }
            );
        }
        // Compared as names match (`mi300` is one letter from `MI300X`), answered by id.
        let keys: Vec<String> = names.iter().map(|n| crate::model::gpu_key(n)).collect();
        let meant = did_you_mean(
            &crate::model::gpu_key(name),
            keys.iter().map(String::as_str),
        )
        .and_then(|k| keys.iter().position(|x| x == k))
        .map(|i| names[i]);
        match meant {
            Some(s) => {
                format!("unknown GPU \"{name}\"; did you mean \"{s}\"? (`servesim list hardware`)")
            }
            None => format!("unknown GPU \"{name}\"; bundled: {}", names.join(", ")),
        }
    })
}
