//! Opens this process's client of a multi-process job (JAX's multi-host model) and lists every
//! device it sees with its owning process, or prints why the plugin cannot:
//!
//! ```text
//! mpirun -n 2 target/debug/examples/distributed_client [PLUGIN] [STORE_DIR]
//! ```
//!
//! The rank and size come from Open MPI's or a PMI launcher's environment (one process of one
//! when neither is set); the processes share a key-value store in `STORE_DIR` (a folder all of
//! them can reach, default `$TMPDIR/tessera-kv`; empty it between jobs). With XLA's CPU plugins
//! every rank prints `PjrtError::NotMultiProcess` and exits with status 2.

use std::path::PathBuf;
use std::sync::Arc;

use tessera_pjrt::{Client, DirKeyValueStore, DistributedOptions, resolve_plugin};

fn env_number(names: &[&str]) -> Option<usize> {
    names
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse().ok())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let plugin = args.next();
    let store_dir = args
        .next()
        .map_or_else(|| std::env::temp_dir().join("tessera-kv"), PathBuf::from);
    let process_id = env_number(&["OMPI_COMM_WORLD_RANK", "PMI_RANK"]).unwrap_or(0);
    let num_processes = env_number(&["OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]).unwrap_or(1);
    let choice = resolve_plugin(plugin.as_deref())?;
    let store = Arc::new(DirKeyValueStore::new(&store_dir)?);
    let options = DistributedOptions {
        process_id,
        num_processes,
        local_devices: 2,
    };
    match Client::open_distributed(&choice, &options, store) {
        Ok(client) => {
            let local = client.addressable_devices()?.len();
            println!("process {process_id} of {num_processes}: {local} addressable devices");
            for device in client.devices()? {
                println!(
                    "process {process_id}: device {} of process {}",
                    device.id()?,
                    device.process_index()?
                );
            }
            Ok(())
        }
        Err(err) => {
            eprintln!("process {process_id} of {num_processes}: {err}");
            std::process::exit(2);
        }
    }
}
