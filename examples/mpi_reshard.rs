//! Moving arrays between the SPMD layout (one array over the whole mesh) and the MPMD layout
//! (arrays on the groups that use them) across the processes of a job:
//!
//! ```sh
//! cargo build -p tessera-examples --example mpi_reshard
//! mpirun -n 2 target/debug/examples/mpi_reshard      # as root: --allow-run-as-root
//! ```
//!
//! The mesh is `stage=2, data=4`; each rank runs one group on 4 CPU devices of its own. An SPMD
//! array split over both axes is held in part by each rank (its own devices' shards). It goes
//! to group 1 only (rank 1 receives rank 0's rows), and to both groups split by columns; then
//! back from group 1 to the SPMD layout, each rank getting its own shards. Every rank checks
//! what it holds against the values it should hold and prints one line; rank 0 prints `ok`
//! last. Run without `mpirun`, it does the same in one process with 8 devices.

use tessera::mpmd::mpi_job::MpiJob;
use tessera::mpmd::processes::Processes;
use tessera::mpmd::{
    MpmdArray, MpmdMesh, MpmdSharding, global_threshold, mpmd_to_spmd_reshard,
    mpmd_to_spmd_reshard_across, spmd_to_mpmd_reshard, spmd_to_mpmd_reshard_across,
};
use tessera::pjrt::{Array, Buffer, Client, HostArray};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

const ROWS: i64 = 8;
const COLS: i64 = 4;

/// The values of the global array: element `(r, c)` is `10 r + c`.
fn global() -> anyhow::Result<HostArray> {
    let values: Vec<f32> = (0..ROWS * COLS)
        .map(|i| (10 * (i / COLS) + i % COLS) as f32)
        .collect();
    Ok(HostArray::from_slice(&[ROWS, COLS], &values)?)
}

/// This process's part of `host` laid out by `sharding`: the shards of its own devices.
fn local_part(
    client: &Client,
    host: &HostArray,
    sharding: &NamedSharding,
) -> anyhow::Result<Array> {
    let mine = client
        .addressable_devices()?
        .iter()
        .map(|d| Ok(i64::from(d.id()?)))
        .collect::<anyhow::Result<Vec<i64>>>()?;
    let mut shards = Vec::new();
    for (device, block) in sharding.devices_indices_map(host.dims())? {
        if mine.contains(&device) {
            let device = device as i32;
            shards.push((
                device,
                Buffer::from_host_to(client, &host.block(&block)?, device)?,
            ));
        }
    }
    Ok(Array::from_addressable_shards(
        host.dims(),
        tessera::pjrt::ElementType::from_dtype(host.dtype()),
        sharding,
        shards,
    )?)
}

/// The values of a host array as `f32`s.
fn floats(host: &HostArray) -> anyhow::Result<Vec<f32>> {
    host.to_typed::<f32>()
        .ok_or_else(|| anyhow::anyhow!("expected f32 values"))
}

/// Checks that every shard of `array` held here has the values of its block of `want`.
fn check_shards(what: &str, array: &Array, want: &HostArray) -> anyhow::Result<usize> {
    let shards = array.addressable_shards()?;
    for shard in shards {
        let got = floats(&shard.buffer.to_host()?)?;
        let expected = floats(&want.block(&shard.block)?)?;
        anyhow::ensure!(
            got == expected,
            "{what}: block {:?} is {got:?}, not {expected:?}",
            shard.block
        );
    }
    Ok(shards.len())
}

fn main() -> anyhow::Result<()> {
    let job = MpiJob::init()?;
    let shape = Mesh::auto(&[("stage", 2), ("data", 4)])?;
    let (client, mesh, processes): (Client, MpmdMesh, Option<std::sync::Arc<dyn Processes>>) =
        match &job {
            Some(job) => {
                anyhow::ensure!(job.size() == 2, "run with mpirun -n 2 (one rank per group)");
                let client = Client::cpu(4)?;
                let mesh = MpmdMesh::for_process(&shape, "stage", job.rank())?;
                let processes = job.processes(&client, &mesh)?;
                (client, mesh, Some(processes))
            }
            None => (Client::cpu(8)?, MpmdMesh::new(shape, "stage")?, None),
        };
    let rank = job.as_ref().map_or(0, MpiJob::rank);
    let host = global()?;
    let spec = |text: &str| PartitionSpec::parse(text);
    let spmd = NamedSharding::new(mesh.mesh(), spec("P('stage', 'data')")?)?;
    let to_group_1 = MpmdSharding::new(&mesh, [1], &spec("P('data')")?)?;
    let to_both = MpmdSharding::new(&mesh, [0, 1], &spec("P(None, 'data')")?)?;
    let parts = vec![
        local_part(&client, &host, &spmd)?,
        local_part(&client, &host, &spmd)?,
    ];
    let shardings = vec![to_group_1, to_both];
    let mpmd: Vec<MpmdArray> = match &processes {
        Some(p) => spmd_to_mpmd_reshard_across(p.as_ref(), &client, &mesh, parts, shardings, None)?,
        None => spmd_to_mpmd_reshard(&client, &mesh, parts, shardings, None)?,
    };
    // Whatever this process holds of the MPMD arrays is the whole array, laid out by its spec.
    for (name, array) in ["group 1", "both groups"].iter().zip(&mpmd) {
        for (group, local) in array.to_mpmd_local_arrays()? {
            let n = check_shards(name, local, &host)?;
            anyhow::ensure!(floats(&local.to_host()?)? == floats(&host)?);
            println!("rank {rank}: {name}: group {group} holds the array in {n} shards");
        }
    }
    anyhow::ensure!(
        mpmd[0].is_partially_addressable() == (processes.is_none() || rank == 1),
        "group 1's array is held by the wrong processes"
    );
    // Back to the SPMD layout from group 1: each process gets its own devices' shards.
    let back = vec![mpmd[0].clone()];
    let spmd_back = match &processes {
        Some(p) => {
            mpmd_to_spmd_reshard_across(p.as_ref(), &client, &mesh, back, vec![spmd.clone()], None)?
        }
        None => mpmd_to_spmd_reshard(&client, &mesh, back, vec![spmd.clone()], None)?,
    };
    let n = check_shards("back to SPMD", &spmd_back[0], &host)?;
    println!("rank {rank}: back to SPMD: {n} shards held here");
    // Both arrays back with a 1-byte threshold: one batch (one exchange) per array.
    let spmd_both = match &processes {
        Some(p) => mpmd_to_spmd_reshard_across(
            p.as_ref(),
            &client,
            &mesh,
            mpmd.clone(),
            vec![spmd.clone(), spmd.clone()],
            Some(1),
        )?,
        None => mpmd_to_spmd_reshard(&client, &mesh, mpmd.clone(), vec![spmd.clone(); 2], Some(1))?,
    };
    for (i, array) in spmd_both.iter().enumerate() {
        let n = check_shards("both back in batches", array, &host)?;
        println!("rank {rank}: batched array {i}: {n} shards held here");
    }
    // Every rank proposes its own threshold; all agree on the smallest.
    if let Some(p) = &processes {
        let agreed = global_threshold(p.as_ref(), 1000 + 10 * rank as u64)?;
        println!("rank {rank}: global threshold {agreed}");
    }
    if rank == 0 {
        println!("ok");
    }
    Ok(())
}
