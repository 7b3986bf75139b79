//! Shardings XLA chooses: `UNSPECIFIED` results (JAX's `jit` without `out_shardings`, compiled
//! with `allow_spmd_sharding_propagation_to_output`) and `AUTO` arguments (compiled with
//! `allow_spmd_sharding_propagation_to_parameters`: XLA's sharding propagation picks the
//! layout). Tessera reads the choices back from the compiled executable (JAX's
//! `get_gspmd_shardings_from_executable`), so returned arrays are labelled with the layout
//! their buffers really have, and arguments are checked against the layout XLA expects.
//!
//! [`Jit::with_unspecified_outputs`] and [`Jit::with_auto_inputs`] mark them; the sharding
//! given for them at [`Jit::new`] is only a placeholder on the program's mesh. They carry no
//! annotation in the module; after compiling, [`Compiled::output_shardings`] and
//! [`Compiled::input_shardings`] hold XLA's choices, put on the program's mesh (an argument is
//! moved there with `Array::reshard`, as with JAX's `compiled.input_shardings`). Donation never
//! involves them (their layouts are unknown until compiled). XLA's auto-sharding search
//! (`use_auto_spmd_partitioning`) is not used: the choice is sharding propagation's.

use tessera_sharding::NamedSharding;

use super::{Compiled, Jit, JitError};

impl Jit {
    /// The same program letting XLA choose the shardings of results `outputs` (JAX's
    /// `UNSPECIFIED`); read them after compiling with [`Compiled::output_shardings`]. A result
    /// already receiving a donated argument is refused.
    pub fn with_unspecified_outputs(mut self, outputs: &[usize]) -> Result<Jit, JitError> {
        for &k in outputs {
            if k >= self.unspecified.len() {
                return Err(JitError::Convert(format!(
                    "with_unspecified_outputs names result {k}, but the program returns {}",
                    self.unspecified.len()
                )));
            }
            if let Some(&(arg, _)) = self.donated.iter().find(|&&(_, o)| o == k) {
                return Err(JitError::Convert(format!(
                    "result {k} receives donated argument {arg}, so its sharding must be given; \
                     leave it specified or donate nothing to it"
                )));
            }
            self.unspecified[k] = true;
        }
        Ok(self)
    }

    /// The same program letting XLA choose the shardings of arguments `inputs` (JAX's `AUTO`);
    /// read them after compiling with [`Compiled::input_shardings`] and move arguments there.
    /// A donated argument is refused.
    pub fn with_auto_inputs(mut self, inputs: &[usize]) -> Result<Jit, JitError> {
        for &k in inputs {
            if k >= self.auto_inputs.len() {
                return Err(JitError::Convert(format!(
                    "with_auto_inputs names argument {k}, but the program takes {}",
                    self.auto_inputs.len()
                )));
            }
            if self.donated.iter().any(|&(a, _)| a == k) {
                return Err(JitError::Convert(format!(
                    "argument {k} is donated, so its sharding must be given; leave it specified \
                     or do not donate it"
                )));
            }
            self.auto_inputs[k] = true;
        }
        Ok(self)
    }

    /// The same program taking arguments `inputs` laid out as they come (JAX's `UNSPECIFIED`
    /// input shardings): lowered as it is, such an argument is replicated over its mesh (JAX's
    /// default); called through [`super::cache::JitCache::call`], it takes the sharding of the
    /// array passed, one executable per layout. A donated or `AUTO` argument is refused.
    pub fn with_unspecified_inputs(mut self, inputs: &[usize]) -> Result<Jit, JitError> {
        for &k in inputs {
            let Some(given) = self.in_shardings.get(k) else {
                return Err(JitError::Convert(format!(
                    "with_unspecified_inputs names argument {k}, but the program takes {}",
                    self.in_shardings.len()
                )));
            };
            if self.donated.iter().any(|&(a, _)| a == k) || self.auto_inputs[k] {
                return Err(JitError::Convert(format!(
                    "argument {k} is donated or left to XLA (AUTO), so it cannot also take the \
                     layout of the array passed; leave it specified"
                )));
            }
            let replicated = given
                .clone()
                .with_spec(tessera_sharding::PartitionSpec::replicated())
                .map_err(|e| JitError::Convert(e.to_string()))?;
            self.in_shardings[k] = replicated;
            self.unspecified_inputs[k] = true;
        }
        Ok(self)
    }

    /// Per argument, whether it takes the sharding of the array passed.
    pub fn unspecified_inputs(&self) -> &[bool] {
        &self.unspecified_inputs
    }

    /// The same program with each unspecified input's sharding that of the array passed for
    /// it (`args`, one per argument).
    pub fn specialized_to(&self, args: &[&tessera_pjrt::Array]) -> Result<Jit, JitError> {
        if args.len() != self.in_shardings.len() {
            return Err(JitError::Convert(format!(
                "the program takes {} arguments, {} were given",
                self.in_shardings.len(),
                args.len()
            )));
        }
        let mut jit = self.clone();
        for (k, arg) in args.iter().enumerate() {
            if self.unspecified_inputs[k] {
                jit.in_shardings[k] = arg.sharding().clone();
            }
        }
        Ok(jit)
    }

    /// Per argument, whether XLA chooses its sharding.
    pub fn auto_inputs(&self) -> &[bool] {
        &self.auto_inputs
    }

    /// Per result, whether XLA chooses its sharding.
    pub fn unspecified_outputs(&self) -> &[bool] {
        &self.unspecified
    }
}

impl Compiled {
    /// Replaces the placeholder sharding of each `AUTO` argument and `UNSPECIFIED` result by
    /// the one XLA chose.
    pub(super) fn adopt_chosen_shardings(&mut self) -> Result<(), JitError> {
        if self.jit.unspecified.contains(&true) {
            let chosen = self.compiled_output_shardings()?;
            adopt(
                &mut self.jit.out_shardings,
                &self.jit.unspecified,
                chosen,
                "output",
            )?;
        }
        if self.jit.auto_inputs.contains(&true) {
            let chosen = self.compiled_input_shardings()?;
            adopt(
                &mut self.jit.in_shardings,
                &self.jit.auto_inputs,
                chosen,
                "parameter",
            )?;
        }
        Ok(())
    }
}

/// Puts `chosen[k]` into `shardings[k]` where `open[k]`.
fn adopt(
    shardings: &mut [NamedSharding],
    open: &[bool],
    chosen: Vec<NamedSharding>,
    what: &str,
) -> Result<(), JitError> {
    if chosen.len() != shardings.len() {
        return Err(JitError::Convert(format!(
            "the executable reports {} {what} shardings for {} values",
            chosen.len(),
            shardings.len()
        )));
    }
    for (k, sharding) in chosen.into_iter().enumerate() {
        if open[k] {
            shardings[k] = sharding;
        }
    }
    Ok(())
}
