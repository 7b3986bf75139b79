//! Devices of a client and their descriptions.

use crate::client::{Client, args};
use crate::error::{PjrtError, Result};
use crate::plugin::api_call;
use crate::sys;
use crate::util::string_from_raw;

/// A device owned by a [`Client`].
#[derive(Clone, Copy)]
pub struct Device<'c> {
    client: &'c Client,
    raw: *mut sys::PJRT_Device,
}

/// A device's description, read once.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// The global device id.
    pub id: i32,
    /// The device kind, e.g. `cpu`.
    pub kind: String,
    /// The process that owns the device.
    pub process_index: i32,
    /// A short human-readable description.
    pub description: String,
}

/// One memory space of a device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MemoryInfo {
    /// The memory's id.
    pub id: i32,
    /// Its kind, e.g. `device` or `pinned_host` (the memory kinds of `NamedSharding`).
    pub kind: String,
    /// Whether buffers go there by default.
    pub is_default: bool,
}

impl<'c> Device<'c> {
    pub(crate) fn new(client: &'c Client, raw: *mut sys::PJRT_Device) -> Self {
        Device { client, raw }
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Device {
        self.raw
    }

    fn description(&self) -> Result<*mut sys::PJRT_DeviceDescription> {
        let mut args = args!(PJRT_Device_GetDescription_Args { device: self.raw });
        api_call!(self.client.plugin(), PJRT_Device_GetDescription, &mut args)?;
        Ok(args.device_description)
    }

    /// The device's global id.
    pub fn id(&self) -> Result<i32> {
        let mut args = args!(PJRT_DeviceDescription_Id_Args {
            device_description: self.description()?
        });
        api_call!(self.client.plugin(), PJRT_DeviceDescription_Id, &mut args)?;
        Ok(args.id)
    }

    /// The device's kind, e.g. `cpu`.
    pub fn kind(&self) -> Result<String> {
        let mut args = args!(PJRT_DeviceDescription_Kind_Args {
            device_description: self.description()?
        });
        api_call!(self.client.plugin(), PJRT_DeviceDescription_Kind, &mut args)?;
        // SAFETY: the string lives as long as the device.
        Ok(unsafe { string_from_raw(args.device_kind, args.device_kind_size) })
    }

    /// The index of the process owning the device.
    pub fn process_index(&self) -> Result<i32> {
        let mut args = args!(PJRT_DeviceDescription_ProcessIndex_Args {
            device_description: self.description()?
        });
        api_call!(
            self.client.plugin(),
            PJRT_DeviceDescription_ProcessIndex,
            &mut args
        )?;
        Ok(args.process_index)
    }

    /// A short human-readable description, e.g. `CpuDevice(id=0)`.
    pub fn to_display_string(&self) -> Result<String> {
        let mut args = args!(PJRT_DeviceDescription_ToString_Args {
            device_description: self.description()?
        });
        api_call!(
            self.client.plugin(),
            PJRT_DeviceDescription_ToString,
            &mut args
        )?;
        // SAFETY: the string lives as long as the device.
        Ok(unsafe { string_from_raw(args.to_string, args.to_string_size) })
    }

    /// The memory limit of the device in bytes minus its peak use, where the plugin reports
    /// both; `None` where it does not (the CPU plugin reports no limit).
    pub fn available_memory(&self) -> Option<i64> {
        let mut args = args!(PJRT_Device_MemoryStats_Args { device: self.raw });
        (|| -> Result<()> { api_call!(self.client.plugin(), PJRT_Device_MemoryStats, &mut args) })(
        )
        .ok()?;
        (args.bytes_limit_is_set && args.peak_bytes_in_use_is_set)
            .then(|| args.bytes_limit - args.peak_bytes_in_use)
    }

    /// The memories this device can address (e.g. `device`, `pinned_host`), default first.
    pub fn memories(&self) -> Result<Vec<MemoryInfo>> {
        Ok(self.raw_memories()?.into_iter().map(|(_, m)| m).collect())
    }

    /// The memory of kind `kind` (a `NamedSharding`'s memory kind), or
    /// [`PjrtError::UnknownMemoryKind`] naming the kinds this device has.
    pub(crate) fn memory_of_kind(&self, kind: &str) -> Result<*mut sys::PJRT_Memory> {
        let memories = self.raw_memories()?;
        memories
            .iter()
            .find(|(_, m)| m.kind == kind)
            .map(|(raw, _)| *raw)
            .ok_or_else(|| PjrtError::UnknownMemoryKind {
                kind: kind.to_string(),
                device: self.id().unwrap_or(-1),
                available: memories.into_iter().map(|(_, m)| m.kind).collect(),
            })
    }

    /// Each addressable memory with its description, default first.
    fn raw_memories(&self) -> Result<Vec<(*mut sys::PJRT_Memory, MemoryInfo)>> {
        let mut default = args!(PJRT_Device_DefaultMemory_Args { device: self.raw });
        api_call!(
            self.client.plugin(),
            PJRT_Device_DefaultMemory,
            &mut default
        )?;
        let mut args = args!(PJRT_Device_AddressableMemories_Args { device: self.raw });
        api_call!(
            self.client.plugin(),
            PJRT_Device_AddressableMemories,
            &mut args
        )?;
        if args.memories.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returns `num_memories` memory pointers owned by the client.
        let raw = unsafe { std::slice::from_raw_parts(args.memories, args.num_memories) };
        let mut out = raw
            .iter()
            .map(|&memory| Ok((memory, self.memory_info(memory, memory == default.memory)?)))
            .collect::<Result<Vec<_>>>()?;
        out.sort_by_key(|(_, m)| !m.is_default);
        Ok(out)
    }

    fn memory_info(&self, memory: *mut sys::PJRT_Memory, is_default: bool) -> Result<MemoryInfo> {
        let mut id = args!(PJRT_Memory_Id_Args { memory: memory });
        api_call!(self.client.plugin(), PJRT_Memory_Id, &mut id)?;
        Ok(MemoryInfo {
            id: id.id,
            kind: memory_kind(self.client, memory)?,
            is_default,
        })
    }

    /// All of the above at once.
    pub fn info(&self) -> Result<DeviceInfo> {
        Ok(DeviceInfo {
            id: self.id()?,
            kind: self.kind()?,
            process_index: self.process_index()?,
            description: self.to_display_string()?,
        })
    }
}

impl std::fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.id() {
            Ok(id) => write!(f, "Device({id})"),
            Err(_) => write!(f, "Device(?)"),
        }
    }
}

/// The kind of a memory of `client` (`device`, `pinned_host`, ...).
pub(crate) fn memory_kind(client: &Client, memory: *mut sys::PJRT_Memory) -> Result<String> {
    let mut kind = args!(PJRT_Memory_Kind_Args { memory: memory });
    api_call!(client.plugin(), PJRT_Memory_Kind, &mut kind)?;
    // SAFETY: the kind string lives as long as the client.
    Ok(unsafe { string_from_raw(kind.kind, kind.kind_size) })
}
