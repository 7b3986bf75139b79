//! `UNSPECIFIED` result shardings: XLA chooses the layout of a result (JAX's `jit` without
//! `out_shardings`, compiled with `allow_spmd_sharding_propagation_to_output`), and Tessera
//! reads the choice back from the compiled executable (`get_gspmd_shardings_from_executable`)
//! so the returned arrays are labelled with the layout their buffers really have.
//!
//! [`Jit::with_unspecified_outputs`] marks results; the sharding given for them at
//! [`Jit::new`] is only a placeholder on the program's mesh. Such a result carries no
//! annotation in the module, and after compiling, [`Compiled::output_shardings`] holds XLA's
//! choice for it, put on the program's mesh. Donation never targets an unspecified result (its
//! layout is unknown until compiled).

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

    /// Per result, whether XLA chooses its sharding.
    pub fn unspecified_outputs(&self) -> &[bool] {
        &self.unspecified
    }
}

impl Compiled {
    /// Replaces the placeholder sharding of each unspecified result by the one XLA chose.
    pub(super) fn adopt_chosen_output_shardings(&mut self) -> Result<(), JitError> {
        if !self.jit.unspecified.contains(&true) {
            return Ok(());
        }
        let chosen = self.compiled_output_shardings()?;
        if chosen.len() != self.jit.out_shardings.len() {
            return Err(JitError::Convert(format!(
                "the executable reports {} output shardings for {} results",
                chosen.len(),
                self.jit.out_shardings.len()
            )));
        }
        for (k, sharding) in chosen.into_iter().enumerate() {
            if self.jit.unspecified[k] {
                self.jit.out_shardings[k] = sharding;
            }
        }
        Ok(())
    }
}
