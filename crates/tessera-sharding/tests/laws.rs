//! Property tests: text round trips, NamedSharding ⇄ HloSharding round trips, exact tiling of the
//! per-device blocks, and parsers that never panic.

use proptest::prelude::*;
use tessera_sharding::{
    AbstractMesh, AxisType, DimSpec, HloSharding, Mesh, NamedSharding, PartitionSpec, SubgroupType,
    TileAssignment,
};

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

/// A mesh of 1–4 axes of sizes 1–4 (Auto or Explicit, the last maybe Manual), over a shuffled
/// device order.
fn mesh() -> impl Strategy<Value = Mesh> {
    prop::collection::vec(1i64..=4, 1..=4).prop_flat_map(|sizes| {
        let n: i64 = sizes.iter().product();
        let order = Just((0..n).collect::<Vec<_>>()).prop_shuffle();
        let kinds = prop::collection::vec(0u8..3, sizes.len());
        (Just(sizes), order, kinds).prop_map(|(sizes, devices, kinds)| {
            let names = &NAMES[..sizes.len()];
            let last = sizes.len() - 1;
            let types: Vec<AxisType> = kinds
                .iter()
                .enumerate()
                .map(|(i, k)| match k {
                    0 => AxisType::Auto,
                    2 if i == last => AxisType::Manual,
                    _ => AxisType::Explicit,
                })
                .collect();
            let shape = AbstractMesh::new(names, &sizes, &types).expect("valid mesh");
            Mesh::new(shape, devices).expect("distinct devices")
        })
    })
}

/// A mesh and a spec over distinct axes of it, with an array rank at least the spec's length.
fn mesh_and_spec() -> impl Strategy<Value = (Mesh, PartitionSpec, usize)> {
    mesh()
        .prop_flat_map(|m| {
            let k = m.rank();
            let axes = Just((0..k).collect::<Vec<_>>()).prop_shuffle();
            let slots = prop::collection::vec(0usize..4, k);
            (Just(m), axes, slots, 0usize..3)
        })
        .prop_map(|(m, axes, slots, extra)| {
            // slot 0 = unused; otherwise the axis goes to dimension slot-1, in shuffled order.
            let mut dims: Vec<Vec<String>> = vec![Vec::new(); 3];
            for (&axis, &slot) in axes.iter().zip(&slots) {
                let manual = m.axis_types()[axis] == AxisType::Manual;
                if slot > 0 && !manual {
                    dims[slot - 1].push(m.axis_names()[axis].clone());
                }
            }
            while dims.last().is_some_and(Vec::is_empty) {
                dims.pop();
            }
            let spec = PartitionSpec::new(dims.iter().map(|d| DimSpec::from_axes(d)).collect());
            let rank = spec.len() + extra;
            (m, spec, rank)
        })
}

/// An HloSharding built through XLA's constructors: iota or explicit, with subgroups.
fn hlo() -> impl Strategy<Value = HloSharding> {
    let sizes = prop::collection::vec(1i64..=4, 1..=4);
    sizes
        .prop_flat_map(|sizes| {
            let k = sizes.len();
            let n: i64 = sizes.iter().product();
            let perm = Just((0..k).collect::<Vec<_>>()).prop_shuffle();
            let devices = Just((0..n).collect::<Vec<_>>()).prop_shuffle();
            let kinds = prop::collection::vec(0u8..3, 0..=2);
            (
                Just(sizes),
                perm,
                devices,
                kinds,
                any::<bool>(),
                prop::collection::vec(any::<bool>(), k),
            )
        })
        .prop_filter_map(
            "subgroups need dimensions",
            |(sizes, perm, devices, kinds, explicit, cuts)| {
                // Tile dims: the permuted sizes, grouped where `cuts` says.
                let mut dims = vec![1i64];
                for (i, &p) in perm.iter().enumerate() {
                    if i > 0 && cuts[i] {
                        dims.push(1);
                    }
                    if let Some(last) = dims.last_mut() {
                        *last *= sizes[p];
                    }
                }
                let types: Vec<SubgroupType> = kinds
                    .iter()
                    .map(|k| match k {
                        0 => SubgroupType::Manual,
                        1 => SubgroupType::Replicated,
                        _ => SubgroupType::Unreduced,
                    })
                    .collect();
                if types.len() > dims.len() {
                    return None;
                }
                let built = if explicit {
                    HloSharding::subgroup(TileAssignment::Explicit { dims, devices }, &types)
                } else {
                    HloSharding::iota_tile(&dims, &sizes, &perm, &types)
                };
                built.ok()
            },
        )
}

fn normalized(spec: &PartitionSpec, mesh: &Mesh) -> Vec<Vec<String>> {
    let mut dims: Vec<Vec<String>> = spec
        .dims()
        .iter()
        .map(|d| {
            d.axes()
                .iter()
                .filter(|a| mesh.axis_size(a) > Some(1))
                .cloned()
                .collect()
        })
        .collect();
    while dims.last().is_some_and(Vec::is_empty) {
        dims.pop();
    }
    dims
}

fn spec_text() -> impl Strategy<Value = PartitionSpec> {
    let name = "[a-z][a-z0-9_]{0,3}";
    let dim = prop_oneof![
        Just(DimSpec::Replicated),
        Just(DimSpec::Unconstrained),
        prop::collection::vec(name, 1..=3).prop_map(|a| DimSpec::from_axes(&a)),
    ];
    let sets = prop::collection::vec(name, 0..=2);
    (prop::collection::vec(dim, 0..=4), sets.clone(), sets)
        .prop_map(|(dims, u, r)| PartitionSpec::new(dims).with_unreduced(&u).with_reduced(&r))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn hlo_text_round_trips(s in hlo()) {
        let text = s.to_string();
        let parsed = HloSharding::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parsed.to_string(), text);
        prop_assert_eq!(parsed.tile_assignment_devices(), s.tile_assignment_devices());
    }

    #[test]
    fn iota_normalisation_matches_explicit_arrays(
        sizes in prop::collection::vec(1i64..=4, 1..=4),
        seed in any::<u64>(),
        kinds in prop::collection::vec(0u8..3, 0..=3),
    ) {
        // Tile dims: the sizes permuted by a seed-derived permutation, grouped pairwise.
        let k = sizes.len();
        let mut perm: Vec<usize> = (0..k).collect();
        let mut x = seed;
        for i in (1..k).rev() {
            perm.swap(i, (x % (i as u64 + 1)) as usize);
            x /= i as u64 + 1;
        }
        let dims: Vec<i64> = perm
            .chunks(if x % 2 == 0 { 1 } else { 2 })
            .map(|c| c.iter().map(|&p| sizes[p]).product())
            .collect();
        let types: Vec<SubgroupType> = kinds[..kinds.len().min(dims.len())]
            .iter()
            .map(|k| [SubgroupType::Manual, SubgroupType::Replicated, SubgroupType::Unreduced][*k as usize])
            .collect();
        let iota = HloSharding::iota_tile(&dims, &sizes, &perm, &types).expect("valid iota");
        let devices = tessera_sharding::IotaTileAssignment::new(&dims, &sizes, &perm)
            .expect("valid iota")
            .expand();
        let explicit = HloSharding::subgroup(TileAssignment::Explicit { dims, devices }, &types)
            .expect("valid list");
        prop_assert_eq!(iota.tile_assignment_dimensions(), explicit.tile_assignment_dimensions());
        prop_assert_eq!(iota.tile_assignment_devices(), explicit.tile_assignment_devices());
        prop_assert_eq!(
            iota.as_tiled().map(|t| (t.last_tile_dim_replicate(), t.subgroup_types().to_vec())),
            explicit.as_tiled().map(|t| (t.last_tile_dim_replicate(), t.subgroup_types().to_vec()))
        );
        prop_assert_eq!(iota.is_manual(), explicit.is_manual());
        prop_assert_eq!(iota.is_replicated(), explicit.is_replicated());
    }

    #[test]
    fn spec_text_round_trips(spec in spec_text()) {
        let text = spec.to_string();
        let parsed = PartitionSpec::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(parsed.to_string(), text);
        prop_assert_eq!(parsed, spec);
    }

    #[test]
    fn named_to_hlo_to_named_round_trips((mesh, spec, rank) in mesh_and_spec()) {
        let named = NamedSharding::new(&mesh, spec.clone()).expect("distinct known axes");
        let hlo = named.to_hlo_sharding(rank).expect("rank fits");
        let back = NamedSharding::from_hlo_sharding(&hlo, &mesh)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(normalized(back.spec(), &mesh), normalized(&spec, &mesh));
    }

    #[test]
    fn iota_and_explicit_paths_agree((mesh, spec, rank) in mesh_and_spec()) {
        // Identity logical ids take JAX's explicit-array path; no ids take the iota path.
        let named = NamedSharding::new(&mesh, spec).expect("distinct known axes");
        let iota = named.to_hlo_sharding(rank).expect("rank fits");
        let ids: Vec<i64> = (0..mesh.size()).collect();
        let explicit = named.with_logical_device_ids(ids).expect("identity").to_hlo_sharding(rank);
        let explicit = explicit.expect("rank fits");
        prop_assert_eq!(iota.tile_assignment_dimensions(), explicit.tile_assignment_dimensions());
        prop_assert_eq!(iota.tile_assignment_devices(), explicit.tile_assignment_devices());
        prop_assert_eq!(iota.as_tiled().map(|t| t.subgroup_types().to_vec()),
            explicit.as_tiled().map(|t| t.subgroup_types().to_vec()));
        prop_assert_eq!(iota.is_replicated(), explicit.is_replicated());
        prop_assert_eq!(iota.is_manual(), explicit.is_manual());
    }

    #[test]
    fn blocks_tile_the_array_exactly((mesh, spec, rank) in mesh_and_spec(), mult in 1i64..=2) {
        let named = NamedSharding::new(&mesh, spec).expect("distinct known axes");
        let tiles = named.tiles_per_dim(rank).expect("rank fits");
        let shape: Vec<i64> = tiles.iter().map(|t| t * mult).collect();
        let blocks = named.devices_indices_map(&shape).expect("divides");
        prop_assert_eq!(blocks.len() as i64, mesh.size());
        let num_tiles: i64 = tiles.iter().product();
        let copies = mesh.size() / num_tiles;
        let total: i64 = shape.iter().product();
        for flat in 0..total {
            let mut rest = flat;
            let mut index = vec![0i64; shape.len()];
            for (slot, &s) in index.iter_mut().zip(&shape).rev() {
                *slot = rest % s;
                rest /= s;
            }
            let holders = blocks
                .iter()
                .filter(|(_, b)| b.iter().zip(&index).all(|((lo, hi), i)| lo <= i && i < hi))
                .count() as i64;
            prop_assert_eq!(holders, copies, "element {:?}", index);
        }
    }

    #[test]
    fn hlo_parser_never_panics(text in "[{}\\[\\]<=T(),0-9a-z_ =/*]{0,60}") {
        let _ = HloSharding::parse(&text);
    }

    #[test]
    fn hlo_parser_survives_token_soup(tokens in prop::collection::vec(prop_oneof![
        Just("{"), Just("}"), Just("devices=["), Just("]"), Just("<=["), Just("T("), Just(")"),
        Just(","), Just("0"), Just("1"), Just("2"), Just("3"), Just("4"), Just("8"),
        Just(" last_tile_dim_replicate"), Just(" last_tile_dims={"), Just("manual"),
        Just("replicated"), Just("maximal device="), Just("unreduced"), Just(" "),
    ], 0..40)) {
        let text: String = tokens.concat();
        if let Ok(s) = HloSharding::parse(&text) {
            let printed = s.to_string();
            let again = HloSharding::parse(&printed).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(again.to_string(), printed);
        }
    }

    #[test]
    fn spec_parser_never_panics(text in "[P()'\",a-zA-Z_ {}=.]{0,50}") {
        if let Ok(spec) = PartitionSpec::parse(&text) {
            prop_assert_eq!(PartitionSpec::parse(&spec.to_string()), Ok(spec));
        }
    }
}
