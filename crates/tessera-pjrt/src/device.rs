//! Devices of a client and their descriptions.

use crate::client::{Client, args};
use crate::error::Result;
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
