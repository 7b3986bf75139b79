//! Parameter layouts for tensor parallelism (Megatron style) and fully sharded data parallelism
//! (FSDP) over the mesh axes of a device group: [`DecoderConfig::param_specs`] gives one
//! `PartitionSpec` per parameter, which a caller hands to `jit` or `mpmd_jit` as the
//! parameters' (and their optimizer state's) shardings; XLA's partitioner then inserts the
//! collectives.
//!
//! Tensor parallelism over [`ParallelAxes::tensor`] splits each block in two halves of one
//! all-reduce each: the attention's `qkv` and the MLP's up-projections (`fc`, or Llama's `gate`
//! and `up`) are column-parallel (their output features split, biases too: each device holds
//! whole heads, as the `qkv` columns are head-major), the attention's `out` and the MLP's
//! down-projection (`proj`, `down`) row-parallel (their input features split, so their products
//! are partial sums that one all-reduce completes). The output head is column-parallel over the
//! vocabulary (the loss's softmax then reduces across the axis) and the token embedding
//! vocabulary-parallel (its rows split; a lookup is a masked local gather and an all-reduce).
//! Position embeddings, norms and the row-parallel layers' biases are replicated over it.
//!
//! FSDP over [`ParallelAxes::fsdp`] additionally splits every parameter's first dimension that
//! tensor parallelism leaves whole and whose size the axis divides (the matrices' other
//! dimension; a parameter with no such dimension stays replicated over it), so each device
//! holds `1 / (tensor × fsdp)` of the matrices; XLA gathers them where they are used.

use tessera_sharding::{DimSpec, PartitionSpec};

use crate::decoder::DecoderConfig;
use crate::error::{NnError, Result};
use crate::layers::ParamSpec;
use crate::tree::Tree;

/// A mesh axis: its name and size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeshAxis {
    /// The axis name (e.g. `model`).
    pub name: String,
    /// Its size (devices along it).
    pub size: i64,
}

/// The axes of a group's mesh that parameters are sharded over.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParallelAxes {
    /// The tensor-parallel axis (Megatron), if any.
    pub tensor: Option<MeshAxis>,
    /// The axis FSDP shards parameters over (usually the data-parallel axis), if any.
    pub fsdp: Option<MeshAxis>,
}

impl ParallelAxes {
    /// No sharding: every parameter replicated.
    pub fn replicated() -> Self {
        ParallelAxes::default()
    }

    /// Tensor parallelism over the axis `name` of `size` devices.
    pub fn tensor(name: &str, size: i64) -> Self {
        ParallelAxes {
            tensor: Some(MeshAxis {
                name: name.into(),
                size,
            }),
            fsdp: None,
        }
    }

    /// The same axes, with FSDP over the axis `name` of `size` devices.
    pub fn with_fsdp(self, name: &str, size: i64) -> Self {
        ParallelAxes {
            fsdp: Some(MeshAxis {
                name: name.into(),
                size,
            }),
            ..self
        }
    }
}

/// How tensor parallelism splits a parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Output features split: `w` on dimension 1, `b` on 0.
    Column,
    /// Input features split: `w` on dimension 0; `b` whole.
    Row,
    /// The rows of a table split (Megatron's vocabulary-parallel embedding): dimension 0.
    Vocab,
    /// Not split.
    Whole,
}

/// The tensor-parallel role of the parameter at `path`.
fn role(path: &str) -> Role {
    let layer = path.rsplit_once('.').map_or("", |(layer, _)| layer);
    let column = ["attn.qkv", "mlp.fc", "mlp.gate", "mlp.up"];
    let row = ["attn.out", "mlp.proj", "mlp.down"];
    if column.iter().any(|c| layer.ends_with(c)) || layer == "head" {
        Role::Column
    } else if layer == "embed.tokens" {
        Role::Vocab
    } else if row.iter().any(|r| layer.ends_with(r)) {
        Role::Row
    } else {
        Role::Whole
    }
}

impl DecoderConfig {
    /// Each parameter's `PartitionSpec` over a group's mesh with `axes` (see the module docs),
    /// in the structure of [`DecoderConfig::spec`]. Refused, naming the parameter: a tensor
    /// axis whose size does not divide the heads or the dimension it splits.
    pub fn param_specs(&self, axes: &ParallelAxes) -> Result<Tree<PartitionSpec>> {
        self.validate()?;
        if let Some(t) = &axes.tensor
            && (t.size < 1 || self.kv_heads % t.size != 0)
        {
            return Err(NnError::Parallel {
                param: "blocks.*.attn.qkv.w".into(),
                problem: format!(
                    "the {} {}heads cannot be split evenly over the {} devices of axis '{}'",
                    self.kv_heads,
                    if self.kv_heads == self.heads {
                        ""
                    } else {
                        "key/value "
                    },
                    t.size,
                    t.name
                ),
                fix: "pick a head count the tensor axis divides, or a smaller tensor axis".into(),
            });
        }
        self.spec()
            .try_map(&mut |path, p| param_spec(path, p, axes))
    }
}

/// The spec of one parameter.
fn param_spec(path: &str, p: &ParamSpec, axes: &ParallelAxes) -> Result<PartitionSpec> {
    let mut dims = vec![DimSpec::Replicated; p.shape.len()];
    if let Some(t) = &axes.tensor {
        let dim = match (role(path), p.shape.len()) {
            (Role::Column, 2) => Some(1),
            (Role::Column, 1) | (Role::Row, 2) | (Role::Vocab, 2) => Some(0),
            _ => None,
        };
        if let Some(dim) = dim {
            if p.shape[dim] % t.size != 0 {
                return Err(NnError::Parallel {
                    param: path.into(),
                    problem: format!(
                        "dimension {dim} has size {}, which the {} devices of axis '{}' do not \
                         divide",
                        p.shape[dim], t.size, t.name
                    ),
                    fix: "pick sizes (d_model, ffn, the vocabulary) the tensor axis divides".into(),
                });
            }
            dims[dim] = DimSpec::from_axes(&[&t.name]);
        }
    }
    if let Some(f) = &axes.fsdp {
        let free = (0..p.shape.len())
            .find(|&d| dims[d] == DimSpec::Replicated && f.size > 0 && p.shape[d] % f.size == 0);
        if let Some(d) = free {
            dims[d] = DimSpec::from_axes(&[&f.name]);
        }
    }
    Ok(PartitionSpec::new(dims))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn specs(config: &DecoderConfig, axes: &ParallelAxes) -> Vec<(String, String)> {
        let tree = config.param_specs(axes).unwrap();
        tree.paths()
            .into_iter()
            .zip(tree.leaves().iter().map(|s| s.to_string()))
            .collect()
    }

    fn spec_of(all: &[(String, String)], path: &str) -> String {
        all.iter()
            .find(|(p, _)| p == path)
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no {path}"))
    }

    #[test]
    fn megatron_splits_columns_then_rows() {
        let gpt = DecoderConfig::gpt2(16, 2, 8, 2, 4);
        let all = specs(&gpt, &ParallelAxes::tensor("model", 2));
        assert_eq!(spec_of(&all, "blocks.0.attn.qkv.w"), "P(None, 'model')");
        assert_eq!(spec_of(&all, "blocks.0.attn.qkv.b"), "P('model',)");
        assert_eq!(spec_of(&all, "blocks.1.attn.out.w"), "P('model', None)");
        assert_eq!(spec_of(&all, "blocks.1.attn.out.b"), "P(None,)");
        assert_eq!(spec_of(&all, "blocks.0.mlp.fc.w"), "P(None, 'model')");
        assert_eq!(spec_of(&all, "blocks.0.mlp.proj.w"), "P('model', None)");
        assert_eq!(spec_of(&all, "head.w"), "P(None, 'model')");
        assert_eq!(spec_of(&all, "embed.tokens.table"), "P('model', None)");
        assert_eq!(spec_of(&all, "embed.positions"), "P(None, None)");
        assert_eq!(spec_of(&all, "final_norm.gain"), "P(None,)");
        let llama = DecoderConfig::llama(16, 1, 8, 2, 4);
        let all = specs(&llama, &ParallelAxes::tensor("model", 2));
        assert_eq!(spec_of(&all, "blocks.0.mlp.gate.w"), "P(None, 'model')");
        assert_eq!(spec_of(&all, "blocks.0.mlp.down.w"), "P('model', None)");
    }

    #[test]
    fn fsdp_splits_the_dimension_tensor_parallelism_leaves() {
        let gpt = DecoderConfig::gpt2(16, 1, 8, 2, 4);
        let axes = ParallelAxes::tensor("model", 2).with_fsdp("data", 2);
        let all = specs(&gpt, &axes);
        assert_eq!(spec_of(&all, "blocks.0.attn.qkv.w"), "P('data', 'model')");
        assert_eq!(spec_of(&all, "blocks.0.attn.out.w"), "P('model', 'data')");
        assert_eq!(spec_of(&all, "blocks.0.attn.out.b"), "P('data',)");
        assert_eq!(spec_of(&all, "blocks.0.attn.qkv.b"), "P('model',)");
        assert_eq!(spec_of(&all, "embed.tokens.table"), "P('model', 'data')");
        assert_eq!(spec_of(&all, "embed.positions"), "P('data', None)");
        // Only FSDP: each parameter split on its first dimension the axis divides, if any.
        let gpt = DecoderConfig::gpt2(16, 1, 6, 2, 4);
        let all = specs(&gpt, &ParallelAxes::default().with_fsdp("data", 3));
        assert_eq!(spec_of(&all, "embed.positions"), "P(None, 'data')");
        assert_eq!(spec_of(&all, "blocks.0.mlp.fc.w"), "P('data', None)");
        let all = specs(&gpt, &ParallelAxes::default().with_fsdp("data", 5));
        assert_eq!(spec_of(&all, "embed.positions"), "P(None, None)");
    }

    #[test]
    fn a_tensor_axis_that_does_not_divide_is_refused_naming_the_parameter() {
        let gpt = DecoderConfig::gpt2(16, 1, 8, 2, 4);
        let err = gpt
            .param_specs(&ParallelAxes::tensor("model", 4))
            .unwrap_err();
        assert!(err.to_string().contains("qkv"), "{err}");
        assert!(err.to_string().contains("'model'"), "{err}");
        let odd = DecoderConfig::gpt2(15, 1, 8, 2, 4);
        let err = odd
            .param_specs(&ParallelAxes::tensor("model", 2))
            .unwrap_err();
        // The first parameter split over the vocabulary (the embedding table, or the head).
        let named = ["embed.tokens.table", "head.w"];
        assert!(named.iter().any(|n| err.to_string().contains(n)), "{err}");
        assert!(err.to_string().contains("size 15"), "{err}");
    }
}
