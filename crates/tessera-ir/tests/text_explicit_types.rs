//! The types JAX prints for `shard_map` bodies and explicit meshes: varying axes over several
//! mesh axes (`{V:(data,model)}`), explicit shardings of dimensions (`f32[8@pp,4]`) and reduced
//! and unreduced axes (`{V:pp, R:tp}`, `{U:tp}`) parse, print as JAX prints them and parse back
//! to the same program; malformed ones are errors, never panics.

use tessera_ir::text::{parse_closed, print_closed};

const EXPLICIT: &str = "{ lambda ; a:f32[8@pp,4] b:f32[8@pp,8@tp]. let
    c:f32[8@pp,4] d:f32[8@pp,4] = jit[
      name=pcast_reduced_unreduced
      ctx_mesh=Mesh('pp': 2, 'dp': 2, 'tp': 2, axis_types=(Explicit, Explicit, Explicit))
      jaxpr={ lambda ; a:f32[8@pp,4] b:f32[8@pp,8@tp]. let
          e:f32[8@pp,4]{R:tp} = shard_map[
            check_vma=True
            in_specs=(P('pp',),)
            jaxpr={ lambda ; f:f32[4,4]{V:pp}. let
                g:f32[4,4]{V:pp} = tanh f
                j:f32[4,4]{V:pp, R:tp} = preduced[axes=('tp',)] g
              in (j,) }
            mesh=AbstractMesh('pp': 2, 'dp': 2, 'tp': 2, axis_types=(Explicit, Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu)
            newly_manual_axes=frozenset({'dp', 'pp', 'tp'})
            out_specs=(P('pp', reduced={'tp'}),)
          ] a
          d:f32[8@pp,4] = shard_map[
            check_vma=True
            in_specs=(P('pp', 'tp'),)
            jaxpr={ lambda ; k:f32[4,4]{V:(pp,tp)}. let
                l:f32[4,4]{V:pp, U:tp} = vary_unreduced_cast_p[axes=('tp',)] k
                m:f32[4,4]{V:pp} = unreduced_psum[axes=('tp',)] l
              in (m,) }
            mesh=AbstractMesh('pp': 2, 'dp': 2, 'tp': 2, axis_types=(Explicit, Explicit, Explicit), device_kind=cpu, num_cores=None, platform=cpu)
            newly_manual_axes=frozenset({'dp', 'pp', 'tp'})
            out_specs=(P('pp',),)
          ] b
          c:f32[8@pp,4] = reshard e
        in (c, d) }
    ] a b
  in (c, d) }";

#[test]
fn explicit_types_and_their_casts_print_as_jax_and_parse_back() {
    let program = parse_closed(EXPLICIT).unwrap_or_else(|e| panic!("{e}"));
    let text = print_closed(&program, 0);
    for printed in [
        "a:f32[8@pp,4] b:f32[8@pp,8@tp]",
        ":f32[8@pp,4]{R:tp} = shard_map[",
        ":f32[4,4]{V:pp, R:tp} = preduced[axes=('tp',)]",
        ":f32[4,4]{V:(pp,tp)}",
        ":f32[4,4]{V:pp, U:tp} = vary_unreduced_cast_p[axes=('tp',)]",
        ":f32[4,4]{V:pp} = unreduced_psum[axes=('tp',)]",
        " = reshard ",
    ] {
        assert!(text.contains(printed), "{printed} not in\n{text}");
    }
    let again = parse_closed(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(again, program);
    assert_eq!(print_closed(&again, 0), text);
}

#[test]
fn malformed_type_annotations_are_errors_naming_them() {
    let program = |ty: &str| format!("{{ lambda ; a:{ty}. let b:f32[2] = neg a in (b,) }}");
    for (ty, says) in [
        ("f32[2]{X:a}", "expected `V:`, `R:` or `U:`"),
        ("f32[2]{V:a, V:b}", "given twice"),
        ("f32[2@]", "mesh axis name"),
        ("f32[2]{V:()}", "mesh axis name"),
        ("f32[2]{V:a", "expected"),
    ] {
        let err = parse_closed(&program(ty)).expect_err(ty).to_string();
        assert!(err.contains(says), "{ty}: {err}");
    }
}
