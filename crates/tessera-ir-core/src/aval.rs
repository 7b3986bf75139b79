//! Abstract values: dtype, shape and weak type (JAX's `ShapedArray`), plus the sharding a value
//! may carry, the manual mesh axes it varies over (JAX's `vma`, used inside `shard_map`) and the
//! explicit-sharding annotations JAX prints in types on an `Explicit` mesh ([`ExplicitType`]:
//! `f32[8@pp,4]{V:pp, R:tp}`).
//!
//! Text form (JAX's `str_short_aval`): each dimension, followed by `@axis` or `@(a,b)` where an
//! explicit sharding splits it; then, when any is non-empty, `{V:..., R:..., U:...}` with the
//! varying, reduced and unreduced axes (one axis bare, several in parentheses). JAX orders
//! several axes by the mesh; Tessera prints them sorted by name (the same set).

use std::collections::BTreeSet;
use std::fmt;

use tessera_sharding::{DimSpec, NamedSharding, PartitionSpec};

use crate::dtype::DType;
use crate::error::{IrError, Result};

/// The type of an IR value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapedArray {
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<i64>,
    /// A weakly typed value (a Python scalar) that adopts its partner's dtype in binary ops.
    pub weak_type: bool,
    /// The manual mesh axes the value varies over (empty outside `shard_map`).
    pub vma: BTreeSet<String>,
    /// The sharding the value is laid out by, where one is known.
    pub sharding: Option<Box<NamedSharding>>,
    /// The explicit-sharding annotations of the type, where the text gives any.
    pub explicit: Option<Box<ExplicitType>>,
}

/// What JAX prints of a value's explicit sharding in its type: the mesh axes splitting each
/// dimension (`8@pp`) and the reduced (`R:`) and unreduced (`U:`) axes. They describe the
/// layout, not the values: the interpreter ignores them. The primitives' sharding rules
/// (`prim/explicit.rs`) derive the dimensions' axes and the verifier checks printed ones; the
/// rules of the reduced/unreduced collectives (`preduced`, `unreduced_psum`,
/// `vary_unreduced_cast_p`, `reduced_vary_cast_p`, `all_gather_reduced`,
/// `unreduced_reduce_scatter`) and of `shard_map` on an explicit mesh derive the reduced and
/// unreduced axes, and `prim/explicit_reduced.rs` those of the other primitives JAX has rules
/// for (unary operations, `mul`, `dot_general`, `reshape`, `slice`, `reduce_sum`,
/// `concatenate`, `add`/`add_any`); the remaining operations drop them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExplicitType {
    /// Per dimension, the mesh axes splitting it, major to minor (empty: not split); empty
    /// when no dimension is split.
    pub dims: Vec<Vec<String>>,
    /// The axes over which the value is reduced (`R:`): equal on every device of them.
    pub reduced: BTreeSet<String>,
    /// The axes over which the value is unreduced (`U:`): a sum still owed over them.
    pub unreduced: BTreeSet<String>,
}

impl ExplicitType {
    /// Whether it says nothing.
    pub fn is_empty(&self) -> bool {
        self.dims.iter().all(Vec::is_empty) && self.reduced.is_empty() && self.unreduced.is_empty()
    }
}

/// One axis bare, several as `(a,b)`: how JAX prints a set of mesh axes in a type.
fn axes_text<'a>(axes: impl IntoIterator<Item = &'a String>) -> String {
    let axes: Vec<&str> = axes.into_iter().map(String::as_str).collect();
    match axes.as_slice() {
        [one] => (*one).to_owned(),
        many => format!("({})", many.join(",")),
    }
}

impl ShapedArray {
    /// A strongly typed array.
    pub fn new(dtype: DType, shape: &[i64]) -> Self {
        ShapedArray {
            dtype,
            shape: shape.to_vec(),
            weak_type: false,
            vma: Default::default(),
            sharding: None,
            explicit: None,
        }
    }

    /// The abstract token (JAX's `abstract_token`, printed `Tok`): a `psend`'s result.
    pub fn token() -> Self {
        ShapedArray::new(DType::Token, &[])
    }

    /// A scalar.
    pub fn scalar(dtype: DType) -> Self {
        ShapedArray::new(dtype, &[])
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn size(&self) -> usize {
        self.shape.iter().map(|&d| d.max(0) as usize).product()
    }

    /// The same shape with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        ShapedArray {
            dtype,
            shape: self.shape.clone(),
            weak_type: false,
            vma: Default::default(),
            sharding: None,
            explicit: None,
        }
    }

    /// The reduced axes of an explicit type (empty when none).
    pub fn reduced(&self) -> BTreeSet<String> {
        self.explicit
            .as_ref()
            .map(|e| e.reduced.clone())
            .unwrap_or_default()
    }

    /// The unreduced axes of an explicit type (empty when none).
    pub fn unreduced(&self) -> BTreeSet<String> {
        self.explicit
            .as_ref()
            .map(|e| e.unreduced.clone())
            .unwrap_or_default()
    }

    /// Sets the reduced and unreduced axes (keeping the dimensions' axes), dropping an
    /// explicit type that then says nothing.
    pub fn set_reduced_unreduced(
        &mut self,
        reduced: BTreeSet<String>,
        unreduced: BTreeSet<String>,
    ) {
        let mut e = self.explicit.take().map(|e| *e).unwrap_or_default();
        e.reduced = reduced;
        e.unreduced = unreduced;
        if !e.is_empty() {
            self.explicit = Some(Box::new(e));
        }
    }

    /// This type with the explicit sharding `spec` (JAX's `ShapedArray(..., sharding=
    /// NamedSharding(mesh, spec))` on an `Explicit` mesh): dimension `i` is split over the mesh
    /// axes `spec` gives it (`f32[8@pp,4]` for `P('pp')`). The varying, reduced and unreduced
    /// axes are kept. A spec longer than the rank, naming a mesh axis twice or leaving a
    /// dimension `UNCONSTRAINED` is an error.
    pub fn with_explicit(&self, spec: &PartitionSpec) -> Result<ShapedArray> {
        let bad = |why: String| IrError::Sharding {
            prim: "explicit sharding".into(),
            message: format!("{spec} cannot type {self}: {why}"),
        };
        if spec.len() > self.rank() {
            return Err(bad(format!(
                "it has {} entries, more than the rank {}; give one entry per dimension",
                spec.len(),
                self.rank()
            )));
        }
        let mut dims = vec![Vec::new(); self.rank()];
        let mut seen = BTreeSet::new();
        for (d, entry) in spec.dims().iter().enumerate() {
            if matches!(entry, DimSpec::Unconstrained) {
                return Err(bad(format!(
                    "dimension {d} is UNCONSTRAINED, which an explicit type cannot be; name its \
                     mesh axes or None"
                )));
            }
            for axis in entry.axes() {
                if !seen.insert(axis.clone()) {
                    return Err(bad(format!(
                        "mesh axis '{axis}' splits two dimensions; name each axis once"
                    )));
                }
            }
            dims[d] = entry.axes().to_vec();
        }
        let mut out = self.clone();
        out.set_explicit_dims(dims);
        Ok(out)
    }

    /// Per dimension, the mesh axes an explicit sharding splits it over (empty: not split);
    /// one entry per dimension.
    pub fn explicit_dims(&self) -> Vec<Vec<String>> {
        let mut dims = self
            .explicit
            .as_ref()
            .map(|e| e.dims.clone())
            .unwrap_or_default();
        dims.resize(self.rank(), Vec::new());
        dims
    }

    /// Whether an explicit sharding splits any dimension.
    pub fn is_explicitly_sharded(&self) -> bool {
        self.explicit
            .as_ref()
            .is_some_and(|e| e.dims.iter().any(|d| !d.is_empty()))
    }

    /// The explicit sharding of the dimensions as a partition spec (`P('pp', None)`).
    pub fn explicit_spec(&self) -> PartitionSpec {
        PartitionSpec::new(
            self.explicit_dims()
                .iter()
                .map(|axes| DimSpec::from_axes(axes))
                .collect(),
        )
    }

    /// Sets the mesh axes splitting each dimension (keeping the reduced and unreduced axes),
    /// dropping an explicit type that then says nothing.
    pub fn set_explicit_dims(&mut self, mut dims: Vec<Vec<String>>) {
        let mut e = self.explicit.take().map(|e| *e).unwrap_or_default();
        if dims.iter().all(Vec::is_empty) {
            dims.clear();
        } else {
            dims.resize(self.rank(), Vec::new());
        }
        e.dims = dims;
        if !e.is_empty() {
            self.explicit = Some(Box::new(e));
        }
    }

    /// Equal ignoring weak type.
    pub fn same_type(&self, other: &ShapedArray) -> bool {
        self.dtype == other.dtype && self.shape == other.shape
    }
}

impl fmt::Display for ShapedArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // JAX prints its abstract token `Tok`, without a shape.
        if self.dtype.is_token() {
            return f.write_str("Tok");
        }
        write!(f, "{}[", self.dtype)?;
        let explicit = self.explicit.as_deref();
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{d}")?;
            if let Some(axes) = explicit
                .and_then(|e| e.dims.get(i))
                .filter(|a| !a.is_empty())
            {
                write!(f, "@{}", axes_text(axes))?;
            }
        }
        f.write_str("]")?;
        // The manual axes the value varies over (inside shard_map), then its reduced and
        // unreduced axes, as JAX prints them.
        let empty = BTreeSet::new();
        let parts: Vec<String> = [
            ("V", &self.vma),
            ("R", explicit.map_or(&empty, |e| &e.reduced)),
            ("U", explicit.map_or(&empty, |e| &e.unreduced)),
        ]
        .into_iter()
        .filter(|(_, axes)| !axes.is_empty())
        .map(|(tag, axes)| format!("{tag}:{}", axes_text(axes)))
        .collect();
        if !parts.is_empty() {
            write!(f, "{{{}}}", parts.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use tessera_sharding::Mesh;

    use super::*;

    #[test]
    fn avals_carry_a_sharding_and_varying_axes_without_changing_their_type() {
        let mesh = Mesh::auto(&[("x", 2), ("y", 4)]).unwrap();
        let sharding = NamedSharding::new(&mesh, PartitionSpec::parse("P('x')").unwrap()).unwrap();
        let plain = ShapedArray::new(DType::F32, &[8, 4]);
        let mut laid_out = plain.clone();
        laid_out.sharding = Some(Box::new(sharding));
        laid_out.vma.insert("y".into());
        assert!(laid_out.same_type(&plain));
        assert_ne!(laid_out, plain);
        assert_eq!(plain.to_string(), "f32[8,4]");
        assert_eq!(laid_out.to_string(), "f32[8,4]{V:y}");
        laid_out.vma.insert("x".into());
        assert_eq!(laid_out.to_string(), "f32[8,4]{V:(x,y)}");
    }

    #[test]
    fn explicit_types_print_as_jax_prints_them() {
        let mut t = ShapedArray::new(DType::F32, &[8, 4]);
        t.explicit = Some(Box::new(ExplicitType {
            dims: vec![vec!["pp".into()], vec![]],
            ..Default::default()
        }));
        assert_eq!(t.to_string(), "f32[8@pp,4]");
        t.vma.insert("pp".into());
        t.set_reduced_unreduced(BTreeSet::from(["tp".into()]), BTreeSet::new());
        assert_eq!(t.to_string(), "f32[8@pp,4]{V:pp, R:tp}");
        let mut u = ShapedArray::new(DType::F32, &[2, 2]);
        u.set_reduced_unreduced(BTreeSet::new(), BTreeSet::from(["a".into(), "b".into()]));
        assert_eq!(u.to_string(), "f32[2,2]{U:(a,b)}");
        u.set_reduced_unreduced(BTreeSet::new(), BTreeSet::new());
        assert_eq!(u.explicit, None);
    }
}
