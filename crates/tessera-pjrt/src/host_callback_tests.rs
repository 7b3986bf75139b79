//! The host callback handler called directly with hand-made XLA call frames (no plugin): what
//! XLA may pass (an empty buffer whose data pointer is null, a negative rank, an element type
//! Tessera does not map, an order token that is missing, a non-buffer argument) and a closure
//! that panics are each a success or an FFI error, never undefined behaviour or an abort.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::cell::RefCell;
use std::ffi::{CStr, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tessera_ir::callback::{CallbackId, register};
use tessera_ir::{Array, DType};

use super::*;

thread_local! {
    static MESSAGE: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// A stand-in for `XLA_FFI_Error_Create`: records the message, returns a non-null "error".
unsafe extern "C" fn record_error(args: *mut XlaErrorCreateArgs) -> *mut c_void {
    // SAFETY: the handler passes a valid argument struct with a C string.
    let text = unsafe { CStr::from_ptr((*args).message) }
        .to_string_lossy()
        .into_owned();
    MESSAGE.with(|m| *m.borrow_mut() = Some(text));
    std::ptr::NonNull::<u8>::dangling().as_ptr().cast()
}

fn api() -> XlaApi {
    XlaApi {
        struct_size: XLA_API_SIZE,
        extension_start: std::ptr::null_mut(),
        api_version: XlaApiVersion {
            struct_size: size_of::<XlaApiVersion>(),
            extension_start: std::ptr::null_mut(),
            major_version: 0,
            minor_version: 1,
        },
        internal_api: std::ptr::null_mut(),
        error_create: Some(record_error),
    }
}

/// One buffer as XLA describes it.
struct Buf {
    dtype: i32,
    dims: Vec<i64>,
    rank: i64,
    data: *mut c_void,
}

impl Buf {
    fn new(dtype: i32, dims: &[i64], data: *mut c_void) -> Buf {
        Buf {
            dtype,
            dims: dims.to_vec(),
            rank: dims.len() as i64,
            data,
        }
    }
}

/// Calls the handler on `args` and `rets` with the attributes `callback_id = id` (and
/// `order_token = 1` when `ordered`); `Ok` or the message of the FFI error it returned.
fn call(
    id: CallbackId,
    ordered: bool,
    args: &[Buf],
    rets: &[Buf],
    arg_type: i32,
) -> Result<(), String> {
    let api = api();
    let xla = |bufs: &[Buf]| -> Vec<XlaBuffer> {
        bufs.iter()
            .map(|b| XlaBuffer {
                struct_size: size_of::<XlaBuffer>(),
                extension_start: std::ptr::null_mut(),
                dtype: b.dtype,
                data: b.data,
                rank: b.rank,
                dims: if b.dims.is_empty() {
                    std::ptr::null()
                } else {
                    b.dims.as_ptr()
                },
            })
            .collect()
    };
    let (mut a, mut r) = (xla(args), xla(rets));
    let items = |v: &mut Vec<XlaBuffer>| -> Vec<*mut c_void> {
        v.iter_mut().map(|b| std::ptr::from_mut(b).cast()).collect()
    };
    let (a_items, r_items) = (items(&mut a), items(&mut r));
    let (a_types, r_types) = (vec![arg_type; a.len()], vec![1; r.len()]);
    let list = |items: &Vec<*mut c_void>, types: &Vec<i32>| XlaList {
        struct_size: size_of::<XlaList>(),
        extension_start: std::ptr::null_mut(),
        size: items.len() as i64,
        types: if types.is_empty() {
            std::ptr::null()
        } else {
            types.as_ptr()
        },
        items: if items.is_empty() {
            std::ptr::null()
        } else {
            items.as_ptr()
        },
    };
    let id_value = id.0 as i64;
    let one = 1i64;
    let scalars = [
        XlaScalar {
            dtype: 5,
            value: std::ptr::from_ref(&id_value).cast(),
        },
        XlaScalar {
            dtype: 5,
            value: std::ptr::from_ref(&one).cast(),
        },
    ];
    let names = [CALLBACK_ID_ATTR, ORDER_TOKEN_ATTR].map(|n| XlaByteSpan {
        ptr: n.as_ptr(),
        len: n.len(),
    });
    let count = if ordered { 2 } else { 1 };
    let name_ptrs: Vec<*const XlaByteSpan> = names.iter().map(std::ptr::from_ref).collect();
    let attr_ptrs: Vec<*mut c_void> = scalars
        .iter()
        .map(|s| std::ptr::from_ref(s).cast_mut().cast())
        .collect();
    let attr_types = [XLA_ATTR_SCALAR; 2];
    let mut frame = XlaCallFrame {
        struct_size: size_of::<XlaCallFrame>(),
        extension_start: std::ptr::null_mut(),
        api: &api,
        ctx: std::ptr::null_mut(),
        stage: XLA_STAGE_EXECUTE,
        args: list(&a_items, &a_types),
        rets: list(&r_items, &r_types),
        attrs: XlaAttrs {
            struct_size: size_of::<XlaAttrs>(),
            extension_start: std::ptr::null_mut(),
            size: count,
            types: attr_types.as_ptr(),
            names: name_ptrs.as_ptr(),
            attrs: attr_ptrs.as_ptr(),
        },
    };
    MESSAGE.with(|m| *m.borrow_mut() = None);
    // SAFETY: the frame and everything it points at live until the call returns.
    let error = unsafe { tessera_host_callback(&mut frame) };
    match error.is_null() {
        true => Ok(()),
        false => Err(MESSAGE.with(|m| m.borrow_mut().take()).unwrap_or_default()),
    }
}

/// A callback returning `f32[0, 3]`, counting its calls and the operands' element counts.
fn empty_result(calls: &Arc<AtomicUsize>) -> CallbackId {
    let calls = calls.clone();
    register(Arc::new(move |args: &[Array]| {
        calls.fetch_add(
            1 + args
                .iter()
                .map(|a| a.dims().iter().product::<i64>() as usize)
                .sum::<usize>(),
            Ordering::SeqCst,
        );
        Ok(vec![
            Array::new(DType::F32, &[0, 3], Vec::new()).map_err(|e| e.to_string())?,
        ])
    }))
}

#[test]
fn empty_buffers_with_null_data_pointers_are_read_and_written_as_empty() {
    let calls = Arc::new(AtomicUsize::new(0));
    let id = empty_result(&calls);
    let null = std::ptr::null_mut();
    let out = call(
        id,
        false,
        &[Buf::new(11, &[0], null)],
        &[Buf::new(11, &[0, 3], null)],
        1,
    );
    assert_eq!(out, Ok(()));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the callback ran once on an empty operand"
    );
}

#[test]
fn a_missing_order_token_is_an_error_not_a_read_past_the_lists() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let id = register(Arc::new(move |_: &[Array]| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(Vec::new())
    }));
    let err = call(id, true, &[], &[], 1).unwrap_err();
    assert!(err.contains("order token"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_negative_rank_or_an_unmapped_element_type_is_an_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let id = empty_result(&calls);
    let mut x = 0f32;
    let data = std::ptr::from_mut(&mut x).cast();
    let mut bad_rank = Buf::new(11, &[], data);
    bad_rank.rank = -1;
    let err = call(id, false, &[bad_rank], &[], 1).unwrap_err();
    assert!(err.contains("rank -1"), "{err}");
    let err = call(id, false, &[Buf::new(15, &[], data)], &[], 1).unwrap_err();
    assert!(err.contains("element type 15"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_buffer_too_large_to_address_is_an_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let id = empty_result(&calls);
    let mut x = 0f32;
    let data = std::ptr::from_mut(&mut x).cast();
    let err = call(id, false, &[Buf::new(11, &[i64::MAX, 4], data)], &[], 1).unwrap_err();
    assert!(err.contains("too large"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn an_argument_that_is_not_a_buffer_is_an_error() {
    let calls = Arc::new(AtomicUsize::new(0));
    let id = empty_result(&calls);
    let mut x = 0f32;
    let data = std::ptr::from_mut(&mut x).cast();
    let err = call(id, false, &[Buf::new(11, &[], data)], &[], 7).unwrap_err();
    assert!(err.contains("not a buffer"), "{err}");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[test]
fn a_closure_that_panics_is_an_ffi_error() {
    let id = register(Arc::new(|_: &[Array]| -> Result<Vec<Array>, String> {
        panic!("boom")
    }));
    let err = call(id, false, &[], &[], 1).unwrap_err();
    assert!(err.contains("panicked"), "{err}");
}
