//! The reshards between the SPMD and MPMD layouts across the processes of a job (JAXPP's
//! `spmd_to_mpmd_reshard` and `mpmd_to_spmd_reshard` when the mesh is multi-process).
//!
//! An SPMD array over the whole mesh is held by every process in part: each holds the shards of
//! its own devices (`tessera_pjrt::Array::from_addressable_shards`). An `MpmdArray` is held by
//! the processes running its groups. Blocks move between processes by one all-to-all of bytes
//! per batch ([`Processes::exchange`]), staged through host memory (what the CPU plugin's
//! transfers do anyway): every distinct block is sent once, by the first device holding it, to
//! each process that needs part of it; the receiver assembles what its devices need and puts it
//! on them. With one process, the reshards are the one-process ones.

use std::collections::{BTreeMap, BTreeSet};

use tessera_pjrt::{Array, Buffer, Client, ElementType, HostArray};
use tessera_sharding::NamedSharding;

use crate::array::MpmdArray;
use crate::error::{MpmdError, Result};
use crate::mesh::MpmdMesh;
use crate::processes::{ProcessError, Processes, frames, put_frame};
use crate::reshard::{
    default_threshold, group_by_size_threshold, interleaved_order, mpmd_to_spmd_batches,
    same_length, targets,
};
use crate::sharding::MpmdSharding;

type Block = Vec<(i64, i64)>;

/// One block of one array on its way to a process.
struct Piece {
    array: usize,
    block: Block,
    data: HostArray,
}

fn comm(e: ProcessError) -> MpmdError {
    MpmdError::Reshard(format!("exchanging blocks between the processes: {e}"))
}

/// [`crate::spmd_to_mpmd_reshard`] in a job: `arrays` are this process's parts of SPMD arrays
/// laid out over the whole mesh; each result holds the arrays of this process's groups among its
/// sharding's (an array none of whose groups run here has no data here). Every process calls it
/// with the same shapes and shardings. `None` for `threshold` takes the smallest default
/// threshold over the processes ([`global_threshold`]).
pub fn spmd_to_mpmd_reshard_across(
    processes: &dyn Processes,
    client: &Client,
    mesh: &MpmdMesh,
    arrays: Vec<Array>,
    shardings: Vec<MpmdSharding>,
    threshold: Option<u64>,
) -> Result<Vec<MpmdArray>> {
    if processes.process_index().0 == 1 {
        return crate::spmd_to_mpmd_reshard(client, mesh, arrays, shardings, threshold);
    }
    let shardings = targets(mesh, arrays.len(), shardings)?;
    let local: BTreeSet<usize> = processes.local_groups().into_iter().collect();
    let mut done: BTreeMap<usize, MpmdArray> = BTreeMap::new();
    let threshold = match threshold {
        Some(t) => t,
        None => global_threshold(processes, default_threshold(client))?,
    };
    for batch in batches(&arrays, &shardings, mesh, threshold)? {
        // What each process needs: the blocks of its groups among each array's.
        let needs = |p: usize, i: usize| -> Result<Vec<Block>> {
            let mut blocks = Vec::new();
            for g in shardings[i].groups() {
                if processes.process_of(g) == p {
                    let sharding = shardings[i].group_sharding(g)?;
                    blocks.extend(
                        sharding
                            .devices_indices_map(arrays[i].shape())?
                            .into_iter()
                            .map(|(_, b)| b),
                    );
                }
            }
            Ok(blocks)
        };
        let received = send_owned_blocks(processes, mesh, &arrays, &batch, &needs)?;
        for &i in &batch {
            let (shape, ty) = (arrays[i].shape().to_vec(), arrays[i].element_type());
            let host = assemble(&shape, ty, received.iter().filter(|p| p.array == i))?;
            let mut per_group = Vec::new();
            for g in shardings[i]
                .groups()
                .into_iter()
                .filter(|g| local.contains(g))
            {
                let sharding = shardings[i].group_sharding(g)?;
                per_group.push(Array::device_put(client, &host, &sharding)?);
            }
            let result = match per_group.is_empty() {
                true => MpmdArray::remote(&shape, ty, shardings[i].clone()),
                false => MpmdArray::new(per_group, shardings[i].clone())?,
            };
            done.insert(i, result);
        }
    }
    Ok(done.into_values().collect())
}

/// [`crate::mpmd_to_spmd_reshard`] in a job: each value is read from its first group (in the
/// process running it) and each process gets the shards of its own devices of the SPMD
/// sharding (`shardings` are over the whole mesh). Every process calls it with the same shapes
/// and shardings; an array whose first group runs elsewhere may be a remote `MpmdArray`. The
/// arrays move in batches of at most `threshold` bytes ([`crate::mpmd_to_spmd_batches`]), one
/// exchange per batch; `None` takes the smallest default threshold over the processes
/// ([`global_threshold`]).
pub fn mpmd_to_spmd_reshard_across(
    processes: &dyn Processes,
    client: &Client,
    mesh: &MpmdMesh,
    arrays: Vec<MpmdArray>,
    shardings: Vec<NamedSharding>,
    threshold: Option<u64>,
) -> Result<Vec<Array>> {
    if processes.process_index().0 == 1 {
        return crate::mpmd_to_spmd_reshard(client, mesh, arrays, shardings, threshold);
    }
    same_length(arrays.len(), shardings.len())?;
    let threshold = match threshold {
        Some(t) => t,
        None => global_threshold(processes, default_threshold(client))?,
    };
    let mut done: BTreeMap<usize, Array> = BTreeMap::new();
    for batch in mpmd_to_spmd_batches(mesh, &arrays, threshold)? {
        for (i, array) in mpmd_to_spmd_batch(processes, client, mesh, &arrays, &shardings, &batch)?
        {
            done.insert(i, array);
        }
    }
    Ok(done.into_values().collect())
}

/// The smallest of every process's `local` threshold (JAXPP's `process_allgather` of the
/// working-memory thresholds), so that every process cuts the same batches. Every process
/// calls it at the same point.
pub fn global_threshold(processes: &dyn Processes, local: u64) -> Result<u64> {
    let (count, _) = processes.process_index();
    let received = processes
        .exchange(vec![local.to_le_bytes().to_vec(); count])
        .map_err(comm)?;
    let mut min = local;
    for message in received.iter().filter(|m| !m.is_empty()) {
        let bytes: [u8; 8] = message.as_slice().try_into().map_err(|_| {
            MpmdError::Reshard(format!(
                "a threshold from another process is {} bytes, not 8",
                message.len()
            ))
        })?;
        min = min.min(u64::from_le_bytes(bytes));
    }
    Ok(min)
}

/// One batch of [`mpmd_to_spmd_reshard_across`]: the first group's process sends each block to
/// the processes whose devices need it (one exchange); each process builds its part.
fn mpmd_to_spmd_batch(
    processes: &dyn Processes,
    client: &Client,
    mesh: &MpmdMesh,
    arrays: &[MpmdArray],
    shardings: &[NamedSharding],
    batch: &[usize],
) -> Result<Vec<(usize, Array)>> {
    let (count, me) = processes.process_index();
    let group_of_device = device_groups(mesh);
    let process_of_device = |d: i64| group_of_device.get(&d).map(|&g| processes.process_of(g));
    let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
    for &i in batch {
        let (array, sharding) = (&arrays[i], &shardings[i]);
        let source = array.mpmd_idxs().first().map(|&g| processes.process_of(g));
        if source != Some(me) {
            continue;
        }
        let host = array.first_mpmd_replica()?.to_host()?;
        let mut sent: BTreeSet<(usize, Block)> = BTreeSet::new();
        for (device, block) in sharding.devices_indices_map(array.shape())? {
            let Some(p) = process_of_device(device) else {
                continue;
            };
            if sent.insert((p, block.clone())) {
                encode(&mut outgoing[p], i, &block, &host.block(&block)?);
            }
        }
    }
    let received = decode_all(processes.exchange(outgoing).map_err(comm)?, |i| {
        arrays.get(i).map(|a| a.dtype())
    })?;
    batch
        .iter()
        .map(|&i| {
            let (array, sharding) = (&arrays[i], &shardings[i]);
            let pieces: Vec<&Piece> = received.iter().filter(|p| p.array == i).collect();
            let mut shards = Vec::new();
            for (device, block) in sharding.devices_indices_map(array.shape())? {
                if process_of_device(device) != Some(me) {
                    continue;
                }
                let piece = pieces.iter().find(|p| p.block == block).ok_or_else(|| {
                    MpmdError::Reshard(format!(
                        "block {block:?} of array {i} did not arrive; is its first group's array \
                         held by the process running that group?"
                    ))
                })?;
                let device = device as i32;
                shards.push((device, Buffer::from_host_to(client, &piece.data, device)?));
            }
            let moved =
                Array::from_addressable_shards(array.shape(), array.dtype(), sharding, shards)?;
            Ok((i, moved))
        })
        .collect()
}

/// The arrays in JAXPP's order, cut into batches of at most `threshold` bytes moved.
fn batches(
    arrays: &[Array],
    shardings: &[MpmdSharding],
    mesh: &MpmdMesh,
    threshold: u64,
) -> Result<Vec<Vec<usize>>> {
    let sizes: Vec<usize> = arrays
        .iter()
        .map(|a| {
            let n: i64 = a.shape().iter().product();
            n.max(0) as usize * a.element_type().size_in_bytes()
        })
        .collect();
    let first_groups: Vec<usize> = shardings.iter().map(|s| s.groups()[0]).collect();
    let order = interleaved_order(&sizes, &first_groups);
    let scaled: Vec<u64> = order
        .iter()
        .map(|&i| (sizes[i] * mesh.mpmd_dim()) as u64)
        .collect();
    Ok(group_by_size_threshold(&scaled, threshold)
        .into_iter()
        .map(|batch| batch.into_iter().map(|k| order[k]).collect())
        .collect())
}

/// Which group each device of the mesh belongs to.
fn device_groups(mesh: &MpmdMesh) -> BTreeMap<i64, usize> {
    (0..mesh.mpmd_dim())
        .filter_map(|g| mesh.group(g).ok().map(|m| (g, m)))
        .flat_map(|(g, m)| {
            m.device_ids()
                .iter()
                .map(move |&d| (d, g))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Sends each distinct block of the batch's SPMD arrays held here, from its first holder, to
/// every process whose needs it overlaps; returns the blocks this process received.
fn send_owned_blocks(
    processes: &dyn Processes,
    mesh: &MpmdMesh,
    arrays: &[Array],
    batch: &[usize],
    needs: &dyn Fn(usize, usize) -> Result<Vec<Block>>,
) -> Result<Vec<Piece>> {
    let (count, _) = processes.process_index();
    let mut outgoing: Vec<Vec<u8>> = vec![Vec::new(); count];
    let local: BTreeSet<i64> = processes
        .local_groups()
        .into_iter()
        .filter_map(|g| mesh.group(g).ok())
        .flat_map(|m| m.device_ids().to_vec())
        .collect();
    for &i in batch {
        let array = &arrays[i];
        let mut owners: BTreeMap<Block, i64> = BTreeMap::new();
        for (device, block) in array.sharding().devices_indices_map(array.shape())? {
            owners.entry(block).or_insert(device);
        }
        for shard in array.addressable_shards()? {
            let device = i64::from(shard.device);
            if owners.get(&shard.block) != Some(&device) || !local.contains(&device) {
                continue;
            }
            let data = shard.buffer.to_host()?;
            for (p, out) in outgoing.iter_mut().enumerate() {
                if needs(p, i)?.iter().any(|b| overlaps(b, &shard.block)) {
                    encode(out, i, &shard.block, &data);
                }
            }
        }
    }
    let received = processes.exchange(outgoing).map_err(comm)?;
    decode_all(received, |i| arrays.get(i).map(Array::element_type))
}

fn overlaps(a: &Block, b: &Block) -> bool {
    a.iter().zip(b).all(|(x, y)| x.0 < y.1 && y.0 < x.1)
}

/// `shape` on the host from blocks of it.
fn assemble<'a>(
    shape: &[i64],
    ty: ElementType,
    pieces: impl Iterator<Item = &'a Piece>,
) -> Result<HostArray> {
    let mut host = HostArray::zeros(&tessera_ir::ShapedArray::new(ty.dtype(), shape));
    for piece in pieces {
        host.write_block(&piece.block, &piece.data)?;
    }
    Ok(host)
}

/// Appends one piece: a frame keyed by the array's index whose payload is the block's rank, its
/// bounds, then the block's bytes.
fn encode(out: &mut Vec<u8>, array: usize, block: &Block, data: &HostArray) {
    let mut payload = Vec::with_capacity(8 + 16 * block.len() + data.bytes().len());
    payload.extend((block.len() as u64).to_le_bytes());
    for &(start, stop) in block {
        payload.extend(start.to_le_bytes());
        payload.extend(stop.to_le_bytes());
    }
    payload.extend(data.bytes());
    put_frame(out, array as u64, &payload);
}

/// Every piece in the received messages; `ty(i)` is array `i`'s element type.
fn decode_all(
    messages: Vec<Vec<u8>>,
    ty: impl Fn(usize) -> Option<ElementType>,
) -> Result<Vec<Piece>> {
    let bad = || {
        MpmdError::Reshard(
            "a message from another process is malformed; every process must call the same \
             reshard with the same shapes and shardings"
                .into(),
        )
    };
    let mut pieces = Vec::new();
    for message in &messages {
        for (array, payload) in frames(message).ok_or_else(bad)? {
            let word = |at: usize| -> Result<i64> {
                let bytes: [u8; 8] = payload
                    .get(at..at + 8)
                    .and_then(|b| b.try_into().ok())
                    .ok_or_else(bad)?;
                Ok(i64::from_le_bytes(bytes))
            };
            let rank = usize::try_from(word(0)?).map_err(|_| bad())?;
            let block: Block = (0..rank)
                .map(|d| Ok((word(8 + 16 * d)?, word(16 + 16 * d)?)))
                .collect::<Result<_>>()?;
            let bytes = payload.get(8 + 16 * rank..).ok_or_else(bad)?.to_vec();
            let dims: Vec<i64> = block.iter().map(|(a, b)| b - a).collect();
            let array = array as usize;
            let data = HostArray::from_bytes(ty(array).ok_or_else(bad)?.dtype(), &dims, bytes)?;
            pieces.push(Piece { array, block, data });
        }
    }
    Ok(pieces)
}
