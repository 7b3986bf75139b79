//! Multi-process ("distributed") PJRT clients, JAX's multi-host model: each process creates one
//! client that is meant to see every process's devices (global ids, a `process_index` per
//! device), sharing its topology through a key-value store that `PJRT_Client_Create` reaches
//! through the `kv_get`/`kv_try_get`/`kv_put` callbacks of its arguments.
//!
//! [`Client::open_distributed`] passes the store and the options of the plugin's platform, then
//! checks what the plugin made: a client whose devices do not belong to all the processes is a
//! [`PjrtError::NotMultiProcess`] saying what the plugin did (its devices' process indices, how
//! often it used the store). XLA's CPU plugins read only `cpu_device_count` in
//! `PJRT_Client_Create` and never call the store (measured in `tests/distributed_client.rs`), so
//! with them this is always that error; JAX builds its multi-process CPU client (gloo or MPI
//! collectives) in jaxlib's own C++, outside the PJRT C API.

use std::collections::BTreeSet;
use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::client::{Client, ClientOptions, CudaOptions, OptionValue};
use crate::discovery::PluginChoice;
use crate::error::{PjrtError, Result};
use crate::known_plugins::PluginPlatform;
use crate::plugin::Plugin;
use crate::sys;

/// A key-value store shared by the processes of one job. Implementations must be thread-safe;
/// `get` blocks until the key exists or the timeout passes.
pub trait KeyValueStore: Send + Sync {
    /// Stores `value` under `key`.
    fn put(&self, key: &str, value: &[u8]) -> std::result::Result<(), String>;
    /// The value under `key`, waiting up to `timeout` for another process to put it.
    fn get(&self, key: &str, timeout: Duration) -> std::result::Result<Vec<u8>, String>;
    /// The value under `key`, or `None` at once when there is none.
    fn try_get(&self, key: &str) -> std::result::Result<Option<Vec<u8>>, String>;
}

/// A [`KeyValueStore`] in a folder that every process of the job can read (processes on one
/// machine, or a shared file system): one file per key, written whole then renamed.
#[derive(Debug, Clone)]
pub struct DirKeyValueStore {
    dir: PathBuf,
}

impl DirKeyValueStore {
    /// A store in `dir`, created if missing.
    pub fn new(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).map_err(|err| PjrtError::InvalidOption {
            name: "key-value store folder".into(),
            reason: format!("cannot create {}: {err}", dir.display()),
        })?;
        Ok(Self { dir: dir.into() })
    }

    fn path(&self, key: &str) -> PathBuf {
        let hex: String = key.bytes().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("kv-{hex}"))
    }
}

impl KeyValueStore for DirKeyValueStore {
    fn put(&self, key: &str, value: &[u8]) -> std::result::Result<(), String> {
        let path = self.path(key);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, value).map_err(|err| format!("{}: {err}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|err| format!("{}: {err}", path.display()))
    }

    fn get(&self, key: &str, timeout: Duration) -> std::result::Result<Vec<u8>, String> {
        let start = Instant::now();
        loop {
            if let Some(value) = self.try_get(key)? {
                return Ok(value);
            }
            if start.elapsed() >= timeout {
                return Err(format!("key {key:?} not put within {timeout:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn try_get(&self, key: &str) -> std::result::Result<Option<Vec<u8>>, String> {
        match std::fs::read(self.path(key)) {
            Ok(value) => Ok(Some(value)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(format!("key {key:?}: {err}")),
        }
    }
}

/// What a plugin made when asked for a client spanning processes
/// ([`PjrtError::NotMultiProcess`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "the PJRT plugin {plugin} (platform {platform}) cannot make a client spanning \
     processes: opened as process {process_id} of {num_processes}, it made {devices} \
     devices of processes {process_indices:?} and called the key-value store \
     {store_calls} times. {reason}"
)]
pub struct SingleProcessClient {
    /// The plugin's path.
    pub plugin: PathBuf,
    /// The platform Tessera took it for.
    pub platform: String,
    /// This process's index, as asked.
    pub process_id: usize,
    /// The processes of the job, as asked.
    pub num_processes: usize,
    /// The devices the client reports.
    pub devices: usize,
    /// The distinct process indices of those devices.
    pub process_indices: Vec<i32>,
    /// How many times the plugin called the key-value store.
    pub store_calls: usize,
    /// Why, for the platform, and what to do instead.
    pub reason: String,
}

/// Where this process stands in a multi-process job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DistributedOptions {
    /// This process's index, `0..num_processes`.
    pub process_id: usize,
    /// The number of processes.
    pub num_processes: usize,
    /// The devices this process contributes (CPU: virtual devices; GPU plugins use their GPUs).
    pub local_devices: i64,
}

/// The store handed to the plugin as the callbacks' `user_arg`, counting the plugin's calls.
pub(crate) struct KvBridge {
    store: Arc<dyn KeyValueStore>,
    calls: AtomicUsize,
}

impl KvBridge {
    pub(crate) fn new(store: Arc<dyn KeyValueStore>) -> Arc<Self> {
        Arc::new(Self {
            store,
            calls: AtomicUsize::new(0),
        })
    }

    /// How many times the plugin called the store.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Sets the store's callbacks in `args`; `self` must outlive the client.
    pub(crate) fn install(self: &Arc<Self>, args: &mut sys::PJRT_Client_Create_Args) {
        let user = Arc::as_ptr(self) as *mut std::ffi::c_void;
        args.kv_get_callback = Some(kv_get);
        args.kv_get_user_arg = user;
        args.kv_try_get_callback = Some(kv_try_get);
        args.kv_try_get_user_arg = user;
        args.kv_put_callback = Some(kv_put);
        args.kv_put_user_arg = user;
    }
}

/// Makes a PJRT error through the plugin's `callback_error` (null when it gave none).
///
/// # Safety
/// `make` is the plugin's `callback_error` pointer from the callback's arguments.
unsafe fn callback_error(
    make: *mut sys::PJRT_CallbackError,
    code: sys::PJRT_Error_Code,
    message: &str,
) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes a valid (or null) pointer to its error maker.
    match unsafe { make.as_ref() }.copied().flatten() {
        // SAFETY: the message is valid for the call; the plugin copies it.
        Some(make) => unsafe { make(code, message.as_ptr().cast(), message.len()) },
        None => std::ptr::null_mut(),
    }
}

/// # Safety
/// `key`/`len` is the plugin's key, valid for the call.
unsafe fn key_of(key: *const c_char, len: usize) -> String {
    // SAFETY: as above.
    unsafe { crate::util::string_from_raw(key, len) }
}

/// Copies `value` into memory the plugin frees with [`free_value`].
fn malloc_value(value: &[u8]) -> *mut c_char {
    // SAFETY: malloc of at least one byte; the copy stays within it.
    unsafe {
        let ptr = libc::malloc(value.len().max(1)).cast::<u8>();
        if !ptr.is_null() {
            std::ptr::copy_nonoverlapping(value.as_ptr(), ptr, value.len());
        }
        ptr.cast()
    }
}

unsafe extern "C" fn free_value(value: *mut c_char) {
    // SAFETY: `value` came from `malloc_value`.
    unsafe { libc::free(value.cast()) }
}

/// Runs a store call, turning a panic into an error message (nothing unwinds into C).
fn guarded<T>(
    f: impl FnOnce() -> std::result::Result<T, String>,
) -> std::result::Result<T, String> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err("the key-value store panicked".into()))
}

unsafe extern "C" fn kv_get(args: *mut sys::PJRT_KeyValueGetCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes valid arguments whose `user_arg` is the `KvBridge` installed.
    let args = unsafe { &mut *args };
    let bridge = unsafe { &*(args.user_arg as *const KvBridge) };
    bridge.calls.fetch_add(1, Ordering::SeqCst);
    let key = unsafe { key_of(args.key, args.key_size) };
    let timeout = Duration::from_millis(u64::try_from(args.timeout_in_ms).unwrap_or(0));
    match guarded(|| bridge.store.get(&key, timeout)) {
        Ok(value) => {
            args.value = malloc_value(&value);
            args.value_size = value.len();
            args.value_deleter_callback = Some(free_value);
            std::ptr::null_mut()
        }
        Err(message) => unsafe {
            callback_error(
                args.callback_error,
                sys::PJRT_Error_Code::PJRT_Error_Code_DEADLINE_EXCEEDED,
                &message,
            )
        },
    }
}

unsafe extern "C" fn kv_try_get(
    args: *mut sys::PJRT_KeyValueTryGetCallback_Args,
) -> *mut sys::PJRT_Error {
    // SAFETY: as in `kv_get`.
    let args = unsafe { &mut *args };
    let bridge = unsafe { &*(args.user_arg as *const KvBridge) };
    bridge.calls.fetch_add(1, Ordering::SeqCst);
    let key = unsafe { key_of(args.key, args.key_size) };
    let (code, message) = match guarded(|| bridge.store.try_get(&key)) {
        Ok(Some(value)) => {
            args.value = malloc_value(&value);
            args.value_size = value.len();
            args.value_deleter_callback = Some(free_value);
            return std::ptr::null_mut();
        }
        Ok(None) => (
            sys::PJRT_Error_Code::PJRT_Error_Code_NOT_FOUND,
            format!("key {key:?} not found"),
        ),
        Err(message) => (sys::PJRT_Error_Code::PJRT_Error_Code_INTERNAL, message),
    };
    unsafe { callback_error(args.callback_error, code, &message) }
}

unsafe extern "C" fn kv_put(args: *mut sys::PJRT_KeyValuePutCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: as in `kv_get`; the value is valid for the call.
    let args = unsafe { &mut *args };
    let bridge = unsafe { &*(args.user_arg as *const KvBridge) };
    bridge.calls.fetch_add(1, Ordering::SeqCst);
    let key = unsafe { key_of(args.key, args.key_size) };
    let value: &[u8] = if args.value.is_null() {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(args.value.cast(), args.value_size) }
    };
    match guarded(|| bridge.store.put(&key, value)) {
        Ok(()) => std::ptr::null_mut(),
        Err(message) => unsafe {
            callback_error(
                args.callback_error,
                sys::PJRT_Error_Code::PJRT_Error_Code_INTERNAL,
                &message,
            )
        },
    }
}

impl Client {
    /// Creates this process's client of a multi-process job: the plugin gets `store` through
    /// the key-value callbacks of `PJRT_Client_Create` and the options of its platform (CPU:
    /// `cpu_device_count`, the only one XLA's CPU plugins read; CUDA: `node_id` and
    /// `num_nodes` as well). The client is then checked: unless its devices belong to all
    /// `num_processes` processes it is a [`PjrtError::NotMultiProcess`] saying what the plugin
    /// made, so a program compiled for it cannot silently run on one process's devices.
    pub fn open_distributed(
        choice: &PluginChoice,
        options: &DistributedOptions,
        store: Arc<dyn KeyValueStore>,
    ) -> Result<Client> {
        if options.num_processes == 0 || options.process_id >= options.num_processes {
            return Err(PjrtError::InvalidOption {
                name: "process_id".into(),
                reason: format!(
                    "process {} of {} does not exist: give 0 <= process_id < num_processes",
                    options.process_id, options.num_processes
                ),
            });
        }
        let named = match choice.platform {
            Some(PluginPlatform::Cuda) => ClientOptions::cuda(&CudaOptions {
                node_id: Some(options.process_id as i64),
                num_nodes: Some(options.num_processes as i64),
                ..CudaOptions::from_env()?
            }),
            Some(PluginPlatform::Cpu) => ClientOptions::cpu(options.local_devices),
            None => ClientOptions::default()
                .with("node_id", OptionValue::Int(options.process_id as i64))
                .with("num_nodes", OptionValue::Int(options.num_processes as i64)),
        };
        named.check_cpu_device_count()?;
        let bridge = KvBridge::new(store);
        let client = Client::new_with_store(Plugin::load(&choice.path)?, &named, &bridge)?;
        let devices = client.devices()?;
        let indices = devices
            .iter()
            .map(|device| device.process_index())
            .collect::<Result<BTreeSet<i32>>>()?;
        let wanted: BTreeSet<i32> = (0..options.num_processes as i32).collect();
        if indices != wanted {
            return Err(PjrtError::NotMultiProcess(Box::new(SingleProcessClient {
                plugin: choice.path.clone(),
                platform: choice
                    .platform
                    .map_or("unknown", PluginPlatform::label)
                    .into(),
                process_id: options.process_id,
                num_processes: options.num_processes,
                devices: devices.len(),
                process_indices: indices.into_iter().collect(),
                store_calls: bridge.calls(),
                reason: not_multi_process_reason(choice.platform),
            })));
        }
        Ok(client)
    }
}

/// Why a plugin of `platform` made a single-process client, and what to do instead.
fn not_multi_process_reason(platform: Option<PluginPlatform>) -> String {
    let mpmd = "run one process per pipeline group over MPI instead (tessera-mpmd's processes \
                mode)";
    match platform {
        Some(PluginPlatform::Cpu) => format!(
            "XLA's CPU plugins take no node id, process count, key-value store or \
             cross-process collectives in PJRT_Client_Create (JAX builds its multi-process CPU \
             client with gloo or MPI outside the PJRT C API). Fix: {mpmd}, or use a GPU plugin"
        ),
        Some(PluginPlatform::Cuda) => format!(
            "Fix: check that every process was started with the same process count and store \
             folder, and sees its own GPUs (`visible_devices`); or {mpmd}"
        ),
        None => format!(
            "the plugin's platform is unknown, so it was passed `node_id`/`num_nodes` only. \
             Fix: use a plugin that builds multi-process clients, or {mpmd}"
        ),
    }
}

#[cfg(test)]
mod tests {
    //! The callbacks as a plugin calls them (no installed plugin calls them: XLA's CPU plugins
    //! never use the store).

    use std::cell::RefCell;

    use super::*;

    thread_local! {
        static LAST_ERROR: RefCell<Option<(sys::PJRT_Error_Code, String)>> =
            const { RefCell::new(None) };
    }

    /// Stands for the plugin's `callback_error`: records the error, returns a non-null marker
    /// that is never dereferenced.
    unsafe extern "C" fn record_error(
        code: sys::PJRT_Error_Code,
        message: *const c_char,
        size: usize,
    ) -> *mut sys::PJRT_Error {
        // SAFETY: the message is valid for the call.
        let text = unsafe { crate::util::string_from_raw(message, size) };
        LAST_ERROR.with(|last| *last.borrow_mut() = Some((code, text)));
        std::ptr::NonNull::<sys::PJRT_Error>::dangling().as_ptr()
    }

    fn bridge(name: &str) -> (Arc<KvBridge>, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("tessera-kv-unit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store: Arc<dyn KeyValueStore> = Arc::new(DirKeyValueStore::new(&dir).unwrap());
        (KvBridge::new(store), dir)
    }

    #[test]
    fn put_then_get_and_try_get_round_trip_through_the_c_callbacks() {
        let (bridge, dir) = bridge("roundtrip");
        let mut create = sys::PJRT_Client_Create_Args::default();
        bridge.install(&mut create);
        let user = create.kv_put_user_arg;
        let mut maker: sys::PJRT_CallbackError = Some(record_error);
        let (key, value) = ("gpu:local_topology/1", b"\x00topology\xff");
        let mut put = sys::PJRT_KeyValuePutCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            value: value.as_ptr().cast(),
            value_size: value.len(),
            callback_error: &mut maker,
            user_arg: user,
            ..Default::default()
        };
        let put_fn = create.kv_put_callback.unwrap();
        assert!(unsafe { put_fn(&mut put) }.is_null());

        let mut get = sys::PJRT_KeyValueGetCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            timeout_in_ms: 1000,
            callback_error: &mut maker,
            user_arg: create.kv_get_user_arg,
            ..Default::default()
        };
        assert!(unsafe { create.kv_get_callback.unwrap()(&mut get) }.is_null());
        let got = unsafe { std::slice::from_raw_parts(get.value.cast::<u8>(), get.value_size) };
        assert_eq!(got, value);
        unsafe { get.value_deleter_callback.unwrap()(get.value) };

        let mut try_get = sys::PJRT_KeyValueTryGetCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            callback_error: &mut maker,
            user_arg: create.kv_try_get_user_arg,
            ..Default::default()
        };
        assert!(unsafe { create.kv_try_get_callback.unwrap()(&mut try_get) }.is_null());
        assert_eq!(try_get.value_size, value.len());
        unsafe { try_get.value_deleter_callback.unwrap()(try_get.value) };
        assert_eq!(bridge.calls(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_key_is_the_plugins_error_with_the_right_code() {
        let (bridge, dir) = bridge("missing");
        let mut create = sys::PJRT_Client_Create_Args::default();
        bridge.install(&mut create);
        let mut maker: sys::PJRT_CallbackError = Some(record_error);
        let key = "never/put";
        let mut try_get = sys::PJRT_KeyValueTryGetCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            callback_error: &mut maker,
            user_arg: create.kv_try_get_user_arg,
            ..Default::default()
        };
        assert!(!unsafe { create.kv_try_get_callback.unwrap()(&mut try_get) }.is_null());
        let (code, text) = LAST_ERROR.with(|last| last.borrow_mut().take()).unwrap();
        assert_eq!(code, sys::PJRT_Error_Code::PJRT_Error_Code_NOT_FOUND);
        assert!(text.contains("never/put"), "{text}");

        let mut get = sys::PJRT_KeyValueGetCallback_Args {
            key: key.as_ptr().cast(),
            key_size: key.len(),
            timeout_in_ms: 30,
            callback_error: &mut maker,
            user_arg: create.kv_get_user_arg,
            ..Default::default()
        };
        assert!(!unsafe { create.kv_get_callback.unwrap()(&mut get) }.is_null());
        let (code, text) = LAST_ERROR.with(|last| last.borrow_mut().take()).unwrap();
        assert_eq!(
            code,
            sys::PJRT_Error_Code::PJRT_Error_Code_DEADLINE_EXCEEDED
        );
        assert!(text.contains("not put within"), "{text}");
        assert!(get.value.is_null());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
