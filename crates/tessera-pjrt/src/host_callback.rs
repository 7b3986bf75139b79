//! Host callbacks inside compiled programs: one typed XLA FFI handler, `tessera_host_callback`,
//! registered with a plugin through the PJRT FFI extension (`PJRT_Extension_Type_FFI`'s
//! `register_handler`). Tessera lowers each `pure_callback`/`io_callback`/`debug_callback` to
//! `stablehlo.custom_call @tessera_host_callback` with `api_version = 4` (typed FFI) and
//! `backend_config = {callback_id = N : i64}`; when XLA executes it, the handler reads the
//! operand buffers into host arrays, calls the closure registered under `N` in
//! [`tessera_ir::callback`] (through [`tessera_ir::prim::call_host_callback`], which checks the
//! results' count, shapes and dtypes), and copies the results into the result buffers. A failure
//! becomes an XLA FFI error, so the execution fails with the callback's message.
//!
//! The C structs are declared here by hand (the FFI extension and XLA's FFI API are not in the
//! bindgen'd `pjrt_c_api.h`), after OpenXLA's `xla/ffi/api/c_api.h` (XLA FFI API 0.1, with
//! call-frame extensions and the metadata handshake) and `pjrt_c_api_ffi_extension.h`
//! (`PJRT_API_FFI_EXTENSION_VERSION` 2 with `register_handler`; version 1 had no
//! `type_id_register`, told apart by the extension's `struct_size`).

use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

use tessera_ir::callback::CallbackId;
use tessera_ir::{Array, DType, ShapedArray};

use crate::error::{PjrtError, Result};
use crate::plugin::Plugin;
use crate::sys;

use tessera_ir::callback::ORDER_TOKEN_ATTR;
pub use tessera_ir::callback::{CALLBACK_ID_ATTR, HOST_CALLBACK_TARGET};

// ---- XLA FFI C API (xla/ffi/api/c_api.h, API 0.1) ----

#[repr(C)]
struct XlaExtensionBase {
    struct_size: usize,
    kind: i32,
    next: *mut XlaExtensionBase,
}

const XLA_EXTENSION_METADATA: i32 = 1;

#[repr(C)]
#[derive(Clone, Copy)]
struct XlaApiVersion {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    major_version: i32,
    minor_version: i32,
}

#[repr(C)]
struct XlaMetadata {
    struct_size: usize,
    api_version: XlaApiVersion,
    traits: u32,
}

#[repr(C)]
struct XlaMetadataExtension {
    base: XlaExtensionBase,
    metadata: *mut XlaMetadata,
}

#[repr(C)]
struct XlaErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    message: *const std::ffi::c_char,
    errc: i32,
}

type XlaErrorCreate = unsafe extern "C" fn(*mut XlaErrorCreateArgs) -> *mut c_void;

/// `XLA_FFI_Api`'s size in API 0.1 (up to `XLA_FFI_Stream_Get`): the layout below holds only
/// for a table at least this large (older tables had no `api_version`).
const XLA_API_SIZE: usize = 88;

/// The runtime's API table, if it has API 0.1's layout.
///
/// # Safety
/// `api` must be null or XLA's API table.
unsafe fn api_table<'a>(api: *const XlaApi) -> Option<&'a XlaApi> {
    // SAFETY: as the caller promises.
    let api = unsafe { api.as_ref() }?;
    (api.struct_size >= XLA_API_SIZE && api.api_version.struct_size == size_of::<XlaApiVersion>())
        .then_some(api)
}

/// The head of `XLA_FFI_Api` up to `XLA_FFI_Error_Create`.
#[repr(C)]
struct XlaApi {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api_version: XlaApiVersion,
    internal_api: *mut c_void,
    error_create: Option<XlaErrorCreate>,
}

#[repr(C)]
struct XlaBuffer {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    dtype: i32,
    data: *mut c_void,
    rank: i64,
    dims: *const i64,
}

#[repr(C)]
struct XlaList {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const i32,
    items: *const *mut c_void,
}

#[repr(C)]
struct XlaAttrs {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    size: i64,
    types: *const i32,
    names: *const *const XlaByteSpan,
    attrs: *const *mut c_void,
}

#[repr(C)]
struct XlaByteSpan {
    ptr: *const u8,
    len: usize,
}

#[repr(C)]
struct XlaScalar {
    dtype: i32,
    value: *const c_void,
}

const XLA_ATTR_SCALAR: i32 = 3;
const XLA_STAGE_EXECUTE: i32 = 3;
const XLA_ERROR_INTERNAL: i32 = 13;

#[repr(C)]
struct XlaCallFrame {
    struct_size: usize,
    extension_start: *mut XlaExtensionBase,
    api: *const XlaApi,
    ctx: *mut c_void,
    stage: i32,
    args: XlaList,
    rets: XlaList,
    attrs: XlaAttrs,
}

// ---- PJRT FFI extension (pjrt_c_api_ffi_extension.h) ----

#[repr(C)]
struct PjrtFfiRegisterHandlerArgs {
    struct_size: usize,
    target_name: *const std::ffi::c_char,
    target_name_size: usize,
    handler: *mut c_void,
    platform_name: *const std::ffi::c_char,
    platform_name_size: usize,
    traits: u32,
}

/// Version 1 of the arguments (`api_version` 0: untyped, 1: typed FFI).
#[repr(C)]
struct PjrtFfiRegisterHandlerArgsV1 {
    struct_size: usize,
    target_name: *const std::ffi::c_char,
    target_name_size: usize,
    api_version: i32,
    handler: *mut c_void,
    platform_name: *const std::ffi::c_char,
    platform_name_size: usize,
}

type PjrtFfiRegisterHandler =
    unsafe extern "C" fn(*mut PjrtFfiRegisterHandlerArgs) -> *mut sys::PJRT_Error;

/// XLA's element type numbers (`xla_data.proto`'s `PrimitiveType`).
fn dtype_of(code: i32) -> Option<DType> {
    Some(match code {
        1 => DType::Bool,
        2 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::I64,
        6 => DType::U8,
        7 => DType::U16,
        8 => DType::U32,
        9 => DType::U64,
        10 => DType::F16,
        11 => DType::F32,
        12 => DType::F64,
        16 => DType::BF16,
        _ => return None,
    })
}

/// XLA's `XLA_FFI_ArgType_BUFFER` / `XLA_FFI_RetType_BUFFER`.
const XLA_BUFFER: i32 = 1;

/// Buffer `i` of a list of buffers: the buffer, its element type, its dimensions and its size
/// in bytes. Anything else than a buffer of a mapped element type, a non-negative rank and an
/// addressable size is an error (never read).
///
/// # Safety
/// `list` must be XLA's argument or result list of the current call frame, `i < list.size`.
unsafe fn buffer(
    list: &XlaList,
    i: usize,
) -> std::result::Result<(&XlaBuffer, DType, Vec<i64>, usize), String> {
    if list.items.is_null() {
        return Err(format!("buffer {i}: the list of buffers is null"));
    }
    // SAFETY: `types`, when given, has `size > i` entries.
    if !list.types.is_null() && unsafe { *list.types.add(i) } != XLA_BUFFER {
        return Err(format!(
            "operand or result {i} is not a buffer (FFI type {}); host callbacks take arrays",
            // SAFETY: as above.
            unsafe { *list.types.add(i) }
        ));
    }
    // SAFETY: `i < list.size`; each item of a buffer list is an `XLA_FFI_Buffer`.
    let b = unsafe { (*list.items.add(i)).cast::<XlaBuffer>().as_ref() }
        .ok_or_else(|| format!("buffer {i} is null"))?;
    let dtype = dtype_of(b.dtype).ok_or_else(|| {
        format!(
            "buffer {i} has XLA element type {}, which host callbacks do not take",
            b.dtype
        )
    })?;
    let rank = usize::try_from(b.rank)
        .map_err(|_| format!("buffer {i} has rank {}, which is negative", b.rank))?;
    let dims = if rank == 0 {
        Vec::new()
    } else if b.dims.is_null() {
        return Err(format!("buffer {i} has rank {rank} but no dimensions"));
    } else {
        // SAFETY: `dims` has `rank` entries.
        unsafe { std::slice::from_raw_parts(b.dims, rank) }.to_vec()
    };
    let bytes = dims
        .iter()
        .try_fold(dtype.size_in_bytes(), |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        })
        .filter(|&n| isize::try_from(n).is_ok())
        .ok_or_else(|| {
            format!("buffer {i} of dimensions {dims:?} is negative or too large to address")
        })?;
    if bytes > 0 && b.data.is_null() {
        return Err(format!(
            "buffer {i} of {bytes} bytes has a null data pointer"
        ));
    }
    Ok((b, dtype, dims, bytes))
}

/// The `i64` attribute `wanted` among the call's attributes.
///
/// # Safety
/// `attrs` must be the current call frame's attributes.
unsafe fn int_attr(attrs: &XlaAttrs, wanted: &str) -> Option<i64> {
    for i in 0..attrs.size.max(0) as usize {
        // SAFETY: each array has `size` entries.
        let (kind, name, attr) = unsafe {
            (
                *attrs.types.add(i),
                &**attrs.names.add(i),
                *attrs.attrs.add(i),
            )
        };
        // SAFETY: a byte span points at `len` bytes.
        let name = unsafe { std::slice::from_raw_parts(name.ptr, name.len) };
        if kind == XLA_ATTR_SCALAR && name == wanted.as_bytes() {
            // SAFETY: a scalar attribute is an `XLA_FFI_Scalar`; an `i64` one (type S64 = 5)
            // points at an `i64`.
            let scalar = unsafe { &*attr.cast::<XlaScalar>() };
            if scalar.dtype == 5 {
                // SAFETY: as above.
                return Some(unsafe { *scalar.value.cast::<i64>() });
            }
        }
    }
    None
}

/// Runs the call: reads the operands, calls the closure, writes the results.
///
/// # Safety
/// `frame` must be XLA's call frame of an execution.
unsafe fn run(frame: &XlaCallFrame) -> std::result::Result<(), String> {
    // SAFETY: the frame's attributes and buffer lists are valid during the call.
    let id = unsafe { int_attr(&frame.attrs, CALLBACK_ID_ATTR) }
        .map(|id| CallbackId(id as u64))
        .ok_or_else(|| format!("the custom call has no i64 `{CALLBACK_ID_ATTR}` attribute"))?;
    // An ordered call's last operand and result are the order token (`i32[]`), not the
    // callback's.
    // SAFETY: as above.
    let token = usize::from(unsafe { int_attr(&frame.attrs, ORDER_TOKEN_ATTR) } == Some(1));
    let (args, rets) = (
        usize::try_from(frame.args.size).unwrap_or(0),
        usize::try_from(frame.rets.size).unwrap_or(0),
    );
    if args < token || rets < token {
        return Err(format!(
            "the custom call is ordered but has {args} operands and {rets} results, so no order \
             token (an i32[] operand and result)"
        ));
    }
    let (n_args, n_rets) = (args - token, rets - token);
    let mut inputs = Vec::with_capacity(n_args);
    for i in 0..n_args {
        // SAFETY: as above, `i < args`.
        let (b, dtype, dims, n) = unsafe { buffer(&frame.args, i) }?;
        let bytes = match n {
            0 => Vec::new(),
            // SAFETY: an operand buffer holds its elements, `n` bytes (its data is not null).
            _ => unsafe { std::slice::from_raw_parts(b.data.cast::<u8>(), n) }.to_vec(),
        };
        inputs.push(Array::from_bytes(dtype, &dims, bytes).map_err(|e| e.to_string())?);
    }
    let mut expected = Vec::with_capacity(n_rets);
    let mut targets = Vec::with_capacity(n_rets);
    for i in 0..n_rets {
        // SAFETY: as above, `i < rets`.
        let (b, dtype, dims, n) = unsafe { buffer(&frame.rets, i) }?;
        expected.push(ShapedArray::new(dtype, &dims));
        targets.push((b.data, n));
    }
    if token == 1 {
        // SAFETY: as above, `n_rets < rets`.
        let (_, dtype, dims, _) = unsafe { buffer(&frame.rets, n_rets) }?;
        if dtype != DType::I32 || !dims.is_empty() {
            return Err("the order token result must be i32[]".into());
        }
    }
    let outs = tessera_ir::prim::call_host_callback("host callback", id, &inputs, &expected)
        .map_err(|e| e.to_string())?;
    for (k, (out, (target, n))) in outs.iter().zip(targets).enumerate() {
        let bytes = out.bytes();
        if bytes.len() != n {
            return Err(format!(
                "result {k} has {} bytes but its buffer {n}",
                bytes.len()
            ));
        }
        if n > 0 {
            // SAFETY: the result buffer has `n` bytes and a data pointer that is not null.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target.cast::<u8>(), n) };
        }
    }
    if token == 1 {
        // SAFETY: checked above: an `i32[]` buffer, whose data is not null.
        let (b, ..) = unsafe { buffer(&frame.rets, n_rets) }?;
        // SAFETY: an `i32[]` buffer holds one `i32`.
        unsafe { b.data.cast::<i32>().write_unaligned(0) };
    }
    Ok(())
}

/// The typed XLA FFI handler of every Tessera host callback.
///
/// # Safety
/// Called by XLA with a valid call frame.
unsafe extern "C" fn tessera_host_callback(frame: *mut XlaCallFrame) -> *mut c_void {
    let Some(frame) = (unsafe { frame.as_ref() }) else {
        return std::ptr::null_mut();
    };
    // The metadata handshake at registration: say which FFI API version the handler speaks (the
    // runtime's own) and that it has no traits.
    let ext = frame.extension_start;
    // SAFETY: a non-null extension starts with an `XLA_FFI_Extension_Base`.
    if !ext.is_null() && unsafe { (*ext).kind } == XLA_EXTENSION_METADATA {
        // SAFETY: a metadata extension is an `XLA_FFI_Metadata_Extension`.
        let metadata = unsafe { (*ext.cast::<XlaMetadataExtension>()).metadata };
        // SAFETY: XLA passes its API table (or null).
        let version = unsafe { api_table(frame.api) }.map(|api| api.api_version);
        if let Some(m) = unsafe { metadata.as_mut() } {
            m.api_version.major_version = version.map_or(0, |v| v.major_version);
            m.api_version.minor_version = version.map_or(1, |v| v.minor_version);
            m.traits = 0;
        }
        return std::ptr::null_mut();
    }
    if frame.stage != XLA_STAGE_EXECUTE {
        return std::ptr::null_mut();
    }
    // SAFETY: this is an execution's call frame.
    match unsafe { run(frame) } {
        Ok(()) => std::ptr::null_mut(),
        Err(message) => {
            // SAFETY: as above.
            let create = unsafe { api_table(frame.api) }.and_then(|api| api.error_create);
            let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
            match create {
                Some(create) => {
                    let mut args = XlaErrorCreateArgs {
                        struct_size: size_of::<XlaErrorCreateArgs>(),
                        extension_start: std::ptr::null_mut(),
                        message: text.as_ptr(),
                        errc: XLA_ERROR_INTERNAL,
                    };
                    // SAFETY: XLA copies the message into the error it returns.
                    unsafe { create(&mut args) }
                }
                None => std::ptr::null_mut(),
            }
        }
    }
}

/// Per plugin (by path), the outcome of registering the handler with it.
type Registrations = Mutex<Vec<(std::path::PathBuf, std::result::Result<(), String>)>>;

/// The outcome of registering the handler with each plugin, so it happens once.
fn registered() -> &'static Registrations {
    static DONE: OnceLock<Registrations> = OnceLock::new();
    DONE.get_or_init(|| Mutex::new(Vec::new()))
}

/// Registers the host callback handler with `plugin` (once); a plugin without the FFI extension
/// (or without `register_handler`) is a [`PjrtError::HostCallbacks`].
pub fn register_host_callbacks(plugin: &Plugin) -> Result<()> {
    let mut done = registered().lock().unwrap_or_else(|e| e.into_inner());
    let outcome = match done.iter().find(|(p, _)| p == plugin.path()) {
        Some((_, outcome)) => outcome.clone(),
        None => {
            let outcome = register(plugin);
            done.push((plugin.path().to_path_buf(), outcome.clone()));
            outcome
        }
    };
    outcome.map_err(|message| PjrtError::HostCallbacks {
        plugin: plugin.path().to_path_buf(),
        message,
    })
}

fn register(plugin: &Plugin) -> std::result::Result<(), String> {
    let mut ext = plugin.api().extension_start;
    // SAFETY: the extension chain is the plugin's static list; every entry starts with a
    // `PJRT_Extension_Base`.
    while let Some(e) = unsafe { ext.as_ref() } {
        if e.type_ == sys::PJRT_Extension_Type::PJRT_Extension_Type_FFI {
            break;
        }
        ext = e.next;
    }
    // SAFETY: as above.
    let Some(e) = (unsafe { ext.as_ref() }) else {
        return Err(
            "the plugin has no PJRT FFI extension, so it cannot call host callbacks".into(),
        );
    };
    // The extension's function pointers follow its base: version 2 holds `type_id_register`,
    // `user_data_add`, `register_handler`; version 1 `user_data_add`, `register_handler`.
    let base = size_of::<sys::PJRT_Extension_Base>();
    let slots = (e.struct_size.saturating_sub(base)) / size_of::<usize>();
    if slots < 2 {
        return Err(format!(
            "the plugin's FFI extension ({} bytes) has no register_handler",
            e.struct_size
        ));
    }
    // SAFETY: the extension is `struct_size` bytes; its last pointer is `register_handler`.
    let register: Option<PjrtFfiRegisterHandler> = unsafe {
        *(ext as *const u8)
            .add(base + (slots - 1) * size_of::<usize>())
            .cast::<Option<PjrtFfiRegisterHandler>>()
    };
    let register = register.ok_or("the plugin's FFI extension leaves register_handler null")?;
    let platform = "Host";
    if slots == 2 {
        // Version 1: the arguments carry an `api_version` (1: typed FFI) before the handler.
        let mut args = PjrtFfiRegisterHandlerArgsV1 {
            struct_size: size_of::<PjrtFfiRegisterHandlerArgsV1>(),
            target_name: HOST_CALLBACK_TARGET.as_ptr().cast(),
            target_name_size: HOST_CALLBACK_TARGET.len(),
            api_version: 1,
            handler: tessera_host_callback as *mut c_void,
            platform_name: platform.as_ptr().cast(),
            platform_name_size: platform.len(),
        };
        // SAFETY: a version-1 extension's function takes this argument struct.
        let error = unsafe { register(std::ptr::from_mut(&mut args).cast()) };
        return plugin
            .check(error, "PJRT_FFI_Register_Handler")
            .map_err(|e| e.to_string());
    }
    let mut args = PjrtFfiRegisterHandlerArgs {
        struct_size: size_of::<PjrtFfiRegisterHandlerArgs>(),
        target_name: HOST_CALLBACK_TARGET.as_ptr().cast(),
        target_name_size: HOST_CALLBACK_TARGET.len(),
        handler: tessera_host_callback as *mut c_void,
        platform_name: platform.as_ptr().cast(),
        platform_name_size: platform.len(),
        traits: 0,
    };
    // SAFETY: `args` is the extension's argument struct, its strings passed with lengths.
    let error = unsafe { register(&mut args) };
    plugin
        .check(error, "PJRT_FFI_Register_Handler")
        .map_err(|e| e.to_string())
}

#[cfg(test)]
#[path = "host_callback_tests.rs"]
mod tests;
