//! PJRT clients: created from a plugin with named options, they own the devices.

use std::ffi::CString;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{PjrtError, Result};
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

/// Options passed to `PJRT_Client_Create`, e.g. `cpu_device_count = 8` for the CPU plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClientOptions {
    /// The named options, in order.
    pub named: Vec<(String, OptionValue)>,
}

impl ClientOptions {
    /// Options for the CPU plugin with `count` virtual devices.
    pub fn cpu(count: i64) -> Self {
        Self::default().with("cpu_device_count", OptionValue::Int(count))
    }

    /// Adds one option.
    pub fn with(mut self, name: &str, value: OptionValue) -> Self {
        self.named.push((name.to_owned(), value));
        self
    }
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
}

// SAFETY: PJRT clients are thread-safe; all calls go through the plugin's thread-safe API.
unsafe impl Send for ClientInner {}
// SAFETY: as above.
unsafe impl Sync for ClientInner {}

impl Client {
    /// Creates a client of `plugin` with `options`.
    pub fn new(plugin: &'static Plugin, options: &ClientOptions) -> Result<Client> {
        let raw_opts = raw_options(options)?;
        let mut args = args!(PJRT_Client_Create_Args {
            create_options: raw_opts.values.as_ptr(),
            num_options: raw_opts.values.len(),
        });
        api_call!(plugin, PJRT_Client_Create, &mut args)?;
        Ok(Client {
            inner: Arc::new(ClientInner {
                plugin,
                raw: args.client,
            }),
        })
    }

    /// Creates a CPU client with `count` devices from the discovered plugin (see
    /// [`crate::find_plugin`]).
    pub fn cpu(count: i64) -> Result<Client> {
        Client::new(Plugin::discover(None)?, &ClientOptions::cpu(count))
    }

    /// The plugin this client came from.
    pub fn plugin(&self) -> &'static Plugin {
        self.inner.plugin
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Client {
        self.inner.raw
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
