//! Device buffers: host → device, device → host, and their metadata.

use crate::client::{Client, args};
use crate::device::Device;
use crate::element_type::ElementType;
use crate::error::{PjrtError, Result};
use crate::event;
use crate::host::{HostArray, element_count};
use crate::plugin::api_call;
use crate::sys;

/// An array in one device's memory, destroyed on drop.
pub struct Buffer {
    client: Client,
    raw: *mut sys::PJRT_Buffer,
    /// Host memory the buffer aliases (a zero-copy buffer), freed after the buffer.
    _aliased: Option<Aliased>,
}

/// Host memory lent to the plugin: kept until the plugin says it is done with it.
struct Aliased {
    done: Option<crate::event::Event>,
    _bytes: crate::AlignedBytes,
}

impl Drop for Aliased {
    fn drop(&mut self) {
        // The buffer was destroyed first (`Buffer::drop` runs before its fields drop); wait
        // until the plugin no longer reads the memory, then free it.
        if let Some(done) = self.done.take() {
            let _ = done.wait();
        }
    }
}

// SAFETY: PJRT buffers may be used from any thread.
unsafe impl Send for Buffer {}
// SAFETY: as above; PJRT synchronises its own accesses.
unsafe impl Sync for Buffer {}

/// Host arrays up to this size are handed to the plugin to copy during the upload call
/// (`kImmutableOnlyDuringCall`, as JAX uploads small arrays); larger ones are read in place.
const STAGED_UPLOAD_BYTES: usize = 1 << 20;

impl Buffer {
    /// Copies `host` to `device`, waiting until the host data is no longer needed.
    pub fn from_host(client: &Client, host: &HostArray, device: &Device<'_>) -> Result<Buffer> {
        Buffer::upload(client, host, device, std::ptr::null_mut())
    }

    /// Copies `host` to `device`, into `memory` (null: the device's default memory), waiting
    /// until the host data is no longer needed.
    fn upload(
        client: &Client,
        host: &HostArray,
        device: &Device<'_>,
        memory: *mut sys::PJRT_Memory,
    ) -> Result<Buffer> {
        let (ty, dims) = crate::host::device_layout(host);
        // A small array is copied by the plugin during the call (a GPU plugin stages it and
        // returns at once); a large one is read where it lies until the transfer is done,
        // which this call waits for, rather than copied on the host first.
        let semantics = if host.bytes().len() <= STAGED_UPLOAD_BYTES {
            sys::PJRT_HostBufferSemantics::PJRT_HostBufferSemantics_kImmutableOnlyDuringCall
        } else {
            sys::PJRT_HostBufferSemantics::PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes
        };
        let mut args = args!(PJRT_Client_BufferFromHostBuffer_Args {
            client: client.raw(),
            data: host.bytes().as_ptr().cast(),
            type_: ty.to_raw(),
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            host_buffer_semantics: semantics,
            device: device.raw(),
            memory: memory,
        });
        api_call!(client.plugin(), PJRT_Client_BufferFromHostBuffer, &mut args)?;
        let buffer = Buffer {
            client: client.clone(),
            raw: args.buffer,
            _aliased: None,
        };
        event::wait(client.plugin(), args.done_with_host_buffer)?;
        Ok(buffer)
    }

    /// A buffer of element type `ty` and dimensions `dims` on device `device_id` made from
    /// `bytes` without a copy where the plugin can (the CPU plugin aliases aligned host memory):
    /// the buffer owns `bytes` until the plugin is done with them.
    pub fn from_aligned_bytes(
        client: &Client,
        ty: ElementType,
        dims: &[i64],
        bytes: crate::AlignedBytes,
        device_id: i32,
    ) -> Result<Buffer> {
        let want = element_count(dims) * ty.size_in_bytes();
        if bytes.len() != want {
            return Err(PjrtError::HostSize {
                ty,
                dims: dims.to_vec(),
                expected: want,
                actual: bytes.len(),
            });
        }
        let device = client.device(device_id)?;
        let mut args = args!(PJRT_Client_BufferFromHostBuffer_Args {
            client: client.raw(),
            data: bytes.as_ptr().cast(),
            type_: ty.to_raw(),
            dims: dims.as_ptr(),
            num_dims: dims.len(),
            host_buffer_semantics:
                sys::PJRT_HostBufferSemantics::PJRT_HostBufferSemantics_kImmutableZeroCopy,
            device: device.raw(),
        });
        api_call!(client.plugin(), PJRT_Client_BufferFromHostBuffer, &mut args)?;
        Ok(Buffer {
            client: client.clone(),
            raw: args.buffer,
            _aliased: Some(Aliased {
                done: crate::event::Event::new(client.plugin(), args.done_with_host_buffer),
                _bytes: bytes,
            }),
        })
    }

    /// Reads a CPU buffer's own memory in place (no copy), once its contents are computed. On
    /// other platforms device memory is not host memory: an error says to use [`Buffer::to_host`].
    pub fn host_memory(&self) -> Result<&[u8]> {
        let platform = self.client.platform_name()?;
        if !platform.eq_ignore_ascii_case("cpu") {
            return Err(PjrtError::InvalidProgram(format!(
                "a {platform} buffer's memory is not host memory; copy it with to_host"
            )));
        }
        self.block_until_ready()?;
        let (ty, dims) = (self.element_type()?, self.dims()?);
        let len = element_count(&dims) * ty.size_in_bytes();
        let on_device = usize::try_from(self.on_device_size()?).unwrap_or(usize::MAX);
        if on_device != len {
            return Err(PjrtError::HostSize {
                ty,
                dims,
                expected: len,
                actual: on_device,
            });
        }
        let mut args = args!(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args { buffer: self.raw });
        api_call!(
            self.client.plugin(),
            PJRT_Buffer_OpaqueDeviceMemoryDataPointer,
            &mut args
        )?;
        if args.device_memory_ptr.is_null() {
            return Ok(&[]);
        }
        // SAFETY: a ready CPU buffer's memory holds `len` dense bytes for as long as the buffer
        // lives, and nothing writes to a buffer once it is computed (donated buffers are taken
        // by value, so no `&self` outlives a donation).
        Ok(unsafe { std::slice::from_raw_parts(args.device_memory_ptr.cast::<u8>(), len) })
    }

    /// Copies `host` to the addressable device with id `device_id`.
    pub fn from_host_to(client: &Client, host: &HostArray, device_id: i32) -> Result<Buffer> {
        Buffer::from_host(client, host, &client.device(device_id)?)
    }

    /// Copies `host` to the memory of kind `memory_kind` (`device`, `unpinned_host`, ...) of
    /// device `device_id`; a kind the device lacks is [`PjrtError::UnknownMemoryKind`] naming
    /// the kinds it has.
    pub fn from_host_in(
        client: &Client,
        host: &HostArray,
        device_id: i32,
        memory_kind: &str,
    ) -> Result<Buffer> {
        let device = client.device(device_id)?;
        let memory = device.memory_of_kind(memory_kind)?;
        Buffer::upload(client, host, &device, memory)
    }

    /// The kind of the memory holding the buffer (`device`, `unpinned_host`, ...).
    pub fn memory_kind(&self) -> Result<String> {
        let mut args = args!(PJRT_Buffer_Memory_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_Memory, &mut args)?;
        crate::device::memory_kind(&self.client, args.memory)
    }

    pub(crate) fn from_raw(client: &Client, raw: *mut sys::PJRT_Buffer) -> Buffer {
        Buffer {
            client: client.clone(),
            raw,
            _aliased: None,
        }
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Buffer {
        self.raw
    }

    /// Whether the buffer was deleted, or donated to an execution that reused its memory.
    pub fn is_deleted(&self) -> Result<bool> {
        let mut args = args!(PJRT_Buffer_IsDeleted_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_IsDeleted, &mut args)?;
        Ok(args.is_deleted)
    }

    /// The element type.
    pub fn element_type(&self) -> Result<ElementType> {
        let mut args = args!(PJRT_Buffer_ElementType_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_ElementType, &mut args)?;
        ElementType::from_raw(args.type_).ok_or(PjrtError::UnsupportedElementType(args.type_.0))
    }

    /// The dimensions.
    pub fn dims(&self) -> Result<Vec<i64>> {
        let mut args = args!(PJRT_Buffer_Dimensions_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_Dimensions, &mut args)?;
        if args.dims.is_null() || args.num_dims == 0 {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returns `num_dims` dimensions owned by the buffer.
        Ok(unsafe { std::slice::from_raw_parts(args.dims, args.num_dims) }.to_vec())
    }

    /// The id of the device holding the buffer.
    pub fn device_id(&self) -> Result<i32> {
        let mut args = args!(PJRT_Buffer_Device_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_Device, &mut args)?;
        Device::new(&self.client, args.device).id()
    }

    /// The bytes the buffer occupies on its device (PJRT's own count, padding included).
    pub fn on_device_size(&self) -> Result<u64> {
        let mut args = args!(PJRT_Buffer_OnDeviceSizeInBytes_Args { buffer: self.raw });
        api_call!(
            self.client.plugin(),
            PJRT_Buffer_OnDeviceSizeInBytes,
            &mut args
        )?;
        Ok(args.on_device_size_in_bytes as u64)
    }

    /// The client the buffer belongs to.
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The event that fires once the buffer's contents are computed (`None`: already are).
    pub(crate) fn ready_event(&self) -> Result<Option<event::Event>> {
        let mut args = args!(PJRT_Buffer_ReadyEvent_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_ReadyEvent, &mut args)?;
        Ok(event::Event::new(self.client.plugin(), args.event))
    }

    /// Blocks until the buffer's contents are computed.
    pub fn block_until_ready(&self) -> Result<()> {
        let mut args = args!(PJRT_Buffer_ReadyEvent_Args { buffer: self.raw });
        api_call!(self.client.plugin(), PJRT_Buffer_ReadyEvent, &mut args)?;
        event::wait(self.client.plugin(), args.event)
    }

    /// Copies the buffer to another device (on the same client), without going through the host.
    pub fn copy_to_device(&self, device: &Device<'_>) -> Result<Buffer> {
        let mut args = args!(PJRT_Buffer_CopyToDevice_Args {
            buffer: self.raw,
            dst_device: device.raw()
        });
        api_call!(self.client.plugin(), PJRT_Buffer_CopyToDevice, &mut args)?;
        Ok(Buffer {
            client: self.client.clone(),
            raw: args.dst_buffer,
            _aliased: None,
        })
    }

    /// Copies the buffer into the memory of kind `kind` of device `device_id`, without going
    /// through the host (`PJRT_Buffer_CopyToMemory`); a kind the device lacks is
    /// [`PjrtError::UnknownMemoryKind`].
    pub fn copy_to_memory(&self, device_id: i32, kind: &str) -> Result<Buffer> {
        let device = self.client.device(device_id)?;
        let memory = device.memory_of_kind(kind)?;
        let mut args = args!(PJRT_Buffer_CopyToMemory_Args {
            buffer: self.raw,
            dst_memory: memory
        });
        api_call!(self.client.plugin(), PJRT_Buffer_CopyToMemory, &mut args)?;
        Ok(Buffer {
            client: self.client.clone(),
            raw: args.dst_buffer,
            _aliased: None,
        })
    }

    /// Copies the buffer to the device with id `device_id`.
    pub fn copy_to(&self, device_id: i32) -> Result<Buffer> {
        self.copy_to_device(&self.client.device(device_id)?)
    }

    /// Copies the buffer to host memory (blocking).
    pub fn to_host(&self) -> Result<HostArray> {
        self.to_host_started()?.wait()
    }

    /// Starts copying the buffer to the host and returns at once: the copy runs once the
    /// buffer is computed (a program's result can be asked for as soon as the program is
    /// launched, so that its copy follows the program without a round trip).
    pub fn to_host_started(&self) -> Result<HostCopy> {
        let ty = self.element_type()?;
        let dims = self.dims()?;
        let len = element_count(&dims) * ty.size_in_bytes();
        crate::host_memory::ensure_available(len as u64, || {
            format!("copying a {ty:?}{dims:?} buffer to the host")
        })?;
        let mut bytes = vec![0u8; len];
        let mut args = args!(PJRT_Buffer_ToHostBuffer_Args {
            src: self.raw,
            dst: bytes.as_mut_ptr().cast(),
            dst_size: bytes.len(),
        });
        api_call!(self.client.plugin(), PJRT_Buffer_ToHostBuffer, &mut args)?;
        Ok(HostCopy {
            event: event::Event::new(self.client.plugin(), args.event),
            bytes,
            ty,
            dims,
        })
    }
}

/// A copy of a buffer to the host under way ([`Buffer::to_host_started`]). It owns the host
/// memory the plugin writes into: dropping it unfinished waits for the copy first.
pub struct HostCopy {
    event: Option<event::Event>,
    bytes: Vec<u8>,
    ty: ElementType,
    dims: Vec<i64>,
}

impl HostCopy {
    /// Waits for the copy and returns the values.
    pub fn wait(mut self) -> Result<HostArray> {
        if let Some(event) = self.event.take() {
            event.wait()?;
        }
        let bytes = std::mem::take(&mut self.bytes);
        Ok(HostArray::from_bytes(self.ty.dtype(), &self.dims, bytes)?)
    }
}

impl Drop for HostCopy {
    fn drop(&mut self) {
        // The plugin may still be writing into `bytes`.
        if let Some(event) = self.event.take() {
            let _ = event.wait();
        }
    }
}

// SAFETY: the copy's event and host memory may be waited for and freed from any thread.
unsafe impl Send for HostCopy {}

impl Drop for Buffer {
    fn drop(&mut self) {
        let mut args = args!(PJRT_Buffer_Destroy_Args { buffer: self.raw });
        let _ =
            (|| -> Result<()> { api_call!(self.client.plugin(), PJRT_Buffer_Destroy, &mut args) })(
            );
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Buffer({:?}{:?} on {:?})",
            self.element_type().ok(),
            self.dims().ok(),
            self.device_id().ok()
        )
    }
}
