//! One table from Hugging Face's tensor names to Tessera's parameter paths, and the two layout
//! changes between them: `transformers`' linear weights are `[out, in]` where Tessera's are
//! `[in, out]` (a transpose), and its separate `q_proj`, `k_proj`, `v_proj` are Tessera's fused
//! `qkv`, whose columns are grouped by key/value head (see [`crate::layers::Attention::spec`]).
//! Import and export both read the table; no code is written per tensor.

use crate::decoder::DecoderConfig;

/// How a Hugging Face tensor lies in Tessera's parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The same array.
    Same,
    /// A linear weight: Tessera's `[in, out]` is Hugging Face's `[out, in]` transposed.
    Transpose,
    /// One of the query, key and value projections' weights (transposed) or biases, fused into
    /// Tessera's `qkv`.
    Qkv(Part),
}

/// Which of the fused projections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// `q_proj`.
    Query,
    /// `k_proj`.
    Key,
    /// `v_proj`.
    Value,
}

/// The table: (Hugging Face name, Tessera path, layout), `{i}` standing for a layer index.
/// Biases and the head appear only where the model has them (see [`hf_tensors`]).
const TABLE: &[(&str, &str, Layout)] = &[
    (
        "model.embed_tokens.weight",
        "embed.tokens.table",
        Layout::Same,
    ),
    (
        "model.layers.{i}.input_layernorm.weight",
        "blocks.{i}.norm1.gain",
        Layout::Same,
    ),
    (
        "model.layers.{i}.self_attn.q_proj.weight",
        "blocks.{i}.attn.qkv.w",
        Layout::Qkv(Part::Query),
    ),
    (
        "model.layers.{i}.self_attn.k_proj.weight",
        "blocks.{i}.attn.qkv.w",
        Layout::Qkv(Part::Key),
    ),
    (
        "model.layers.{i}.self_attn.v_proj.weight",
        "blocks.{i}.attn.qkv.w",
        Layout::Qkv(Part::Value),
    ),
    (
        "model.layers.{i}.self_attn.q_proj.bias",
        "blocks.{i}.attn.qkv.b",
        Layout::Qkv(Part::Query),
    ),
    (
        "model.layers.{i}.self_attn.k_proj.bias",
        "blocks.{i}.attn.qkv.b",
        Layout::Qkv(Part::Key),
    ),
    (
        "model.layers.{i}.self_attn.v_proj.bias",
        "blocks.{i}.attn.qkv.b",
        Layout::Qkv(Part::Value),
    ),
    (
        "model.layers.{i}.self_attn.o_proj.weight",
        "blocks.{i}.attn.out.w",
        Layout::Transpose,
    ),
    (
        "model.layers.{i}.self_attn.o_proj.bias",
        "blocks.{i}.attn.out.b",
        Layout::Same,
    ),
    (
        "model.layers.{i}.post_attention_layernorm.weight",
        "blocks.{i}.norm2.gain",
        Layout::Same,
    ),
    (
        "model.layers.{i}.mlp.gate_proj.weight",
        "blocks.{i}.mlp.gate.w",
        Layout::Transpose,
    ),
    (
        "model.layers.{i}.mlp.gate_proj.bias",
        "blocks.{i}.mlp.gate.b",
        Layout::Same,
    ),
    (
        "model.layers.{i}.mlp.up_proj.weight",
        "blocks.{i}.mlp.up.w",
        Layout::Transpose,
    ),
    (
        "model.layers.{i}.mlp.up_proj.bias",
        "blocks.{i}.mlp.up.b",
        Layout::Same,
    ),
    (
        "model.layers.{i}.mlp.down_proj.weight",
        "blocks.{i}.mlp.down.w",
        Layout::Transpose,
    ),
    (
        "model.layers.{i}.mlp.down_proj.bias",
        "blocks.{i}.mlp.down.b",
        Layout::Same,
    ),
    ("model.norm.weight", "final_norm.gain", Layout::Same),
    ("lm_head.weight", "head.w", Layout::Transpose),
];

/// One Hugging Face tensor of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfTensor {
    /// Its name in `transformers`.
    pub name: String,
    /// The Tessera parameter it is (part of).
    pub path: String,
    /// How it lies there.
    pub layout: Layout,
    /// Its shape in `transformers`.
    pub shape: Vec<i64>,
}

/// The tensors of `config`'s Hugging Face checkpoint, in the table's order, layer by layer:
/// exactly those whose Tessera parameter the model has.
pub fn hf_tensors(config: &DecoderConfig) -> Vec<HfTensor> {
    let shapes = config.spec().map(&mut |_, p| p.shape.clone());
    let mut out = Vec::new();
    let mut push = |hf: &str, ours: &str, layout: Layout, i: Option<usize>| {
        let fill = |s: &str| match i {
            Some(i) => s.replace("{i}", &i.to_string()),
            None => s.to_string(),
        };
        let (name, path) = (fill(hf), fill(ours));
        if let Ok(ours) = shapes.leaf(&path) {
            let shape = hf_shape(config, ours, layout);
            out.push(HfTensor {
                name,
                path,
                layout,
                shape,
            });
        }
    };
    // The embedding, the layers, then the final norm and the head.
    for &(hf, ours, layout) in TABLE.iter().filter(|e| !e.0.contains("{i}")).take(1) {
        push(hf, ours, layout, None);
    }
    for i in 0..config.layers {
        for &(hf, ours, layout) in TABLE.iter().filter(|e| e.0.contains("{i}")) {
            push(hf, ours, layout, Some(i));
        }
    }
    for &(hf, ours, layout) in TABLE.iter().filter(|e| !e.0.contains("{i}")).skip(1) {
        push(hf, ours, layout, None);
    }
    out
}

/// A tensor's shape in `transformers`, from the shape of the Tessera parameter it lies in.
fn hf_shape(config: &DecoderConfig, ours: &[i64], layout: Layout) -> Vec<i64> {
    match layout {
        Layout::Same => ours.to_vec(),
        Layout::Transpose => ours.iter().rev().copied().collect(),
        // A weight `[rows, d]` where `qkv.w` is `[d, cols]`; a bias `[rows]`.
        Layout::Qkv(part) => {
            let mut shape = vec![qkv_rows(config, part)];
            if ours.len() == 2 {
                shape.push(config.d_model);
            }
            shape
        }
    }
}

/// The rows of projection `part` in `transformers` (its heads × head_dim).
fn qkv_rows(config: &DecoderConfig, part: Part) -> i64 {
    match part {
        Part::Query => config.heads * config.head_dim,
        Part::Key | Part::Value => config.kv_heads * config.head_dim,
    }
}

/// The columns of Tessera's fused `qkv`: `kv_heads × (group + 2) × head_dim`.
fn qkv_cols(config: &DecoderConfig) -> i64 {
    config.kv_heads * (config.heads / config.kv_heads.max(1) + 2) * config.head_dim
}

/// For column `c` of Tessera's fused `qkv` (of `config`), which projection it comes from and
/// which row of that projection.
fn qkv_source(config: &DecoderConfig, c: i64) -> (Part, i64) {
    let (dh, g) = (config.head_dim, config.heads / config.kv_heads.max(1));
    let (e, slot) = (c % dh, c / dh);
    let (j, s) = (slot / (g + 2), slot % (g + 2));
    if s < g {
        (Part::Query, (j * g + s) * dh + e)
    } else if s == g {
        (Part::Key, j * dh + e)
    } else {
        (Part::Value, j * dh + e)
    }
}

/// Tessera's fused `qkv` weight (`[d, cols]`, row-major) or bias (`[cols]`, with `d = 1`) from
/// the three projections' arrays in `transformers`' layout (`[rows, d]` or `[rows]`).
pub fn fuse_qkv(config: &DecoderConfig, q: &[f32], k: &[f32], v: &[f32], d: i64) -> Vec<f32> {
    let cols = qkv_cols(config);
    let mut out = vec![0.0f32; (d * cols) as usize];
    for c in 0..cols {
        let (part, row) = qkv_source(config, c);
        let src = match part {
            Part::Query => q,
            Part::Key => k,
            Part::Value => v,
        };
        for i in 0..d {
            out[(i * cols + c) as usize] = src[(row * d + i) as usize];
        }
    }
    out
}

/// One projection's array in `transformers`' layout (`[rows, d]`, or `[rows]` with `d = 1`)
/// from Tessera's fused `qkv` (the inverse of [`fuse_qkv`]).
pub fn split_qkv(config: &DecoderConfig, fused: &[f32], part: Part, d: i64) -> Vec<f32> {
    let (cols, rows) = (qkv_cols(config), qkv_rows(config, part));
    let mut out = vec![0.0f32; (rows * d) as usize];
    for c in 0..cols {
        let (from, row) = qkv_source(config, c);
        if from == part {
            for i in 0..d {
                out[(row * d + i) as usize] = fused[(i * cols + c) as usize];
            }
        }
    }
    out
}

/// `[rows, cols]` row-major, transposed.
pub fn transpose(x: &[f32], rows: i64, cols: i64) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[(c * rows + r) as usize] = x[(r * cols + c) as usize];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fusing_then_splitting_gives_the_projections_back() {
        let mut config = DecoderConfig::llama(16, 1, 8, 4, 4);
        (config.kv_heads, config.head_dim) = (2, 4);
        let d = 8;
        let q: Vec<f32> = (0..16 * d).map(|x| x as f32).collect();
        let k: Vec<f32> = (0..8 * d).map(|x| 1000.0 + x as f32).collect();
        let v: Vec<f32> = (0..8 * d).map(|x| 2000.0 + x as f32).collect();
        let fused = fuse_qkv(&config, &q, &k, &v, d as i64);
        // Group 0: query heads 0 and 1, key 0, value 0; each 4 columns.
        assert_eq!(fused[0], q[0]);
        assert_eq!(fused[4], q[4 * d]);
        assert_eq!(fused[8], k[0]);
        assert_eq!(fused[12], v[0]);
        assert_eq!(fused[16], q[8 * d]);
        assert_eq!(split_qkv(&config, &fused, Part::Query, d as i64), q);
        assert_eq!(split_qkv(&config, &fused, Part::Key, d as i64), k);
        assert_eq!(split_qkv(&config, &fused, Part::Value, d as i64), v);
    }

    #[test]
    fn the_table_names_every_parameter_of_a_model_with_biases() {
        let mut config = DecoderConfig::llama(16, 2, 8, 2, 4);
        (config.qkv_bias, config.out_bias, config.mlp_bias) = (true, true, true);
        let tensors = hf_tensors(&config);
        let mut covered: Vec<String> = tensors.iter().map(|t| t.path.clone()).collect();
        covered.dedup();
        assert_eq!(covered, config.spec().paths());
        let o = tensors
            .iter()
            .find(|t| t.name == "model.layers.1.self_attn.o_proj.weight")
            .unwrap_or_else(|| panic!("{tensors:?}"));
        assert_eq!(o.shape, vec![8, 8]);
        assert!(
            !hf_tensors(&config.tied())
                .iter()
                .any(|t| t.name == "lm_head.weight")
        );
    }
}
