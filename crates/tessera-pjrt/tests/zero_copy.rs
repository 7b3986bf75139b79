//! Zero-copy host memory on the CPU plugin: a buffer made from `AlignedBytes` holds their values
//! (and keeps them alive after the caller's handle is gone), a CPU buffer's memory reads in place
//! with the same bytes `to_host` copies, and a wrong byte count is refused.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_pjrt::{AlignedBytes, Buffer, Client, ElementType, HostArray, PjrtError};

fn floats(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()
}

fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn aligned_bytes_become_a_buffer_and_read_back_in_place() {
    let client = Client::cpu(2).unwrap();
    let values = floats(3 * 1024);
    let buffer = Buffer::from_aligned_bytes(
        &client,
        ElementType::F32,
        &[3, 1024],
        AlignedBytes::copy_of(&bytes_of(&values)),
        1,
    )
    .unwrap();
    assert_eq!(buffer.device_id().unwrap(), 1);
    assert_eq!(buffer.to_host().unwrap().to_typed::<f32>().unwrap(), values);
    assert_eq!(buffer.host_memory().unwrap(), bytes_of(&values).as_slice());
    // A buffer the plugin made (a copy to the other device) reads in place too.
    let copy = buffer.copy_to(0).unwrap();
    drop(buffer);
    assert_eq!(copy.host_memory().unwrap(), bytes_of(&values).as_slice());
}

#[test]
fn a_buffer_from_host_reads_in_place_like_to_host() {
    let client = Client::cpu(1).unwrap();
    let host = HostArray::from_slice(&[4, 2], &[1i32, -2, 3, -4, 5, -6, 7, -8]).unwrap();
    let buffer = Buffer::from_host_to(&client, &host, 0).unwrap();
    assert_eq!(buffer.host_memory().unwrap(), host.bytes());
}

#[test]
fn a_wrong_byte_count_is_refused() {
    let client = Client::cpu(1).unwrap();
    let err =
        Buffer::from_aligned_bytes(&client, ElementType::F32, &[4], AlignedBytes::zeroed(12), 0)
            .unwrap_err();
    assert!(
        matches!(
            err,
            PjrtError::HostSize {
                expected: 16,
                actual: 12,
                ..
            }
        ),
        "{err}"
    );
}
