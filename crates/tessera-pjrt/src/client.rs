//! PJRT clients: created from a plugin with named options, they own the devices.

use std::ffi::CString;
use std::sync::Arc;

use crate::device::Device;
use crate::discovery::{PluginChoice, resolve_plugin};
use crate::error::{ErrorCode, PjrtError, Result};
use crate::known_plugins::PluginPlatform;
use crate::plugin::{Plugin, api_call};
use crate::sys;
use crate::util::string_from_raw;

/// Builds a PJRT argument struct with its `struct_size` set and every other field defaulted.
macro_rules! args {
    ($ty:ident { $($field:ident : $value:expr),* $(,)? }) => {
        $crate::sys::$ty {
            struct_size: std::mem::size_of::<$crate::sys::$ty>(),
            $($field: $value,)*
            ..Default::default()
        }
    };
}
pub(crate) use args;

/// A value of a client create option (PJRT's `PJRT_NamedValue`).
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    /// A string.
    Str(String),
    /// A 64-bit integer.
    Int(i64),
    /// A list of 64-bit integers.
    IntList(Vec<i64>),
    /// A 32-bit float.
    Float(f32),
    /// A boolean.
    Bool(bool),
}

/// The most virtual devices a CPU client is asked for (`cpu_device_count`).
pub const MAX_CPU_DEVICES: i64 = 4096;

/// Options passed to `PJRT_Client_Create`. Each platform takes its own names: the CPU plugin
/// `cpu_device_count`, the CUDA plugin those of [`CudaOptions`]; a plugin refuses names it does
/// not know, so build them with [`ClientOptions::cpu`], [`ClientOptions::cuda`] or
/// [`ClientOptions::for_platform`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// The named options, in order.
    pub named: Vec<(String, OptionValue)>,
}

/// Options of XLA's CUDA client, named as the plugin expects them. `None` leaves the plugin's
/// default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CudaOptions {
    /// The GPUs this client uses (`visible_devices`), by CUDA ordinal.
    pub visible_devices: Option<Vec<i64>>,
    /// This process's index among the processes of a multi-process job (`node_id`).
    pub node_id: Option<i64>,
    /// The number of processes of the job (`num_nodes`).
    pub num_nodes: Option<i64>,
    /// The fraction of GPU memory the allocator may take (`memory_fraction`, 0 to 1).
    pub memory_fraction: Option<f32>,
    /// Whether the allocator takes its memory up front (`preallocate`).
    pub preallocate: Option<bool>,
    /// `default`, `platform`, `bfc` or `cuda_async` (`allocator`).
    pub allocator: Option<String>,
}

/// The environment variable that sets [`CudaOptions::memory_fraction`] of the CUDA clients
/// [`Client::open`] creates: a number in (0, 1], e.g. `0.4` so that two processes (two ranks of an
/// `mpirun` job) share one GPU. Unset: the plugin's default (it takes most of the GPU).
pub const CUDA_MEMORY_FRACTION_ENV: &str = "TESSERA_CUDA_MEMORY_FRACTION";

impl CudaOptions {
    /// The options the environment sets ([`CUDA_MEMORY_FRACTION_ENV`]); the rest are left to
    /// the plugin. A value that is not a fraction is a [`PjrtError::BadEnvironment`].
    pub fn from_env() -> Result<CudaOptions> {
        let memory_fraction = std::env::var_os(CUDA_MEMORY_FRACTION_ENV)
            .map(|value| Self::memory_fraction_from(&value.to_string_lossy()))
            .transpose()?;
        Ok(CudaOptions {
            memory_fraction,
            ..CudaOptions::default()
        })
    }

    /// Reads a memory fraction as [`CUDA_MEMORY_FRACTION_ENV`] gives it: a number greater than
    /// 0 and at most 1.
    pub fn memory_fraction_from(text: &str) -> Result<f32> {
        let bad = |reason: &str| PjrtError::BadEnvironment {
            variable: CUDA_MEMORY_FRACTION_ENV.into(),
            value: text.into(),
            reason: reason.into(),
        };
        let fraction: f32 = text
            .trim()
            .parse()
            .map_err(|_| bad("not a number; give the fraction of GPU memory, e.g. 0.4"))?;
        if fraction > 0.0 && fraction <= 1.0 {
            Ok(fraction)
        } else {
            Err(bad(
                "the fraction of GPU memory must be greater than 0 and at most 1, e.g. 0.4",
            ))
        }
    }
}

impl ClientOptions {
    /// Options for the CPU plugin with `count` virtual devices.
    pub fn cpu(count: i64) -> Self {
        Self::default().with("cpu_device_count", OptionValue::Int(count))
    }

    /// Options for the CUDA plugin.
    pub fn cuda(options: &CudaOptions) -> Self {
        let mut out = Self::default();
        if let Some(devices) = &options.visible_devices {
            out = out.with("visible_devices", OptionValue::IntList(devices.clone()));
        }
        if let Some(id) = options.node_id {
            out = out.with("node_id", OptionValue::Int(id));
        }
        if let Some(n) = options.num_nodes {
            out = out.with("num_nodes", OptionValue::Int(n));
        }
        if let Some(fraction) = options.memory_fraction {
            out = out.with("memory_fraction", OptionValue::Float(fraction));
        }
        if let Some(preallocate) = options.preallocate {
            out = out.with("preallocate", OptionValue::Bool(preallocate));
        }
        if let Some(allocator) = &options.allocator {
            out = out.with("allocator", OptionValue::Str(allocator.clone()));
        }
        out
    }

    /// The options of `platform` for a client of `devices` devices: the CPU plugin creates that
    /// many virtual devices; GPU plugins use the GPUs there are (`devices` is then checked by the
    /// caller against what the client reports); an unknown platform gets no options.
    pub fn for_platform(platform: Option<PluginPlatform>, devices: i64) -> Self {
        match platform {
            Some(PluginPlatform::Cpu) => Self::cpu(devices),
            Some(PluginPlatform::Cuda) => Self::cuda(&CudaOptions::default()),
            None => Self::default(),
        }
    }

    /// Refuses a `cpu_device_count` below 1 or above [`MAX_CPU_DEVICES`]: the CPU plugin
    /// makes an empty client of 0 and grows by about 170 KB and 0.5 ms per device, so a count
    /// of a million exhausts memory and crashes after half a minute.
    pub fn check_cpu_device_count(&self) -> Result<()> {
        for (name, value) in &self.named {
            if let (true, OptionValue::Int(n)) = (name == "cpu_device_count", value)
                && !(1..=MAX_CPU_DEVICES).contains(n)
            {
                return Err(PjrtError::DeviceCount {
                    requested: *n,
                    max: MAX_CPU_DEVICES,
                });
            }
        }
        Ok(())
    }

    /// Adds one option.
    pub fn with(mut self, name: &str, value: OptionValue) -> Self {
        self.named.push((name.to_owned(), value));
        self
    }
}

/// Turns a failed `PJRT_Client_Create` into the error that says what to fix: an option the
/// plugin does not take, or a GPU plugin on a machine without a GPU or driver.
fn explain_create_error(err: PjrtError, plugin: &Plugin, options: &ClientOptions) -> PjrtError {
    let PjrtError::Call { code, message, .. } = &err else {
        return err;
    };
    let rejected = options
        .named
        .iter()
        .find(|(name, _)| message.contains(name.as_str()) && message.contains("option"));
    if let Some((name, _)) = rejected {
        return PjrtError::OptionRejected {
            plugin: plugin.path().to_path_buf(),
            platform: plugin_platform_label(plugin),
            option: name.clone(),
            message: message.clone(),
        };
    }
    let lower = message.to_lowercase();
    let no_gpu = [
        "no visible gpu",
        "no visible device",
        "cuda_error_no_device",
        "cuinit",
        "cuda driver",
    ]
    .iter()
    .any(|needle| lower.contains(needle))
        || (*code == ErrorCode::Internal && lower.contains("cuda"));
    if no_gpu {
        return PjrtError::NoGpu {
            plugin: plugin.path().to_path_buf(),
            message: format!("no GPU or no CUDA driver; the plugin reports \"{message}\""),
        };
    }
    err
}

fn plugin_platform_label(plugin: &Plugin) -> String {
    crate::discovery::platform_from_file_name(plugin.path())
        .map_or("unknown", PluginPlatform::label)
        .into()
}

/// Keeps the C strings and arrays that `PJRT_NamedValue`s point into alive during a call.
struct RawOptions {
    _names: Vec<CString>,
    _strings: Vec<CString>,
    values: Vec<sys::PJRT_NamedValue>,
}

fn raw_options(options: &ClientOptions) -> Result<RawOptions> {
    let mut names = Vec::new();
    let mut strings = Vec::new();
    let mut values = Vec::new();
    for (name, value) in &options.named {
        let invalid = |reason: &str| PjrtError::InvalidOption {
            name: name.clone(),
            reason: reason.into(),
        };
        let c_name =
            CString::new(name.as_str()).map_err(|_| invalid("the name contains a NUL byte"))?;
        let mut raw = args!(PJRT_NamedValue {
            name: c_name.as_ptr(),
            name_size: name.len(),
            value_size: 1
        });
        match value {
            OptionValue::Str(text) => {
                let c_text = CString::new(text.as_str())
                    .map_err(|_| invalid("the value contains a NUL byte"))?;
                raw.type_ = sys::PJRT_NamedValue_Type::PJRT_NamedValue_kString;
                raw.__bindgen_anon_1.string_value = c_text.as_ptr();
                raw.value_size = text.len();
                strings.push(c_text);
            }
            OptionValue::Int(v) => {
                raw.type_ = sys::PJRT_NamedValue_Type::PJRT_NamedValue_kInt64;
                raw.__bindgen_anon_1.int64_value = *v;
            }
            OptionValue::IntList(list) => {
                raw.type_ = sys::PJRT_NamedValue_Type::PJRT_NamedValue_kInt64List;
                raw.__bindgen_anon_1.int64_array_value = list.as_ptr();
                raw.value_size = list.len();
            }
            OptionValue::Float(v) => {
                raw.type_ = sys::PJRT_NamedValue_Type::PJRT_NamedValue_kFloat;
                raw.__bindgen_anon_1.float_value = *v;
            }
            OptionValue::Bool(v) => {
                raw.type_ = sys::PJRT_NamedValue_Type::PJRT_NamedValue_kBool;
                raw.__bindgen_anon_1.bool_value = *v;
            }
        }
        names.push(c_name);
        values.push(raw);
    }
    Ok(RawOptions {
        _names: names,
        _strings: strings,
        values,
    })
}

/// A PJRT client: one per plugin and process, owning the devices it reports. Cloning is cheap
/// (shared ownership); buffers and executables keep their client alive.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    plugin: &'static Plugin,
    raw: *mut sys::PJRT_Client,
    /// The create options, as text (part of the persistent compile cache's key).
    create_options: String,
    /// The key-value store the plugin was given, kept alive as long as the client.
    _store: Option<Arc<crate::distributed::KvBridge>>,
}

// SAFETY: PJRT clients are thread-safe; all calls go through the plugin's thread-safe API.
unsafe impl Send for ClientInner {}
// SAFETY: as above.
unsafe impl Sync for ClientInner {}

impl Client {
    /// Creates a client of `plugin` with `options`. An option the plugin refuses is a
    /// [`PjrtError::OptionRejected`] naming it and the plugin.
    pub fn new(plugin: &'static Plugin, options: &ClientOptions) -> Result<Client> {
        Client::create(plugin, options, None)
    }

    /// [`Client::new`] handing the plugin a key-value store through `PJRT_Client_Create`'s
    /// `kv_*` callbacks (see [`Client::open_distributed`]).
    pub(crate) fn new_with_store(
        plugin: &'static Plugin,
        options: &ClientOptions,
        store: &Arc<crate::distributed::KvBridge>,
    ) -> Result<Client> {
        Client::create(plugin, options, Some(store))
    }

    fn create(
        plugin: &'static Plugin,
        options: &ClientOptions,
        store: Option<&Arc<crate::distributed::KvBridge>>,
    ) -> Result<Client> {
        let raw_opts = raw_options(options)?;
        let mut args = args!(PJRT_Client_Create_Args {
            create_options: raw_opts.values.as_ptr(),
            num_options: raw_opts.values.len(),
        });
        if let Some(store) = store {
            store.install(&mut args);
        }
        crate::quiet_stderr::without_client_chatter(|| {
            api_call!(plugin, PJRT_Client_Create, &mut args)
        })
        .map_err(|err| explain_create_error(err, plugin, options))?;
        Ok(Client {
            inner: Arc::new(ClientInner {
                plugin,
                raw: args.client,
                create_options: format!("{:?}", options.named),
                _store: store.cloned(),
            }),
        })
    }

    /// Creates a CPU client with `count` devices from the discovered plugin (see
    /// [`crate::find_plugin`]).
    pub fn cpu(count: i64) -> Result<Client> {
        Client::new(Plugin::discover(None)?, &ClientOptions::cpu(count))
    }

    /// Creates a client of the plugin `request` names (a known name such as `cpu` or `cuda`, or
    /// a path; `None`: `$TESSERA_PJRT_PLUGIN`, else the default CPU plugin) with the options of
    /// its platform for `devices` devices (see [`ClientOptions::for_platform`]); a CUDA client
    /// also takes the options the environment sets ([`CudaOptions::from_env`]).
    pub fn open(request: Option<&str>, devices: i64) -> Result<Client> {
        Client::open_choice(&resolve_plugin(request)?, devices)
    }

    /// [`Client::open`] for an already resolved plugin.
    pub fn open_choice(choice: &PluginChoice, devices: i64) -> Result<Client> {
        let options = match choice.platform {
            Some(PluginPlatform::Cuda) => ClientOptions::cuda(&CudaOptions::from_env()?),
            other => ClientOptions::for_platform(other, devices),
        };
        Client::open_with(choice, &options)
    }

    /// Creates a client of a resolved plugin with `options`, first checking them against the
    /// options of the plugin's platform (where it is known): a name of another platform is a
    /// [`PjrtError::OptionRejected`], since some plugins ignore what they do not know.
    pub fn open_with(choice: &PluginChoice, options: &ClientOptions) -> Result<Client> {
        options.check_cpu_device_count()?;
        if let Some(platform) = choice.platform {
            let known = platform.option_names();
            if let Some((name, _)) = options
                .named
                .iter()
                .find(|(n, _)| !known.contains(&n.as_str()))
            {
                return Err(PjrtError::OptionRejected {
                    plugin: choice.path.clone(),
                    platform: platform.label().into(),
                    option: name.clone(),
                    message: format!("it is not an option of this platform, which takes {known:?}"),
                });
            }
        }
        if choice.platform == Some(PluginPlatform::Cuda) {
            crate::cuda::prepare(&choice.path);
        }
        Client::new(Plugin::load(&choice.path)?, options)
    }

    /// The plugin this client came from.
    pub fn plugin(&self) -> &'static Plugin {
        self.inner.plugin
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Client {
        self.inner.raw
    }

    /// The options the client was created with, as text.
    pub fn create_options_text(&self) -> &str {
        &self.inner.create_options
    }

    /// The platform's name, e.g. `cpu` or `cuda`.
    pub fn platform_name(&self) -> Result<String> {
        let mut args = args!(PJRT_Client_PlatformName_Args { client: self.raw() });
        api_call!(self.plugin(), PJRT_Client_PlatformName, &mut args)?;
        // SAFETY: the name is owned by the client, which outlives this call.
        Ok(unsafe { string_from_raw(args.platform_name, args.platform_name_size) })
    }

    /// The platform's version string.
    pub fn platform_version(&self) -> Result<String> {
        let mut args = args!(PJRT_Client_PlatformVersion_Args { client: self.raw() });
        api_call!(self.plugin(), PJRT_Client_PlatformVersion, &mut args)?;
        // SAFETY: the version is owned by the client, which outlives this call.
        Ok(unsafe { string_from_raw(args.platform_version, args.platform_version_size) })
    }

    /// Every device the client knows, addressable or not.
    pub fn devices(&self) -> Result<Vec<Device<'_>>> {
        let mut args = args!(PJRT_Client_Devices_Args { client: self.raw() });
        api_call!(self.plugin(), PJRT_Client_Devices, &mut args)?;
        Ok(self.wrap_devices(args.devices, args.num_devices))
    }

    /// The devices this process can issue work to.
    pub fn addressable_devices(&self) -> Result<Vec<Device<'_>>> {
        let mut args = args!(PJRT_Client_AddressableDevices_Args { client: self.raw() });
        api_call!(self.plugin(), PJRT_Client_AddressableDevices, &mut args)?;
        Ok(self.wrap_devices(args.addressable_devices, args.num_addressable_devices))
    }

    fn wrap_devices(&self, ptr: *const *mut sys::PJRT_Device, len: usize) -> Vec<Device<'_>> {
        if ptr.is_null() {
            return Vec::new();
        }
        // SAFETY: the plugin returns `len` device pointers owned by the client.
        let raw = unsafe { std::slice::from_raw_parts(ptr, len) };
        raw.iter()
            .map(|&device| Device::new(self, device))
            .collect()
    }
}

impl Drop for ClientInner {
    fn drop(&mut self) {
        let mut args = args!(PJRT_Client_Destroy_Args { client: self.raw });
        // A failure to destroy cannot be reported from `drop`; the plugin logs it.
        let _ = (|| -> Result<()> { api_call!(self.plugin, PJRT_Client_Destroy, &mut args) })();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("plugin", &self.inner.plugin)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// The addressable device with global id `id`.
    pub fn device(&self, id: i32) -> Result<Device<'_>> {
        for device in self.addressable_devices()? {
            if device.id()? == id {
                return Ok(device);
            }
        }
        Err(PjrtError::UnknownDevice {
            id,
            available: self.addressable_ids()?,
        })
    }

    fn addressable_ids(&self) -> Result<Vec<i32>> {
        self.addressable_devices()?.iter().map(|d| d.id()).collect()
    }
}
