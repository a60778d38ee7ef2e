//! The models embedded in the binary (`assets/models/`), so a scenario can name them from any
//! directory: by id (any case, or a unique prefix) or by the HuggingFace repository id vLLM's
//! `--model` takes (`meta-llama/Llama-2-7b-hf`), each with the `generation_config.json` its
//! publisher ships where we could read one.

use super::ModelConfig;

/// Bundled HuggingFace configs: (id, JSON text).
pub const BUNDLED_MODELS: &[(&str, &str)] = &[
    (
        "codellama-34b-instruct-hf",
        include_str!("../../assets/models/codellama-34b-instruct-hf.json"),
    ),
    (
        "deepseek-v2-lite",
        include_str!("../../assets/models/deepseek-v2-lite.json"),
    ),
    (
        "deepseek-v3",
        include_str!("../../assets/models/deepseek-v3.json"),
    ),
    (
        "gemma-3-27b-it",
        include_str!("../../assets/models/gemma-3-27b-it.json"),
    ),
    (
        "glm-5.2-fp8",
        include_str!("../../assets/models/glm-5.2-fp8.json"),
    ),
    (
        "llama-2-13b-hf",
        include_str!("../../assets/models/llama-2-13b-hf.json"),
    ),
    (
        "llama-2-70b-hf",
        include_str!("../../assets/models/llama-2-70b-hf.json"),
    ),
    (
        "llama-2-7b-hf",
        include_str!("../../assets/models/llama-2-7b-hf.json"),
    ),
    (
        "llama-3.1-70b-instruct",
        include_str!("../../assets/models/llama-3.1-70b-instruct.json"),
    ),
    (
        "llama-3.1-8b-instruct",
        include_str!("../../assets/models/llama-3.1-8b-instruct.json"),
    ),
    (
        "llama-4-scout-17b-16e-instruct-fp8-dynamic",
        include_str!("../../assets/models/llama-4-scout-17b-16e-instruct-fp8-dynamic.json"),
    ),
    (
        "mistral-7b-v0.1",
        include_str!("../../assets/models/mistral-7b-v0.1.json"),
    ),
    (
        "mistral-nemo-instruct-2407",
        include_str!("../../assets/models/mistral-nemo-instruct-2407.json"),
    ),
    (
        "mixtral-8x7b-v0.1",
        include_str!("../../assets/models/mixtral-8x7b-v0.1.json"),
    ),
    (
        "qwen2.5-7b-instruct",
        include_str!("../../assets/models/qwen2.5-7b-instruct.json"),
    ),
    (
        "qwen3-14b",
        include_str!("../../assets/models/qwen3-14b.json"),
    ),
    (
        "qwen3-30b-a3b",
        include_str!("../../assets/models/qwen3-30b-a3b.json"),
    ),
    (
        "qwen3-next-80b-a3b-instruct",
        include_str!("../../assets/models/qwen3-next-80b-a3b-instruct.json"),
    ),
    ("yi-34b", include_str!("../../assets/models/yi-34b.json")),
];

/// Bundled `generation_config.json` files, by model id: the sampling defaults vLLM applies
/// to requests that give none. Only models whose published file we could read are here;
/// the others sample as vLLM's neutral defaults do (no nucleus).
pub const BUNDLED_GENERATION_CONFIGS: &[(&str, &str)] = &[
    (
        "llama-2-13b-hf",
        include_str!("../../assets/models/llama-2-13b-hf.generation_config.json"),
    ),
    (
        "llama-2-70b-hf",
        include_str!("../../assets/models/llama-2-70b-hf.generation_config.json"),
    ),
    (
        "llama-2-7b-hf",
        include_str!("../../assets/models/llama-2-7b-hf.generation_config.json"),
    ),
    (
        "llama-3.1-8b-instruct",
        include_str!("../../assets/models/llama-3.1-8b-instruct.generation_config.json"),
    ),
];

/// The model part of a HuggingFace repository id (`meta-llama/Llama-2-7b-hf`: `Llama-2-7b-hf`),
/// for a name of that form: two parts of letters, digits, `-`, `_` and `.` (as the Hub allows)
/// around one `/`, neither a path's `.` or `..`, no file extension.
pub fn hub_repo_name(name: &str) -> Option<&str> {
    let (org, model) = name.split_once('/')?;
    let plain = |s: &str| {
        !s.is_empty()
            && s != "."
            && s != ".."
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    (plain(org) && plain(model) && !name.ends_with(".json") && !name.ends_with(".ron"))
        .then_some(model)
}

/// The bundled (id, config.json) that `id` names: exactly (case-insensitive), or as the one
/// bundled id it is a prefix of; a HuggingFace repository id by its model part.
fn bundled_entry(id: &str) -> Option<&'static (&'static str, &'static str)> {
    let lower = hub_repo_name(id).unwrap_or(id).to_ascii_lowercase();
    let exact = BUNDLED_MODELS.iter().find(|(k, _)| *k == lower);
    exact.or_else(|| {
        let mut it = BUNDLED_MODELS.iter().filter(|(k, _)| k.starts_with(&lower));
        let first = it.next();
        if it.next().is_some() { None } else { first }
    })
}

impl ModelConfig {
    /// A bundled model by id (case-insensitive; a unique prefix also matches), with its
    /// bundled `generation_config.json` where there is one.
    pub fn bundled(id: &str) -> Option<Self> {
        let found = bundled_entry(id)?;
        let m = Self::from_hf_json(found.0, found.1).expect("bundled model configs parse (tested)");
        Some(
            match BUNDLED_GENERATION_CONFIGS
                .iter()
                .find(|(k, _)| *k == found.0)
            {
                Some((_, text)) => m
                    .with_generation_config(text)
                    .expect("bundled generation configs parse (tested)"),
                None => m,
            },
        )
    }

    /// The full id of the bundled model `name` names (case-insensitive, or a unique prefix),
    /// else `name` itself (a path to a config): two names of one model compare equal.
    pub fn canonical_name(name: &str) -> String {
        bundled_entry(name).map_or_else(|| name.to_string(), |(id, _)| id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundled_model_parses() {
        for (id, _) in BUNDLED_MODELS {
            let m = ModelConfig::bundled(id).unwrap();
            assert!(m.layers > 0 && m.hidden > 0 && m.heads > 0, "{id}");
        }
        assert_eq!(BUNDLED_MODELS.len(), 19);
    }

    #[test]
    fn a_hub_repository_id_names_the_bundled_model_of_its_name() {
        assert_eq!(
            hub_repo_name("meta-llama/Llama-2-7b-hf"),
            Some("Llama-2-7b-hf")
        );
        assert_eq!(
            hub_repo_name("Qwen/Qwen2.5-7B-Instruct"),
            Some("Qwen2.5-7B-Instruct")
        );
        // Paths, not ids: more parts, a dot part, a blank or spaced part, a file.
        for path in [
            "a/b/c",
            "./llama-2-7b-hf",
            "../llama-2-7b-hf",
            " /llama-2-7b-hf",
            "org/",
            "/llama-2-7b-hf",
            "org/llama-2-7b-hf.json",
            "org\\llama-2-7b-hf",
        ] {
            assert_eq!(hub_repo_name(path), None, "{path}");
        }
        assert_eq!(
            ModelConfig::canonical_name("meta-llama/Llama-2-7b-hf"),
            "llama-2-7b-hf"
        );
        assert_eq!(
            ModelConfig::bundled("mistralai/Mixtral-8x7B-v0.1")
                .unwrap()
                .id,
            "mixtral-8x7b-v0.1"
        );
    }
}
