//! Shardy (`sdy` dialect) texts: the `#sdy.sharding<...>` attribute of a NamedSharding and the
//! `sdy.mesh` operation of a mesh.
//!
//! ```text
//! #sdy.sharding<mesh<["x"=2, "y"=4], device_ids=[1, 0, ...]>, [{"x"}, {}, {?}], replicated={"y"}>
//! sdy.mesh @mesh = <["x"=2, "y"=4]>
//! ```

use std::fmt;

use crate::error::Result;
use crate::mesh::{AbstractMesh, AxisType};
use crate::named::NamedSharding;
use crate::spec::DimSpec;

/// The sharding of one dimension: axes (major to minor), open or closed, optional priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdyDim {
    /// The mesh axes, major to minor.
    pub axes: Vec<String>,
    /// Whether the compiler may shard the dimension further (`?`).
    pub is_open: bool,
    /// The priority (`p0` is the highest), if any.
    pub priority: Option<i64>,
}

/// A `#sdy.sharding` attribute with an inline mesh (JAX's `SdyArray`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdySharding {
    /// The mesh axes and sizes.
    pub mesh_shape: Vec<(String, i64)>,
    /// The device order, when not `0..n`.
    pub device_ids: Option<Vec<i64>>,
    /// One entry per array dimension.
    pub dims: Vec<SdyDim>,
    /// Axes explicitly replicated.
    pub replicated_axes: Vec<String>,
    /// Axes that hold unreduced partial sums.
    pub unreduced_axes: Vec<String>,
}

impl NamedSharding {
    /// The Shardy attribute for an array of rank `rank` (JAX's `_to_sdy_sharding`).
    pub fn to_sdy_sharding(&self, rank: usize) -> Result<SdySharding> {
        self.tiles_per_dim(rank)?;
        let mut dims = vec![
            SdyDim {
                axes: Vec::new(),
                is_open: false,
                priority: None
            };
            rank
        ];
        for (slot, d) in dims.iter_mut().zip(self.spec().dims()) {
            match d {
                DimSpec::Unconstrained => slot.is_open = true,
                DimSpec::Replicated => {}
                DimSpec::Axes(a) => slot.axes = a.clone(),
            }
        }
        let mesh = self.mesh();
        Ok(SdySharding {
            mesh_shape: mesh
                .axis_names()
                .iter()
                .cloned()
                .zip(mesh.axis_sizes().to_vec())
                .collect(),
            device_ids: self.logical_device_ids().map(<[i64]>::to_vec),
            dims,
            replicated_axes: Vec::new(),
            unreduced_axes: in_mesh_order(mesh, self.spec().unreduced()),
        })
    }
}

impl SdySharding {
    /// JAX's `modify_sdy_sharding_wrt_axis_types`: with any Auto axis, closed empty dimensions
    /// become open and unused Explicit axes are listed as replicated.
    pub fn for_axis_types(mut self, mesh: &AbstractMesh) -> SdySharding {
        if !mesh.axis_types().contains(&AxisType::Auto) {
            return self;
        }
        for d in &mut self.dims {
            if d.axes.is_empty() && !d.is_open {
                d.is_open = true;
            }
        }
        let used: Vec<&String> = self.dims.iter().flat_map(|d| &d.axes).collect();
        let unused: Vec<String> = mesh
            .axes_of_type(AxisType::Explicit)
            .into_iter()
            .filter(|a| !used.iter().any(|u| u == a))
            .map(str::to_string)
            .collect();
        self.replicated_axes = unused;
        self.unreduced_axes.clear();
        self
    }
}

fn in_mesh_order(mesh: &AbstractMesh, axes: &[String]) -> Vec<String> {
    mesh.axis_names()
        .iter()
        .filter(|n| axes.contains(n))
        .cloned()
        .collect()
}

fn quoted(axes: &[String]) -> String {
    axes.iter()
        .map(|a| format!("\"{a}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `mesh<[...]>` body, with `device_ids` only when they are not `0..n`.
fn mesh_body(shape: &[(String, i64)], device_ids: Option<&[i64]>) -> String {
    let axes: Vec<String> = shape.iter().map(|(n, s)| format!("\"{n}\"={s}")).collect();
    let mut out = format!("[{}]", axes.join(", "));
    if let Some(ids) = device_ids.filter(|ids| !ids.iter().enumerate().all(|(i, &d)| d == i as i64))
    {
        let ids: Vec<String> = ids.iter().map(|d| d.to_string()).collect();
        out.push_str(&format!(", device_ids=[{}]", ids.join(", ")));
    }
    out
}

impl fmt::Display for SdyDim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let open = match (self.is_open, self.axes.is_empty()) {
            (false, _) => "",
            (true, true) => "?",
            (true, false) => ", ?",
        };
        write!(f, "{{{}{open}}}", quoted(&self.axes))?;
        if let Some(p) = self.priority {
            write!(f, "p{p}")?;
        }
        Ok(())
    }
}

impl SdySharding {
    /// The mesh as Shardy's `#sdy.mesh<[...]>` attribute (the `mesh` of an `sdy.mesh`
    /// operation), with `device_ids` only when they are not `0..n`.
    pub fn mesh_attr(&self) -> String {
        format!(
            "#sdy.mesh<{}>",
            mesh_body(&self.mesh_shape, self.device_ids.as_deref())
        )
    }

    /// The sharding with its mesh named by the symbol of an `sdy.mesh` operation, as a
    /// `#sdy.sharding_per_value<[...]>` lists it: `<@mesh, [{"x"}, {}]>`. Prefixed with
    /// `#sdy.sharding` it is the attribute of one value (what JAX emits after lifting meshes).
    pub fn referring_to(&self, mesh: &str) -> String {
        format!("<{}>", self.body(&format!("@{mesh}")))
    }

    /// `MESH, [dims...]` and the replicated and unreduced axes.
    fn body(&self, mesh: &str) -> String {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        let mut out = format!("{mesh}, [{}]", dims.join(", "));
        if !self.replicated_axes.is_empty() {
            out.push_str(&format!(
                ", replicated={{{}}}",
                quoted(&self.replicated_axes)
            ));
        }
        if !self.unreduced_axes.is_empty() {
            out.push_str(&format!(", unreduced={{{}}}", quoted(&self.unreduced_axes)));
        }
        out
    }
}

impl fmt::Display for SdySharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mesh = mesh_body(&self.mesh_shape, self.device_ids.as_deref());
        write!(f, "#sdy.sharding<{}>", self.body(&format!("mesh<{mesh}>")))
    }
}

/// The `sdy.mesh @name = <[...]>` operation for a mesh (device ids shown when not `0..n`).
pub fn mesh_op(mesh: &AbstractMesh, name: &str, device_ids: Option<&[i64]>) -> String {
    let shape: Vec<(String, i64)> = mesh
        .axis_names()
        .iter()
        .cloned()
        .zip(mesh.axis_sizes().to_vec())
        .collect();
    format!("sdy.mesh @{name} = <{}>", mesh_body(&shape, device_ids))
}
