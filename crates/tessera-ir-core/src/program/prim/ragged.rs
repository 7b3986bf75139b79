//! `ragged_all_to_all` (JAX's `lax.ragged_all_to_all`): the all-to-all of ragged data. A
//! ragged array is a dense `data` array whose leading dimension concatenates component arrays,
//! with 1-D `offsets` and `sizes` saying where each component starts and how many rows it has.
//!
//! The primitive takes six operands on every device of a group of `n`: `operand` (`[N, ...]`),
//! `output` (`[M, ...]`, the same trailing dimensions and dtype) and four integer vectors of one
//! length `K = n * S` (`S` slices for each peer): `input_offsets`, `send_sizes`,
//! `output_offsets` and `recv_sizes`. Slice `i` of a device, the rows
//! `operand[input_offsets[i] .. input_offsets[i] + send_sizes[i]]`, goes to group member
//! `i / S`, which writes it at rows `output_offsets[i] ..` of its copy of `output`. So the
//! sender's `output_offsets` name places on the receiver; the receiver's own `recv_sizes[j * S
//! + s]` is the size of slice `s` it gets from member `j`, and must equal what that member
//! sends. Rows of `output` that nothing is written to keep their value.
//!
//! The shape rule refuses what JAX's abstract evaluation refuses (offsets and sizes that are not
//! integer vectors of positive length) and what the exchange cannot mean (a rank-0 operand, an
//! `output` of other trailing dimensions or dtype, vectors of different dtypes or lengths, a
//! length the group size does not divide). The interpreter refuses out-of-range slices and
//! mismatched sizes with an error naming the devices and the slice, never an index panic.

use std::collections::BTreeSet;

use ndarray::{ArrayD, Axis, Slice};
use tessera_sharding::AbstractMesh;

use super::{CollectiveParams, Prim};
use crate::array::{Array, Elem};
use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result, type_error};

/// The names of the four index operands, in operand order (after `operand` and `output`).
const INDEX_OPERANDS: [&str; 4] = [
    "input_offsets",
    "send_sizes",
    "output_offsets",
    "recv_sizes",
];

/// The result type of `ragged_all_to_all` on `inputs` (its six operand types) in groups of `n`
/// devices: `output`'s type, varying over the collective's axes and over whatever any operand
/// varies over.
pub(super) fn out_type(
    prim: Prim,
    p: &CollectiveParams,
    inputs: &[ShapedArray],
    n: i64,
) -> Result<Vec<ShapedArray>> {
    let [operand, output, index @ ..] = inputs else {
        return Err(type_error(
            prim.name(),
            format!(
                "takes 6 operands (operand, output, {}), got {}",
                INDEX_OPERANDS.join(", "),
                inputs.len()
            ),
        ));
    };
    let fail = |msg: String| Err(type_error(prim.name(), msg));
    if operand.rank() == 0 {
        return fail(format!(
            "operand {operand} has rank 0; its leading dimension must hold the rows of the \
             slices to send (reshape a scalar to [1])"
        ));
    }
    if output.rank() != operand.rank() || output.shape[1..] != operand.shape[1..] {
        return fail(format!(
            "output {output} must have operand {operand}'s rank and trailing dimensions {:?}: \
             the operand's rows are written into the output's leading dimension",
            &operand.shape[1..]
        ));
    }
    if output.dtype != operand.dtype {
        return fail(format!(
            "output has dtype {} but operand {}; the received rows are written into output \
             as they are, so both need one dtype (convert one of them)",
            output.dtype, operand.dtype
        ));
    }
    let first = &index[0];
    for (name, aval) in INDEX_OPERANDS.iter().zip(index) {
        if !matches!(aval.dtype, DType::I32 | DType::I64) {
            return fail(format!(
                "{name} must be int32 or int64, got {aval} (convert it with astype)"
            ));
        }
        if aval.rank() != 1 || aval.shape[0] < 1 {
            return fail(format!(
                "{name} must be a vector (rank 1) of positive length, got shape {:?}",
                aval.shape
            ));
        }
        if aval.dtype != first.dtype {
            return fail(format!(
                "{name} is {} but input_offsets is {}; the four offset and size vectors need \
                 one dtype",
                aval.dtype, first.dtype
            ));
        }
        if aval.shape[0] != first.shape[0] {
            return fail(format!(
                "{name} has length {} but input_offsets has {}; the four offset and size \
                 vectors need one length (one entry per slice sent)",
                aval.shape[0], first.shape[0]
            ));
        }
    }
    let k = first.shape[0];
    if n < 1 || k % n != 0 {
        return fail(format!(
            "the offset and size vectors have length {k}, which the {n} devices of '{}' do \
             not divide; give every device the same number of slices",
            p.axes.join(",")
        ));
    }
    let mut out = output.clone();
    out.weak_type = false;
    out.sharding = None;
    let axes: BTreeSet<String> = p.axes.iter().cloned().collect();
    out.vma = inputs
        .iter()
        .flat_map(|a| a.vma.iter().cloned())
        .chain(axes)
        .collect();
    Ok(vec![out])
}

/// One device's operands, read for the exchange.
struct Member {
    operand: ArrayD<Elem>,
    output: ArrayD<Elem>,
    /// `input_offsets`, `send_sizes`, `output_offsets`, `recv_sizes`.
    index: [Vec<i128>; 4],
}

impl Member {
    fn read(prim: Prim, position: usize, operands: &[Array]) -> Result<Member> {
        let [operand, output, a, b, c, d] = operands else {
            return Err(IrError::Eval(format!(
                "{}: mesh position {position} has {} operands, expected 6",
                prim.name(),
                operands.len()
            )));
        };
        let ints = |x: &Array| x.ints().iter().copied().collect::<Vec<i128>>();
        Ok(Member {
            operand: operand.elems(),
            output: output.elems(),
            index: [ints(a), ints(b), ints(c), ints(d)],
        })
    }
}

/// Evaluates `ragged_all_to_all` on every device of `mesh`: `operands[pos]` are the six
/// operands of mesh position `pos`; the result is each position's value of type `out`.
pub(super) fn simulate(
    prim: Prim,
    p: &CollectiveParams,
    mesh: &AbstractMesh,
    operands: &[Vec<Array>],
    out: &ShapedArray,
) -> Result<Vec<Array>> {
    let members = operands
        .iter()
        .enumerate()
        .map(|(pos, ops)| Member::read(prim, pos, ops))
        .collect::<Result<Vec<_>>>()?;
    let mut results: Vec<Option<Array>> = vec![None; members.len()];
    for group in p.replica_groups(prim, mesh)? {
        let positions: Vec<usize> = group.iter().map(|&g| g as usize).collect();
        if let Some(&bad) = positions.iter().find(|&&g| g >= members.len()) {
            return Err(IrError::Eval(format!(
                "{}: replica group {group:?} names mesh position {bad}, but the mesh has {}",
                prim.name(),
                members.len()
            )));
        }
        for (r, &pos) in positions.iter().enumerate() {
            let value = receive(prim, &members, &positions, r)?;
            results[pos] = Some(Array::from_elems(out.dtype, value));
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.ok_or_else(|| IrError::Eval(format!("{} left a device without a value", prim.name())))
        })
        .collect()
}

/// What group member `r` (of the members at mesh `positions`) ends with: its `output` with
/// every slice sent to it written in, member by member and slice by slice.
fn receive(prim: Prim, members: &[Member], positions: &[usize], r: usize) -> Result<ArrayD<Elem>> {
    let n = positions.len();
    let me = &members[positions[r]];
    let k = me.index[0].len();
    let per_peer = k / n.max(1);
    let mut result = me.output.clone();
    let rows_out = result.shape()[0] as i128;
    for (j, &sender_pos) in positions.iter().enumerate() {
        let sender = &members[sender_pos];
        let fail = |s: usize, what: String| {
            Err(IrError::Eval(format!(
                "{}: slice {s} that mesh position {sender_pos} sends to mesh position {}: {what}",
                prim.name(),
                positions[r]
            )))
        };
        if sender.index[0].len() != k {
            return fail(
                0,
                format!(
                    "the sender has {} offsets and the receiver {k}; every device needs the \
                     same number",
                    sender.index[0].len()
                ),
            );
        }
        for s in 0..per_peer {
            let i = r * per_peer + s;
            let (from, size, to) = (sender.index[0][i], sender.index[1][i], sender.index[2][i]);
            let expected = me.index[3][j * per_peer + s];
            let rows_in = sender.operand.shape()[0] as i128;
            if size < 0 {
                return fail(i, format!("send_sizes[{i}] = {size} is negative"));
            }
            if size != expected {
                return fail(
                    i,
                    format!(
                        "the sender's send_sizes[{i}] = {size} but the receiver's \
                         recv_sizes[{}] = {expected}; recv_sizes must be the all_to_all of \
                         send_sizes",
                        j * per_peer + s
                    ),
                );
            }
            if from < 0 || from + size > rows_in {
                return fail(
                    i,
                    format!(
                        "input_offsets[{i}] = {from} with send_sizes[{i}] = {size} reads rows \
                         {from}..{} of an operand with {rows_in}",
                        from + size
                    ),
                );
            }
            if to < 0 || to + size > rows_out {
                return fail(
                    i,
                    format!(
                        "output_offsets[{i}] = {to} with size {size} writes rows {to}..{} of an \
                         output with {rows_out}",
                        to + size
                    ),
                );
            }
            let (from, to, size) = (from as usize, to as usize, size as usize);
            let rows = sender
                .operand
                .slice_axis(Axis(0), Slice::from(from..from + size));
            result
                .slice_axis_mut(Axis(0), Slice::from(to..to + size))
                .assign(&rows);
        }
    }
    Ok(result)
}
