//! Meshes: named axes with sizes and types, over devices (`Mesh`) or without (`AbstractMesh`).
//!
//! A mesh position is the row-major index of a mesh coordinate; the device at position `p` is
//! `device_ids()[p]`. HloSharding tile assignments number devices by position, not by id.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};

use crate::error::{Result, ShardingError};

/// How a mesh axis takes part in sharding (JAX's `AxisType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AxisType {
    /// The compiler may choose how to use the axis.
    Auto,
    /// The sharding along the axis is part of the type.
    Explicit,
    /// The program handles the axis itself (inside `shard_map`).
    Manual,
}

impl AxisType {
    /// Parses `Auto`, `Explicit` or `Manual` (case-insensitive).
    pub fn parse(text: &str) -> Option<AxisType> {
        match text.to_ascii_lowercase().as_str() {
            "auto" => Some(AxisType::Auto),
            "explicit" => Some(AxisType::Explicit),
            "manual" => Some(AxisType::Manual),
            _ => None,
        }
    }
}

impl fmt::Display for AxisType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AxisType::Auto => "Auto",
            AxisType::Explicit => "Explicit",
            AxisType::Manual => "Manual",
        })
    }
}

/// A mesh without devices: axis names, sizes and types.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AbstractMesh {
    names: Vec<String>,
    sizes: Vec<i64>,
    types: Vec<AxisType>,
}

impl AbstractMesh {
    /// Builds a mesh shape; names must be distinct and non-empty, sizes positive.
    pub fn new(names: &[&str], sizes: &[i64], types: &[AxisType]) -> Result<AbstractMesh> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        Self::from_parts(names, sizes.to_vec(), types.to_vec())
    }

    /// Like [`AbstractMesh::new`] with every axis `Auto`.
    pub fn auto(axes: &[(&str, i64)]) -> Result<AbstractMesh> {
        let names: Vec<String> = axes.iter().map(|(n, _)| n.to_string()).collect();
        let sizes = axes.iter().map(|&(_, s)| s).collect();
        Self::from_parts(names, sizes, vec![AxisType::Auto; axes.len()])
    }

    /// Builds from owned parts, checking them.
    pub fn from_parts(names: Vec<String>, sizes: Vec<i64>, types: Vec<AxisType>) -> Result<Self> {
        let bad = |reason: String| Err(ShardingError::InvalidMesh { reason });
        if names.len() != sizes.len() || names.len() != types.len() {
            return bad(format!(
                "{} axis names, {} sizes and {} types; give one of each per axis",
                names.len(),
                sizes.len(),
                types.len()
            ));
        }
        for (i, name) in names.iter().enumerate() {
            if name.is_empty() {
                return bad(format!("axis {i} has an empty name"));
            }
            if names[..i].contains(name) {
                return bad(format!("axis name '{name}' appears twice"));
            }
        }
        let mut total: i64 = 1;
        for (name, &size) in names.iter().zip(&sizes) {
            if size < 1 {
                return bad(format!(
                    "axis '{name}' has size {size}; sizes must be at least 1"
                ));
            }
            total = match total.checked_mul(size) {
                Some(t) if t <= crate::hlo::MAX_TILES => t,
                _ => {
                    let max = crate::hlo::MAX_TILES;
                    return bad(format!("the mesh has more than {max} positions"));
                }
            };
        }
        Ok(AbstractMesh {
            names,
            sizes,
            types,
        })
    }

    /// The axis names in mesh order.
    pub fn axis_names(&self) -> &[String] {
        &self.names
    }

    /// The axis sizes in mesh order.
    pub fn axis_sizes(&self) -> &[i64] {
        &self.sizes
    }

    /// The axis types in mesh order.
    pub fn axis_types(&self) -> &[AxisType] {
        &self.types
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.names.len()
    }

    /// The number of mesh positions (product of the sizes).
    pub fn size(&self) -> i64 {
        self.sizes.iter().product()
    }

    /// The position of an axis in mesh order.
    pub fn axis_index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// The size of a named axis.
    pub fn axis_size(&self, name: &str) -> Option<i64> {
        self.axis_index(name).map(|i| self.sizes[i])
    }

    /// The type of a named axis.
    pub fn axis_type(&self, name: &str) -> Option<AxisType> {
        self.axis_index(name).map(|i| self.types[i])
    }

    /// The Manual axes, in mesh order.
    pub fn manual_axes(&self) -> Vec<&str> {
        self.axes_of_type(AxisType::Manual)
    }

    /// The axes of one type, in mesh order.
    pub fn axes_of_type(&self, ty: AxisType) -> Vec<&str> {
        let it = self.names.iter().zip(&self.types);
        it.filter(|(_, t)| **t == ty)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// The mesh coordinate of a position (row-major).
    pub fn coords(&self, mut position: i64) -> Vec<i64> {
        let mut out = vec![0; self.sizes.len()];
        for (slot, &size) in out.iter_mut().zip(&self.sizes).rev() {
            *slot = position % size;
            position /= size;
        }
        out
    }

    /// The position of a mesh coordinate (row-major).
    pub fn position(&self, coords: &[i64]) -> i64 {
        coords
            .iter()
            .zip(&self.sizes)
            .fold(0, |acc, (&c, &s)| acc * s + c)
    }

    /// The mesh with every axis given the type `ty`.
    pub fn with_axis_types(&self, ty: AxisType) -> AbstractMesh {
        AbstractMesh {
            types: vec![ty; self.types.len()],
            ..self.clone()
        }
    }

    /// The mesh with axes `axes` typed Explicit (the others keep their types): JAX lets only
    /// Explicit axes hold a value unreduced or reduced.
    pub fn with_explicit<S: AsRef<str>>(&self, axes: &[S]) -> AbstractMesh {
        let mut types = self.types.clone();
        for (t, name) in types.iter_mut().zip(&self.names) {
            if axes.iter().any(|a| a.as_ref() == name) {
                *t = AxisType::Explicit;
            }
        }
        AbstractMesh {
            types,
            ..self.clone()
        }
    }

    fn fmt_axes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (n, s)) in self.names.iter().zip(&self.sizes).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "'{n}': {s}")?;
        }
        let types: Vec<String> = self.types.iter().map(|t| t.to_string()).collect();
        let trailing = if types.len() == 1 { "," } else { "" };
        write!(f, ", axis_types=({}{trailing})", types.join(", "))
    }
}

impl fmt::Display for AbstractMesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AbstractMesh(")?;
        self.fmt_axes(f)?;
        f.write_str(")")
    }
}

/// A mesh over devices: an [`AbstractMesh`] plus the device id at each position (row-major).
/// Two meshes are equal when their shapes and device orders are; they then hash equal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mesh {
    shape: AbstractMesh,
    devices: Vec<i64>,
    /// Derived from `devices`, so left out of the hash (equal meshes hash equal).
    position_of: HashMap<i64, usize>,
}

impl Hash for Mesh {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.shape.hash(state);
        self.devices.hash(state);
    }
}

impl Mesh {
    /// Builds a mesh over `device_ids` (one distinct id per position, row-major, each at
    /// least 0).
    pub fn new(shape: AbstractMesh, device_ids: Vec<i64>) -> Result<Mesh> {
        if device_ids.len() as i64 != shape.size() {
            return Err(ShardingError::InvalidMesh {
                reason: format!(
                    "the mesh has {} positions but {} device ids were given",
                    shape.size(),
                    device_ids.len()
                ),
            });
        }
        let mut position_of = HashMap::with_capacity(device_ids.len());
        for (p, &d) in device_ids.iter().enumerate() {
            if d < 0 {
                return Err(ShardingError::InvalidMesh {
                    reason: format!(
                        "device id {d} at mesh position {p} is negative; device ids start at 0"
                    ),
                });
            }
            if position_of.insert(d, p).is_some() {
                return Err(ShardingError::InvalidMesh {
                    reason: format!("device {d} appears twice in the mesh"),
                });
            }
        }
        Ok(Mesh {
            shape,
            devices: device_ids,
            position_of,
        })
    }

    /// A mesh over devices `0..size` in order.
    pub fn iota(shape: AbstractMesh) -> Mesh {
        let devices: Vec<i64> = (0..shape.size()).collect();
        let position_of = devices.iter().map(|&d| (d, d as usize)).collect();
        Mesh {
            shape,
            devices,
            position_of,
        }
    }

    /// Shorthand: Auto axes `(name, size)` over devices `0..size`.
    pub fn auto(axes: &[(&str, i64)]) -> Result<Mesh> {
        Ok(Mesh::iota(AbstractMesh::auto(axes)?))
    }

    /// The same devices with axes `axes` typed Explicit ([`AbstractMesh::with_explicit`]).
    pub fn with_explicit<S: AsRef<str>>(&self, axes: &[S]) -> Mesh {
        Mesh {
            shape: self.shape.with_explicit(axes),
            ..self.clone()
        }
    }

    /// The mesh without its devices.
    pub fn abstract_mesh(&self) -> &AbstractMesh {
        &self.shape
    }

    /// The device ids in mesh order (row-major).
    pub fn device_ids(&self) -> &[i64] {
        &self.devices
    }

    /// The device at a mesh coordinate.
    pub fn device_at(&self, coords: &[i64]) -> Option<i64> {
        if coords.len() != self.shape.rank() {
            return None;
        }
        let inside = coords
            .iter()
            .zip(self.shape.axis_sizes())
            .all(|(&c, &s)| c >= 0 && c < s);
        inside.then(|| self.devices[self.shape.position(coords) as usize])
    }

    /// The mesh coordinate of a device id.
    pub fn coords_of(&self, device: i64) -> Result<Vec<i64>> {
        let p = self.position_of_device(device)?;
        Ok(self.shape.coords(p as i64))
    }

    /// The mesh position of a device id.
    pub fn position_of_device(&self, device: i64) -> Result<usize> {
        self.position_of
            .get(&device)
            .copied()
            .ok_or(ShardingError::UnknownDevice(device))
    }

    /// The submeshes along `axis`: one mesh per index of the axis, without that axis.
    pub fn submeshes_along(&self, axis: &str) -> Result<Vec<Mesh>> {
        let Some(k) = self.shape.axis_index(axis) else {
            return Err(ShardingError::InvalidMesh {
                reason: format!("the mesh has no axis '{axis}' to split along"),
            });
        };
        let mut parts = self.shape.clone();
        parts.names.remove(k);
        parts.sizes.remove(k);
        parts.types.remove(k);
        let mut out = Vec::new();
        for index in 0..self.shape.sizes[k] {
            let devices = (0..parts.size())
                .map(|p| {
                    let mut c = parts.coords(p);
                    c.insert(k, index);
                    self.devices[self.shape.position(&c) as usize]
                })
                .collect();
            out.push(Mesh::new(parts.clone(), devices)?);
        }
        Ok(out)
    }
}

impl std::ops::Deref for Mesh {
    type Target = AbstractMesh;
    fn deref(&self) -> &AbstractMesh {
        &self.shape
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Mesh(")?;
        self.shape.fmt_axes(f)?;
        f.write_str(")")
    }
}

/// Parses `x=2,y=4` (optionally `x=2:explicit`) into an abstract mesh.
pub fn parse_mesh_axes(text: &str) -> Result<AbstractMesh> {
    let bad = |reason: String| ShardingError::InvalidMesh { reason };
    let (mut names, mut sizes, mut types) = (Vec::new(), Vec::new(), Vec::new());
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, rest) = part
            .split_once('=')
            .ok_or_else(|| bad(format!("'{part}' is not of the form name=size")))?;
        let (size, ty) = match rest.split_once(':') {
            Some((s, t)) => {
                let ty = AxisType::parse(t.trim()).ok_or_else(|| {
                    bad(format!("unknown axis type '{t}' (Auto|Explicit|Manual)"))
                })?;
                (s, ty)
            }
            None => (rest, AxisType::Auto),
        };
        let size: i64 = size
            .trim()
            .parse()
            .map_err(|_| bad(format!("size '{size}' of axis '{name}' is not a number")))?;
        names.push(name.trim().to_string());
        sizes.push(size);
        types.push(ty);
    }
    AbstractMesh::from_parts(names, sizes, types)
}
