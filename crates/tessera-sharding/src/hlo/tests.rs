//! Snapshots of HloSharding construction, canonicalisation, printing and parsing.

use expect_test::{Expect, expect};

use super::*;

/// Parses `text`, then prints the sharding (or the error) and its accessors.
fn check(text: &str, expected: Expect) {
    let actual = match HloSharding::parse(text) {
        Ok(s) => format!(
            "{s} dims={:?} devices={:?} repl={} manual={} maximal={} tiled={}",
            s.tile_assignment_dimensions().unwrap_or_default(),
            s.tile_assignment_devices().unwrap_or_default(),
            s.is_replicated(),
            s.is_manual(),
            s.is_maximal(),
            s.is_tiled()
        ),
        Err(e) => format!("error: {e}"),
    };
    expected.assert_eq(&actual);
}

#[test]
fn iota_reshape_dims_are_canonicalised_like_xla() {
    check(
        "{devices=[60]<=[3,4,5]}",
        expect![[
            r#"{devices=[60]<=[60]} dims=[60] devices=[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[6,2]<=[3,2,2]T(2,0,1)}",
        expect![[
            r#"{devices=[6,2]<=[6,2]T(1,0)} dims=[6, 2] devices=[0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[3,4]<=[1,3,1,2,1,2]T(4,3,2,5,1,0)}",
        expect![[
            r#"{devices=[3,4]<=[3,4]T(1,0)} dims=[3, 4] devices=[0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[1,1]<=[1]}",
        expect![[
            r#"{devices=[1,1]<=[1]} dims=[1, 1] devices=[0] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
}

#[test]
fn partial_and_subgroup_tilings_normalise() {
    check(
        "{devices=[1,4]<=[4] last_tile_dim_replicate}",
        expect![[
            r#"{replicated} dims=[] devices=[] repl=true manual=false maximal=true tiled=false"#
        ]],
    );
    check(
        "{devices=[2,2,1]<=[4] last_tile_dim_replicate}",
        expect![[
            r#"{devices=[2,2]<=[4]} dims=[2, 2] devices=[0, 1, 2, 3] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[2,2]3,2,1,0 last_tile_dim_replicate}",
        expect![[
            r#"{devices=[2,2]2,3,0,1 last_tile_dim_replicate} dims=[2, 2] devices=[2, 3, 0, 1] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[2,2,2]<=[8] last_tile_dims={replicated, manual}}",
        expect![[
            r#"{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dims={manual, replicated}} dims=[2, 2, 2] devices=[0, 2, 1, 3, 4, 6, 5, 7] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
    check(
        "{devices=[1,2,2]<=[4] last_tile_dims={manual, manual}}",
        expect![[
            r#"{manual} dims=[] devices=[] repl=false manual=true maximal=false tiled=false"#
        ]],
    );
    check(
        "{devices=[2,1,2]<=[4] last_tile_dims={manual, replicated}}",
        expect![
            "{devices=[2,2]<=[4] last_tile_dim_replicate} dims=[2, 2] devices=[0, 1, 2, 3] repl=false manual=false maximal=false tiled=true"
        ],
    );
}

#[test]
fn simple_and_tuple_shardings_print_back() {
    check(
        "{replicated}",
        expect![[
            r#"{replicated} dims=[] devices=[] repl=true manual=false maximal=true tiled=false"#
        ]],
    );
    check(
        "{ maximal device=3 }",
        expect![[
            r#"{maximal device=3} dims=[] devices=[] repl=false manual=false maximal=true tiled=false"#
        ]],
    );
    check(
        "{{replicated}, {manual}, {maximal device=1}, {replicated}, {replicated}, /*index=5*/{devices=[2]1,0}}",
        expect![[
            r#"{{replicated}, {manual}, {maximal device=1}, {replicated}, {replicated}, /*index=5*/{devices=[2]1,0}} dims=[] devices=[] repl=false manual=false maximal=false tiled=true"#
        ]],
    );
}

#[test]
fn malformed_texts_are_refused_with_a_position() {
    check(
        "{devices=[2,2]0,1,2}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 19 of "{devices=[2,2]0,1,2}": invalid HloSharding: 3 devices listed for tile dimensions [2,2] (4 tiles)"#
        ]],
    );
    check(
        "{devices=[2,2]<=[3]}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 19 of "{devices=[2,2]<=[3]}": the iota dimensions, reshape and transpose disagree"#
        ]],
    );
    check(
        "{devices=[4]<=[2,2]T(0,0)}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 25 of "{devices=[4]<=[2,2]T(0,0)}": the iota dimensions, reshape and transpose disagree"#
        ]],
    );
    check(
        "{replicated manual}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 18 of "{replicated manual}": a sharding is exactly one of replicated, manual, unreduced, maximal or devices="#
        ]],
    );
    check(
        "{sideways}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 1 of "{sideways}": unknown sharding attribute"#
        ]],
    );
    check(
        "{devices=[99999999999999999999]<=[1]}",
        expect![[
            r#"error: cannot parse an HloSharding at byte 10 of "{devices=[99999999999999999999]<=[1]}": expected a number"#
        ]],
    );
}

#[test]
fn subgroup_of_an_explicit_list_keeps_the_list() {
    let tiles = TileAssignment::Explicit {
        dims: vec![2, 2],
        devices: vec![3, 1, 2, 0],
    };
    let s = HloSharding::subgroup(tiles, &[SubgroupType::Replicated]);
    assert_eq!(
        s.map(|s| s.to_string()),
        Ok("{devices=[2,2]1,3,0,2 last_tile_dim_replicate}".into())
    );
}
