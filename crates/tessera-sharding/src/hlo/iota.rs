//! Tile assignments: which device holds each tile, either as a transposed iota
//! (`[dims]<=[reshape_dims]T(perm)`) or as an explicit list of devices.
//!
//! Iota assignments are kept in XLA's canonical form: reshape dimensions of size one are dropped
//! and dimensions that stay adjacent (in order) under the transpose are merged.

/// `iota(product(reshape_dims))`, reshaped to `reshape_dims`, transposed by `perm`, reshaped to
/// `dims`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IotaTileAssignment {
    dims: Vec<i64>,
    reshape_dims: Vec<i64>,
    perm: Vec<usize>,
}

impl IotaTileAssignment {
    /// Builds and canonicalises; `None` when the parts do not fit together (sizes that differ,
    /// a `perm` that is not a permutation, non-positive sizes, more than
    /// [`MAX_TILES`](super::MAX_TILES) tiles).
    pub fn new(dims: &[i64], reshape_dims: &[i64], perm: &[usize]) -> Option<IotaTileAssignment> {
        if reshape_dims.len() != perm.len() || !is_permutation(perm) {
            return None;
        }
        if dims.iter().chain(reshape_dims).any(|&d| d < 1) {
            return None;
        }
        let n = checked_product(dims)?;
        if n != checked_product(reshape_dims)? || n > super::MAX_TILES {
            return None;
        }
        let (mut rd, mut p) = (reshape_dims.to_vec(), perm.to_vec());
        canonicalize(&mut rd, &mut p);
        if rd.is_empty() {
            rd.push(1);
            p.push(0);
        }
        Some(IotaTileAssignment {
            dims: dims.to_vec(),
            reshape_dims: rd,
            perm: p,
        })
    }

    /// `[dims]<=[n]`: devices `0..n` in order.
    pub fn plain(dims: &[i64]) -> Option<IotaTileAssignment> {
        let n = checked_product(dims)?;
        Self::new(dims, &[n], &[0])
    }

    /// The tile dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// The (canonical) reshape dimensions.
    pub fn reshape_dims(&self) -> &[i64] {
        &self.reshape_dims
    }

    /// The (canonical) transpose permutation.
    pub fn transpose_perm(&self) -> &[usize] {
        &self.perm
    }

    /// The number of tiles.
    pub fn num_elements(&self) -> i64 {
        self.dims.iter().product()
    }

    /// The same iota seen with other tile dimensions of the same product.
    pub(crate) fn with_dims(&self, dims: &[i64]) -> IotaTileAssignment {
        IotaTileAssignment {
            dims: dims.to_vec(),
            ..self.clone()
        }
    }

    /// Every device, row-major over `dims`.
    pub fn expand(&self) -> Vec<i64> {
        let shape: Vec<i64> = self.perm.iter().map(|&p| self.reshape_dims[p]).collect();
        let strides = row_major_strides(&self.reshape_dims);
        let moved: Vec<i64> = self.perm.iter().map(|&p| strides[p]).collect();
        let n = self.num_elements().max(0) as usize;
        let mut out = Vec::with_capacity(n);
        let mut index = vec![0i64; shape.len()];
        for _ in 0..n {
            out.push(index.iter().zip(&moved).map(|(i, s)| i * s).sum());
            advance(&mut index, &shape);
        }
        out
    }

    /// Transposes the tile dimensions (`new[i] = old[perm[i]]`) when the result is still an iota;
    /// `None` means the caller must expand to an explicit list.
    ///
    /// The tile dims and the transposed reshape dims are refined into common factors (a size is
    /// split only where the other side has a boundary); each tile dim is then a run of factors,
    /// and transposing tile dims permutes those runs.
    pub(crate) fn transpose(&self, perm: &[usize]) -> Option<IotaTileAssignment> {
        let new_dims: Vec<i64> = perm.iter().map(|&p| self.dims[p]).collect();
        if transpose_kind(&self.dims, perm) == TransposeKind::Noop {
            return Some(self.clone());
        }
        let factors = self.common_factors()?;
        // The refined reshape dims: each reshape dim replaced by its factors, major to minor.
        let mut refined = Vec::with_capacity(factors.len());
        let mut index_of = vec![0usize; factors.len()];
        for r in 0..self.reshape_dims.len() {
            let k = self.perm.iter().position(|&p| p == r)?;
            for (f, &(sk, _, size)) in factors.iter().enumerate() {
                if sk == k {
                    index_of[f] = refined.len();
                    refined.push(size);
                }
            }
        }
        let mut new_perm = Vec::with_capacity(factors.len());
        for &t in perm {
            let run = factors.iter().enumerate().filter(|(_, (_, j, _))| *j == t);
            new_perm.extend(run.map(|(f, _)| index_of[f]));
        }
        Self::new(&new_dims, &refined, &new_perm)
    }

    /// Common factors of the transposed reshape dims and the tile dims, in memory order:
    /// `(index in transposed reshape order, tile dim, size)`.
    fn common_factors(&self) -> Option<Vec<(usize, usize, i64)>> {
        let seq: Vec<i64> = self.perm.iter().map(|&p| self.reshape_dims[p]).collect();
        let (mut i, mut j) = (0, 0);
        let mut rs = seq.first().copied().unwrap_or(1);
        let mut rd = self.dims.first().copied().unwrap_or(1);
        let mut out = Vec::new();
        loop {
            if rs == 1 && i + 1 < seq.len() {
                i += 1;
                rs = seq[i];
                continue;
            }
            if rd == 1 && j + 1 < self.dims.len() {
                j += 1;
                rd = self.dims[j];
                continue;
            }
            if rs == 1 || rd == 1 {
                return (rs == 1 && rd == 1).then_some(out);
            }
            let g = rs.min(rd);
            if rs % g != 0 || rd % g != 0 {
                return None;
            }
            out.push((i, j, g));
            rs /= g;
            rd /= g;
        }
    }
}

/// XLA's canonical form of `(reshape_dims, perm)`: drop size-one dims, merge runs of dims that the
/// permutation keeps adjacent and in order, until nothing changes.
fn canonicalize(dims: &mut Vec<i64>, perm: &mut Vec<usize>) {
    if dims.len() <= 1 {
        if dims.first() == Some(&1) {
            dims.clear();
            perm.clear();
        }
        return;
    }
    loop {
        // Drop size-one dimensions, renumbering the permutation.
        let mut old_to_new = vec![usize::MAX; dims.len()];
        let mut kept = Vec::new();
        for (i, &d) in dims.iter().enumerate() {
            if d != 1 {
                old_to_new[i] = kept.len();
                kept.push(d);
            }
        }
        let new_perm: Vec<usize> = perm
            .iter()
            .map(|&p| old_to_new[p])
            .filter(|&p| p != usize::MAX)
            .collect();
        *dims = kept;
        *perm = new_perm;
        // Merge runs `perm[base], perm[base]+1, ...` into their first dimension.
        let mut changed = false;
        let mut base = 0;
        for i in 1..dims.len() {
            let (base_dim, dim) = (perm[base], perm[i]);
            if base_dim + (i - base) == dim {
                dims[base_dim] *= dims[dim];
                dims[dim] = 1;
                changed = true;
            } else {
                base = i;
            }
        }
        if !changed {
            break;
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum TransposeKind {
    Noop,
    Reshape,
    Transpose,
}

fn transpose_kind(dims: &[i64], perm: &[usize]) -> TransposeKind {
    let mut kind = TransposeKind::Noop;
    let mut prev: Option<usize> = None;
    for (i, &d) in perm.iter().enumerate() {
        if dims[d] == 1 {
            if d != i && dims[i] != 1 {
                kind = TransposeKind::Reshape;
            }
            continue;
        }
        if prev.is_some_and(|p| d <= p) {
            return TransposeKind::Transpose;
        }
        prev = Some(d);
    }
    kind
}

/// A tile assignment: iota-described or explicit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TileAssignment {
    /// `[dims]<=[reshape_dims]T(perm)`.
    Iota(IotaTileAssignment),
    /// `[dims]d0,d1,...`: the devices row-major over `dims`.
    Explicit {
        /// The tile dimensions.
        dims: Vec<i64>,
        /// The devices, row-major.
        devices: Vec<i64>,
    },
}

impl TileAssignment {
    /// The tile dimensions.
    pub fn dims(&self) -> &[i64] {
        match self {
            TileAssignment::Iota(i) => i.dims(),
            TileAssignment::Explicit { dims, .. } => dims,
        }
    }

    /// The number of tiles.
    pub fn num_elements(&self) -> i64 {
        self.dims().iter().product()
    }

    /// Every device, row-major over the tile dimensions.
    pub fn devices(&self) -> Vec<i64> {
        match self {
            TileAssignment::Iota(i) => i.expand(),
            TileAssignment::Explicit { devices, .. } => devices.clone(),
        }
    }

    /// The same devices seen with other dimensions of the same product.
    pub(crate) fn reshape(&self, dims: &[i64]) -> TileAssignment {
        match self {
            TileAssignment::Iota(i) => TileAssignment::Iota(i.with_dims(dims)),
            TileAssignment::Explicit { devices, .. } => TileAssignment::Explicit {
                dims: dims.to_vec(),
                devices: devices.clone(),
            },
        }
    }

    /// Transposes the tile dimensions (`new[i] = old[perm[i]]`), keeping an iota when XLA does.
    pub(crate) fn transpose(&self, perm: &[usize]) -> TileAssignment {
        if transpose_kind(self.dims(), perm) == TransposeKind::Noop {
            return self.clone();
        }
        if let Some(t) = match self {
            TileAssignment::Iota(i) => i.transpose(perm),
            TileAssignment::Explicit { .. } => None,
        } {
            return TileAssignment::Iota(t);
        }
        let (dims, devices) = transpose_array(self.dims(), &self.devices(), perm);
        TileAssignment::Explicit { dims, devices }
    }
}

/// Transposes a row-major array: `new_shape[i] = shape[perm[i]]`.
pub(crate) fn transpose_array(shape: &[i64], data: &[i64], perm: &[usize]) -> (Vec<i64>, Vec<i64>) {
    let new_shape: Vec<i64> = perm.iter().map(|&p| shape[p]).collect();
    let strides = row_major_strides(shape);
    let moved: Vec<i64> = perm.iter().map(|&p| strides[p]).collect();
    let mut index = vec![0i64; new_shape.len()];
    let mut out = Vec::with_capacity(data.len());
    for _ in 0..data.len() {
        let src: i64 = index.iter().zip(&moved).map(|(i, s)| i * s).sum();
        out.push(data[src as usize]);
        advance(&mut index, &new_shape);
    }
    (new_shape, out)
}

/// Row-major strides of a shape.
pub(crate) fn row_major_strides(shape: &[i64]) -> Vec<i64> {
    let mut strides = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * shape[i + 1];
    }
    strides
}

/// Steps a row-major multi-index forward (wrapping to zero at the end).
pub(crate) fn advance(index: &mut [i64], shape: &[i64]) {
    for (i, &s) in index.iter_mut().zip(shape).rev() {
        *i += 1;
        if *i < s {
            return;
        }
        *i = 0;
    }
}

/// The product of sizes, `None` on overflow.
pub(crate) fn checked_product(dims: &[i64]) -> Option<i64> {
    dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d))
}

/// Whether `perm` holds each of `0..perm.len()` once.
pub(crate) fn is_permutation(perm: &[usize]) -> bool {
    let mut seen = vec![false; perm.len()];
    for &p in perm {
        if p >= perm.len() || seen[p] {
            return false;
        }
        seen[p] = true;
    }
    true
}
