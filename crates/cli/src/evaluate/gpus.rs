//! GPU names as nvidia-smi prints them ("NVIDIA L4", "NVIDIA A10G", "Tesla T4",
//! "NVIDIA H100 80GB HBM3") mapped to the GPU models of the built-in catalogue.

use gpushare_core::catalog::INSTANCE_TYPES;

/// The catalogue's GPU models, sorted, each once.
pub fn catalogue_models() -> Vec<&'static str> {
    let mut m: Vec<&'static str> = INSTANCE_TYPES
        .iter()
        .map(|t| t.gpu_model)
        .filter(|m| !m.is_empty())
        .collect();
    m.sort_unstable();
    m.dedup();
    m
}

/// The catalogue model of an nvidia-smi GPU name, or of a catalogue model name itself
/// (`l4`, `a10g`); `None` when the catalogue has no instance type with that GPU.
pub fn model_of(name: &str) -> Option<&'static str> {
    let lower = name.trim().to_ascii_lowercase();
    let models = catalogue_models();
    if let Some(m) = models.iter().find(|m| **m == lower) {
        return Some(m);
    }
    let tokens: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .collect();
    let has = |t: &str| tokens.contains(&t);
    let model = if has("rtx") && has("pro") && has("6000") {
        "rtx-pro-server-6000"
    } else if has("rtx") && has("pro") && has("4500") {
        "rtx-pro-4500"
    } else {
        // A token naming the model exactly: "A10G", "L40S", "L4", "T4G", "H100", ...
        // (an "A100-SXM4-80GB" splits into "a100", "sxm4", "80gb").
        tokens.iter().copied().find(|t| models.contains(t))?
    };
    models.into_iter().find(|m| *m == model)
}

#[cfg(test)]
mod tests {
    use super::model_of;

    #[test]
    fn nvidia_smi_names_map_to_catalogue_models() {
        for (name, model) in [
            ("NVIDIA L4", "l4"),
            ("NVIDIA A10G", "a10g"),
            ("Tesla T4", "t4"),
            ("NVIDIA T4G", "t4g"),
            ("NVIDIA L40S", "l40s"),
            ("NVIDIA H100 80GB HBM3", "h100"),
            ("NVIDIA A100-SXM4-40GB", "a100"),
            ("Tesla V100-SXM2-16GB", "v100"),
            ("l4", "l4"),
        ] {
            assert_eq!(model_of(name), Some(model), "{name}");
        }
    }

    #[test]
    fn unknown_names_are_none() {
        for name in ["NVIDIA GeForce RTX 4090", "Quadro P4000", "", "L4x"] {
            assert_eq!(model_of(name), None, "{name}");
        }
    }
}
