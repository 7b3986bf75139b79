//! The partitioner a module is emitted for, and its sharding annotations in that partitioner's
//! form.
//!
//! XLA partitions SPMD programs with GSPMD or with Shardy. The two read different annotations:
//!
//! | | GSPMD | Shardy |
//! | --- | --- | --- |
//! | an argument or result | `mhlo.sharding = "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"` | `sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>` |
//! | the mesh | in every sharding (tile assignment) | one `sdy.mesh @mesh = <["x"=4, "y"=2]>` per module |
//! | `shard_map` | `@Sharding` + `@SPMDFullToShardShape` ... `@SPMDShardToFullShape` custom calls | `sdy.manual_computation` |
//! | a sharding constraint | the `@Sharding` custom call | `sdy.sharding_constraint` |
//!
//! JAX emits Shardy by default and compiles with `use_shardy_partitioner`; XLA prints a
//! deprecation warning for every GSPMD compile. Debian's MLIR has no `sdy` dialect, so the
//! operations are generic (`"sdy.mesh"() {mesh = #sdy.mesh<...>, sym_name = "mesh"}`) and the
//! attributes opaque, printed as JAX prints them; XLA's plugin parses them into the real dialect.
//! Meshes are emitted as symbols (`@mesh`, `@mesh_1`, ...), as JAX's `sdy-lift-inlined-meshes`
//! leaves them.
//!
//! A module must be compiled with the partitioner it was emitted for
//! ([`crate::EmittedModule::partitioner`]): XLA falls back to GSPMD, with a warning, when a
//! Shardy compile meets `mhlo.sharding`.

use std::cell::RefCell;
use std::fmt;
use std::str::FromStr;

use tessera_sharding::NamedSharding;
use tessera_sharding::sdy::SdySharding;

use crate::context::LowerError;
use crate::emit::{Body, quote};

/// The environment variable that picks the partitioner: `shardy` or `gspmd`.
pub const PARTITIONER_ENV: &str = "TESSERA_PARTITIONER";

/// Which of XLA's SPMD partitioners a module is emitted and compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Partitioner {
    /// Shardy: `sdy` annotations, compiled with `use_shardy_partitioner` (JAX's default).
    Shardy,
    /// GSPMD: `mhlo.sharding` annotations and custom calls.
    Gspmd,
}

impl Partitioner {
    /// The partitioner when [`PARTITIONER_ENV`] is unset.
    pub const BUILT_IN: Partitioner = Partitioner::Shardy;

    /// The partitioner to lower `programs` for on `devices` devices: `self`, except that
    /// programs holding host callbacks on several devices are lowered for GSPMD. A callback
    /// runs as JAX's does only with a maximal sharding on the first device, and XLA's Shardy
    /// import keeps a custom call's sharding only for JAX's own callback targets, so under Shardy
    /// a side-effecting callback is refused by the partitioner and a pure one called by every
    /// device (see `lower/callback.rs`).
    pub fn for_callbacks<'a>(
        self,
        devices: usize,
        programs: impl IntoIterator<Item = &'a tessera_ir::ClosedJaxpr>,
    ) -> Partitioner {
        let callbacks = programs
            .into_iter()
            .any(|p| tessera_ir::prim::jaxpr_has_callbacks(&p.jaxpr));
        match devices > 1 && callbacks {
            true => Partitioner::Gspmd,
            false => self,
        }
    }

    /// Both, in a fixed order (for tests that run every program both ways).
    pub const ALL: [Partitioner; 2] = [Partitioner::Shardy, Partitioner::Gspmd];

    /// `shardy` or `gspmd`.
    pub fn name(self) -> &'static str {
        match self {
            Partitioner::Shardy => "shardy",
            Partitioner::Gspmd => "gspmd",
        }
    }

    /// Whether XLA is to be asked for Shardy (`use_shardy_partitioner`).
    pub fn is_shardy(self) -> bool {
        self == Partitioner::Shardy
    }

    /// [`PARTITIONER_ENV`] if set, else [`Partitioner::BUILT_IN`]; an unknown value is an error
    /// naming it.
    pub fn from_env() -> Result<Partitioner, LowerError> {
        match std::env::var(PARTITIONER_ENV) {
            Ok(value) if !value.trim().is_empty() => value.parse(),
            _ => Ok(Partitioner::BUILT_IN),
        }
    }
}

/// [`Partitioner::from_env`], with [`Partitioner::BUILT_IN`] for an unknown value (which the
/// `tessera` program refuses before it lowers anything), as JAX reads
/// `JAX_USE_SHARDY_PARTITIONER` into its default.
impl Default for Partitioner {
    fn default() -> Self {
        Partitioner::from_env().unwrap_or(Partitioner::BUILT_IN)
    }
}

impl FromStr for Partitioner {
    type Err = LowerError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "shardy" | "sdy" => Ok(Partitioner::Shardy),
            "gspmd" => Ok(Partitioner::Gspmd),
            _ => Err(LowerError::Partitioner(text.to_string())),
        }
    }
}

impl fmt::Display for Partitioner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What every body of one module shares: the partitioner, the partition count and the Shardy
/// meshes used so far.
#[derive(Debug)]
pub(crate) struct ModuleState {
    partitioner: Partitioner,
    num_partitions: usize,
    /// How `dot_product_attention` is lowered in this module.
    attention: std::cell::Cell<crate::lower::AttentionLowering>,
    /// `(#sdy.mesh<...> attribute, symbol name)`, in order of first use.
    meshes: RefCell<Vec<(String, String)>>,
}

impl ModuleState {
    pub(crate) fn new(partitioner: Partitioner, num_partitions: usize) -> Self {
        ModuleState {
            partitioner,
            num_partitions,
            attention: std::cell::Cell::new(Default::default()),
            meshes: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn partitioner(&self) -> Partitioner {
        self.partitioner
    }

    pub(crate) fn num_partitions(&self) -> usize {
        self.num_partitions
    }

    pub(crate) fn attention(&self) -> crate::lower::AttentionLowering {
        self.attention.get()
    }

    pub(crate) fn set_attention(&self, attention: crate::lower::AttentionLowering) {
        self.attention.set(attention);
    }

    /// The `sdy.mesh` symbol of `sharding`'s mesh, declared on first use (`mesh`, `mesh_1`, ...).
    pub(crate) fn mesh_symbol(&self, sharding: &SdySharding) -> String {
        let attr = sharding.mesh_attr();
        let mut meshes = self.meshes.borrow_mut();
        if let Some((_, name)) = meshes.iter().find(|(a, _)| *a == attr) {
            return name.clone();
        }
        let name = match meshes.len() {
            0 => "mesh".to_string(),
            n => format!("mesh_{n}"),
        };
        meshes.push((attr, name.clone()));
        name
    }

    /// The meshes to declare: `(#sdy.mesh<...>, symbol name)`.
    pub(crate) fn meshes(&self) -> Vec<(String, String)> {
        self.meshes.borrow().clone()
    }

    /// Shardy's sharding of a value of rank `rank`, its mesh given by symbol: `<@mesh, [...]>`.
    pub(crate) fn sdy_per_value(
        &self,
        sharding: &NamedSharding,
        rank: usize,
    ) -> Result<String, LowerError> {
        Ok(self.sdy_ref(&sharding.to_sdy_sharding(rank)?))
    }

    /// `sdy` with its mesh given by symbol: `<@mesh, [...]>`.
    pub(crate) fn sdy_ref(&self, sdy: &SdySharding) -> String {
        sdy.referring_to(&self.mesh_symbol(sdy))
    }

    /// The attribute (name and value) that annotates a function argument or result of rank
    /// `rank` with `sharding`: `mhlo.sharding = "..."` or `sdy.sharding = #sdy.sharding<...>`.
    pub(crate) fn value_attr(
        &self,
        sharding: &NamedSharding,
        rank: usize,
    ) -> Result<(&'static str, String), LowerError> {
        match self.partitioner {
            Partitioner::Gspmd => Ok((
                "mhlo.sharding",
                quote(&sharding.to_hlo_sharding(rank)?.to_string()),
            )),
            Partitioner::Shardy => Ok((
                "sdy.sharding",
                format!("#sdy.sharding{}", self.sdy_per_value(sharding, rank)?),
            )),
        }
    }
}

impl Body<'_, '_> {
    /// Shardy's sharding of a value of rank `rank` as a `#sdy.sharding_per_value` lists it,
    /// `<@mesh, [{"x"}, {}]>`, with the dimensions `open_dims` open (`{?}`: the partitioner may
    /// shard them further), declaring its mesh in the module.
    pub fn sdy_sharding(
        &self,
        sharding: &NamedSharding,
        rank: usize,
        open_dims: &[usize],
    ) -> Result<String, LowerError> {
        let mut sdy = sharding.to_sdy_sharding(rank)?;
        for &d in open_dims {
            let dim = sdy.dims.get_mut(d).ok_or_else(|| {
                LowerError::Build(format!(
                    "dimension {d} cannot be left open in a value of rank {rank}"
                ))
            })?;
            dim.is_open = true;
        }
        Ok(self.state().sdy_ref(&sdy))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitioner_names_parse_and_print() {
        for p in Partitioner::ALL {
            assert_eq!(p.name().parse::<Partitioner>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(
            " Shardy ".parse::<Partitioner>().unwrap(),
            Partitioner::Shardy
        );
        let err = "spmd".parse::<Partitioner>().unwrap_err().to_string();
        assert!(
            err.contains("spmd") && err.contains(PARTITIONER_ENV),
            "{err}"
        );
    }

    #[test]
    fn meshes_get_one_symbol_each() {
        use tessera_sharding::{Mesh, PartitionSpec};
        let state = ModuleState::new(Partitioner::Shardy, 8);
        let a = Mesh::auto(&[("x", 4), ("y", 2)]).unwrap();
        let b = Mesh::auto(&[("z", 8)]).unwrap();
        let s = |m: &Mesh, spec: &str| {
            NamedSharding::new(m, PartitionSpec::parse(spec).unwrap()).unwrap()
        };
        assert_eq!(
            state.value_attr(&s(&a, "P('x')"), 2).unwrap(),
            (
                "sdy.sharding",
                r#"#sdy.sharding<@mesh, [{"x"}, {}]>"#.into()
            )
        );
        assert_eq!(
            state.sdy_per_value(&s(&b, "P()"), 1).unwrap(),
            "<@mesh_1, [{}]>"
        );
        assert_eq!(
            state.sdy_per_value(&s(&a, "P(None, 'y')"), 2).unwrap(),
            r#"<@mesh, [{}, {"y"}]>"#
        );
        assert_eq!(
            state.meshes(),
            [
                (r#"#sdy.mesh<["x"=4, "y"=2]>"#.into(), "mesh".into()),
                (r#"#sdy.mesh<["z"=8]>"#.into(), "mesh_1".into())
            ]
        );
        let gspmd = ModuleState::new(Partitioner::Gspmd, 8);
        assert_eq!(
            gspmd.value_attr(&s(&a, "P('x')"), 2).unwrap(),
            (
                "mhlo.sharding",
                r#""{devices=[4,1,2]<=[8] last_tile_dim_replicate}""#.into()
            )
        );
        assert!(gspmd.meshes().is_empty());
    }
}
