//! The varying-axes (vma) type errors of a checked `shard_map` (JAX's `check_vma=True`): a
//! reduction over an axis its operand does not vary over, and a `pvary` of a value that already
//! varies; both are refused when the program is read, naming the axis and what to do. The
//! tracing API inserts the `pvary` casts itself, so parsed text is how a user meets them.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use tessera_ir::text::parse_closed;

/// `body` inside a checked `shard_map` over 4 devices of axis `x`, `w` replicated in.
fn program(body: &str) -> String {
    format!(
        "{{ lambda ; a:f32[4,2] b:f32[1,2]. let
    c:f32[1,2] = shard_map[
      check_vma=True
      in_specs=(P('x',), P())
      jaxpr={{ lambda ; d:f32[1,2]{{V:x}} e:f32[1,2]. let
{body}
        in (h,) }}
      mesh=Mesh('x': 4, axis_types=(Explicit,))
      newly_manual_axes=frozenset({{'x'}})
      out_specs=(P(None,),)
    ] a b
  in (c,) }}"
    )
}

#[test]
fn a_reduction_of_an_invariant_value_is_refused_naming_the_axis() {
    // `e` is replicated (varies over nothing): psum over 'x' needs a varying operand.
    let text = program("          h:f32[1,2] = psum[axes=('x',) axis_index_groups=None] e");
    let err = parse_closed(&text).unwrap_err().to_string();
    assert!(err.contains("needs a value varying over 'x'"), "{err}");
    assert!(err.contains("apply pvary"), "{err}");
    // The same with the cast first is accepted.
    let ok = program(
        "          g:f32[1,2]{V:x} = pvary[axes=('x',)] e
          h:f32[1,2] = psum[axes=('x',) axis_index_groups=None] g",
    );
    parse_closed(&ok).unwrap();
}

#[test]
fn a_pvary_of_a_varying_value_is_refused() {
    let text = program(
        "          g:f32[1,2]{V:x} = pvary[axes=('x',)] d
          h:f32[1,2] = psum[axes=('x',) axis_index_groups=None] g",
    );
    let err = parse_closed(&text).unwrap_err().to_string();
    assert!(err.contains("already varies over 'x'"), "{err}");
    assert!(err.contains("pvary casts invariant values only"), "{err}");
}
