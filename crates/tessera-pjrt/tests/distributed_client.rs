//! Multi-process clients (JAX's multi-host model): what each installed CPU plugin does when
//! asked for one. Each is handed a key-value store through `PJRT_Client_Create`'s callbacks and
//! JAX's multi-process option names; none makes a client spanning processes, so
//! `Client::open_distributed` refuses with a typed error that says so.

use std::sync::Arc;
use std::time::Duration;

use tessera_pjrt::known_plugins::CPU_PLUGINS;
use tessera_pjrt::{
    Client, ClientOptions, DirKeyValueStore, DistributedOptions, KeyValueStore, OptionValue,
    PjrtError, Plugin, PluginPlatform, SingleProcessClient, cached_plugin, resolve_plugin,
};

fn installed_cpu_plugins() -> Vec<&'static str> {
    let names: Vec<&str> = CPU_PLUGINS
        .iter()
        .filter(|known| cached_plugin(known).is_some_and(|path| path.is_file()))
        .map(|known| known.name)
        .collect();
    assert!(
        names.len() >= 2,
        "setup installs two CPU plugins: {names:?}"
    );
    names
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-kv-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every installed CPU plugin, opened as process 0 or 1 of 2 with a store, makes a client of
/// its own devices only (all of process 0) without touching the store: the refusal names the
/// plugin and what it made.
#[test]
fn cpu_plugins_make_single_process_clients_and_are_refused_by_name() {
    for name in installed_cpu_plugins() {
        let choice = resolve_plugin(Some(name)).unwrap();
        for process_id in 0..2 {
            let dir = scratch_dir(&format!("{name}-{process_id}"));
            let store = Arc::new(DirKeyValueStore::new(&dir).unwrap());
            let options = DistributedOptions {
                process_id,
                num_processes: 2,
                local_devices: 2,
            };
            let err = Client::open_distributed(&choice, &options, store).unwrap_err();
            match &err {
                PjrtError::NotMultiProcess(made) => {
                    let SingleProcessClient {
                        plugin,
                        platform,
                        devices,
                        process_indices,
                        store_calls,
                        ..
                    } = made.as_ref();
                    assert_eq!(plugin, &choice.path, "{name}");
                    assert_eq!(platform, "cpu", "{name}");
                    assert_eq!(*devices, 2, "{name}: only this process's devices");
                    assert_eq!(process_indices, &[0], "{name}: every device is process 0's");
                    assert_eq!(*store_calls, 0, "{name}: the plugin never used the store");
                }
                other => panic!("{name}: expected NotMultiProcess, got {other}"),
            }
            let text = err.to_string();
            assert!(text.contains(&choice.path.display().to_string()), "{text}");
            assert!(
                text.contains(&format!("process {process_id} of 2")),
                "{text}"
            );
            assert!(
                text.contains("no node id, process count, key-value store"),
                "{text}"
            );
            assert!(
                std::fs::read_dir(&dir).unwrap().next().is_none(),
                "nothing was put"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// JAX's multi-process option names given directly (bypassing Tessera's platform check):
/// xla-cpu-pjrt and zml-cpu ignore them (process 1 of 2 with gloo collectives still gets
/// devices 0.. of process 0); jax-0.11-cpu refuses `node_id`, `num_nodes` and `collectives`
/// by name and takes only `process_id`, which renumbers its own devices (global ids
/// `2048 * process_id + i`, process index `process_id`) without adding any other process's.
/// So there is no option to turn on, only a plugin to replace.
#[test]
fn cpu_plugins_have_no_multi_process_options() {
    for name in installed_cpu_plugins() {
        let choice = resolve_plugin(Some(name)).unwrap();
        assert_eq!(choice.platform, Some(PluginPlatform::Cpu));
        let plugin = Plugin::load(&choice.path).unwrap();
        let jax_names = ClientOptions::cpu(2)
            .with("node_id", OptionValue::Int(1))
            .with("num_nodes", OptionValue::Int(2))
            .with("process_id", OptionValue::Int(1))
            .with("collectives", OptionValue::Str("gloo".into()));
        let ignoring = name != "jax-0.11-cpu";
        match Client::new(plugin, &jax_names) {
            Ok(client) => {
                assert!(ignoring, "{name} took JAX's multi-process names");
                let devices = client.devices().unwrap();
                assert_eq!(devices.len(), 2, "{name}");
                for (i, device) in devices.iter().enumerate() {
                    assert_eq!(device.id().unwrap(), i as i32, "{name}");
                    assert_eq!(device.process_index().unwrap(), 0, "{name}");
                }
            }
            Err(err) => {
                assert!(!ignoring, "{name}: {err}");
                assert!(
                    matches!(&err, PjrtError::OptionRejected { option, .. } if option == "node_id" || option == "num_nodes"),
                    "{name}: {err}"
                );
                let with_id = ClientOptions::cpu(2).with("process_id", OptionValue::Int(1));
                let client = Client::new(plugin, &with_id).unwrap();
                let devices = client.devices().unwrap();
                let ids: Vec<i32> = devices.iter().map(|d| d.id().unwrap()).collect();
                let indices: Vec<i32> =
                    devices.iter().map(|d| d.process_index().unwrap()).collect();
                assert_eq!(ids, [2048, 2049], "{name}");
                assert_eq!(indices, [1, 1], "{name}");
                assert_eq!(client.addressable_devices().unwrap().len(), 2, "{name}");
                let gloo =
                    ClientOptions::cpu(2).with("collectives", OptionValue::Str("gloo".into()));
                let err = Client::new(plugin, &gloo).unwrap_err();
                assert!(
                    matches!(&err, PjrtError::OptionRejected { option, .. } if option == "collectives"),
                    "{name}: {err}"
                );
            }
        }
    }
}

/// Process ids outside the job are refused before any plugin is loaded.
#[test]
fn a_process_id_outside_the_job_is_refused() {
    let choice = resolve_plugin(Some("cpu")).unwrap();
    let dir = scratch_dir("bad-id");
    let store = Arc::new(DirKeyValueStore::new(&dir).unwrap());
    let options = DistributedOptions {
        process_id: 2,
        num_processes: 2,
        local_devices: 1,
    };
    let err = Client::open_distributed(&choice, &options, store).unwrap_err();
    assert!(
        matches!(&err, PjrtError::InvalidOption { name, .. } if name == "process_id"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The folder store: a value put by one thread is read by another that waits for it; a key
/// never put times out with a message naming it; `try_get` does not wait.
#[test]
fn the_folder_store_hands_values_between_threads() {
    let dir = scratch_dir("store");
    let store = Arc::new(DirKeyValueStore::new(&dir).unwrap());
    let writer = Arc::clone(&store);
    let handle = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        writer.put("topology/0:node", b"\x00\x01bytes").unwrap();
    });
    let value = store
        .get("topology/0:node", Duration::from_secs(10))
        .unwrap();
    handle.join().unwrap();
    assert_eq!(value, b"\x00\x01bytes");
    assert_eq!(store.try_get("missing").unwrap(), None);
    let err = store.get("missing", Duration::from_millis(20)).unwrap_err();
    assert!(err.contains("\"missing\""), "{err}");
    store.put("topology/0:node", b"second").unwrap();
    assert_eq!(
        store.try_get("topology/0:node").unwrap().as_deref(),
        Some(&b"second"[..])
    );
    let _ = std::fs::remove_dir_all(&dir);
}
