//! The MPI transport against raw MPI, in one run: `mpirun -n 2 tessera-bench-mpi [--json]`.
//!
//! For each size from 4 KiB to 64 MiB, rank 0 and rank 1 bounce a value back and forth: once
//! through the runtime's `MpiTransport` (a device array on each rank's one CPU device, staged
//! through host memory, sent by the endpoint's thread, probed and reassembled by the other's,
//! put back on the device), and once as a raw `MPI_Send`/`MPI_Recv` ping-pong of the same bytes
//! between the main threads (on a duplicate of the world communicator, which the transport's
//! threads never touch). One way is half the median round trip; bandwidth is bytes over it.
//! Rank 0 prints a Markdown table (or JSON lines with `--json`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use mpi::topology::Communicator;
use mpi::traits::{Destination, Source};
use tessera::mpmd::MpmdMesh;
use tessera::mpmd::mpi_job::MpiJob;
use tessera::mpmd::runtime::{OutputLayout, Transport};
use tessera::pjrt::{Array, Client, ElementType, HostArray};
use tessera::sharding::{Mesh, NamedSharding, PartitionSpec};

const SIZES: &[usize] = &[
    4 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

fn rounds(bytes: usize) -> usize {
    if bytes >= 16 << 20 { 10 } else { 50 }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Median round trip of `bytes` through the transport.
fn transport_round_trip(
    job: &MpiJob,
    client: &Client,
    mesh: &MpmdMesh,
    bytes: usize,
) -> anyhow::Result<Duration> {
    let n = (bytes / 4) as i64;
    let layout = OutputLayout {
        shape: vec![n],
        ty: ElementType::F32,
        spec: PartitionSpec::replicated(),
    };
    let layouts = Arc::new(HashMap::from([(0, layout.clone()), (1, layout)]));
    let processes = job.processes(client, mesh)?;
    let me = job.rank();
    let host = HostArray::from_slice(&[n], &vec![1f32; n as usize])?;
    let sharding = NamedSharding::new(mesh.group(me)?, PartitionSpec::replicated())?;
    let mut value = Array::device_put(client, &host, &sharding)?;
    let far = Instant::now() + Duration::from_secs(120);
    let mut times = Vec::new();
    for _ in 0..rounds(bytes) + 2 {
        // A fresh transport per round trip: ids 0 (0 -> 1) and 1 (1 -> 0) repeat.
        let transport = processes.transport(&layouts)?;
        let began = Instant::now();
        if me == 0 {
            transport
                .send(0, &value, 0, 1)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            value = wait(transport.as_ref(), 1, 0, far)?;
        } else {
            value = wait(transport.as_ref(), 0, 1, far)?;
            transport
                .send(1, &value, 1, 0)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        value.block_until_ready()?;
        times.push(began.elapsed());
    }
    Ok(median(times.split_off(2)))
}

fn wait(
    transport: &dyn Transport<Array>,
    id: usize,
    to: usize,
    deadline: Instant,
) -> anyhow::Result<Array> {
    transport
        .recv(id, to, deadline)
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .context("the value did not arrive within 120 s")
}

/// Median round trip of `bytes` as a raw MPI ping-pong.
fn raw_round_trip(comm: &mpi::topology::SimpleCommunicator, bytes: usize) -> Duration {
    let mut buffer = vec![1u8; bytes];
    let me = comm.rank();
    let other = comm.process_at_rank(1 - me);
    let mut times = Vec::new();
    for _ in 0..rounds(bytes) + 2 {
        let began = Instant::now();
        if me == 0 {
            other.send(&buffer[..]);
            other.receive_into(&mut buffer[..]);
        } else {
            other.receive_into(&mut buffer[..]);
            other.send(&buffer[..]);
        }
        times.push(began.elapsed());
    }
    median(times.split_off(2))
}

fn main() -> anyhow::Result<()> {
    let json = std::env::args().any(|a| a == "--json");
    let job = MpiJob::init()?.context("run it under mpirun: mpirun -n 2 tessera-bench-mpi")?;
    if job.size() != 2 {
        bail!("run it with two ranks: mpirun -n 2 tessera-bench-mpi");
    }
    let client = Client::cpu(1)?;
    let mesh = MpmdMesh::for_process(
        &Mesh::auto(&[("stage", 2), ("data", 1)])?,
        "stage",
        job.rank(),
    )?;
    let raw_comm = mpi::topology::SimpleCommunicator::world().duplicate();
    if job.rank() == 0 && !json {
        println!(
            "| bytes | transport one way | transport GB/s | raw MPI one way | raw MPI GB/s | transport / raw bandwidth |"
        );
        println!("|---:|---:|---:|---:|---:|---:|");
    }
    for &bytes in SIZES {
        let transport = transport_round_trip(&job, &client, &mesh, bytes)? / 2;
        let raw = raw_round_trip(&raw_comm, bytes) / 2;
        if job.rank() != 0 {
            continue;
        }
        let gbs = |t: Duration| bytes as f64 / t.as_secs_f64() / 1e9;
        let ratio = raw.as_secs_f64() / transport.as_secs_f64();
        if json {
            println!(
                "{}",
                serde_json::json!({
                    "bytes": bytes,
                    "transport_one_way_us": transport.as_secs_f64() * 1e6,
                    "raw_one_way_us": raw.as_secs_f64() * 1e6,
                    "transport_over_raw_bandwidth": ratio,
                })
            );
        } else {
            let size = if bytes >= 1 << 20 {
                format!("{} MiB", bytes >> 20)
            } else {
                format!("{} KiB", bytes >> 10)
            };
            println!(
                "| {size} | {:.1} µs | {:.2} | {:.1} µs | {:.2} | {ratio:.2} |",
                transport.as_secs_f64() * 1e6,
                gbs(transport),
                raw.as_secs_f64() * 1e6,
                gbs(raw)
            );
        }
    }
    drop(raw_comm);
    Ok(())
}
