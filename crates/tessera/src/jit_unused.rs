//! `keep_unused` for [`crate::jit::Jit`]: as JAX does, an argument the program never reads is
//! left out of the compiled program (the call still takes it, checks it, and passes nothing for
//! it), unless `Jit::keep_unused(true)` asks to keep every argument. A donated argument is always
//! kept: its buffers become a result's.
//!
//! "Never read" means no equation and no result names the argument; an argument read only by
//! equations whose results are dead is kept (Tessera does not run dead-code elimination first,
//! as JAX does).

use tessera_ir::{Atom, ClosedJaxpr, Jaxpr};

/// Per argument of `jaxpr`, whether an equation or a result reads it.
pub(crate) fn read_arguments(jaxpr: &Jaxpr) -> Vec<bool> {
    let mut read = std::collections::HashSet::new();
    let atoms = jaxpr
        .eqns
        .iter()
        .flat_map(|e| e.inputs.iter())
        .chain(&jaxpr.outvars);
    for atom in atoms {
        if let Atom::Var(v) = atom {
            read.insert(*v);
        }
    }
    jaxpr.invars.iter().map(|v| read.contains(v)).collect()
}

/// `program` taking only the arguments at the positions where `keep` is true, in order.
pub(crate) fn keep_arguments(program: &ClosedJaxpr, keep: &[bool]) -> ClosedJaxpr {
    let mut kept = program.clone();
    kept.jaxpr.invars = program
        .jaxpr
        .invars
        .iter()
        .zip(keep)
        .filter(|(_, k)| **k)
        .map(|(v, _)| *v)
        .collect();
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use tessera_ir::{DType, ShapedArray, trace::trace};

    #[test]
    fn an_argument_nothing_reads_is_dropped() {
        let f32x2 = ShapedArray::new(DType::F32, &[2]);
        let program = trace(&[f32x2.clone(), f32x2.clone(), f32x2], |a| {
            vec![&a[0] + 1.0, a[2].clone()]
        })
        .unwrap();
        assert_eq!(read_arguments(&program.jaxpr), [true, false, true]);
        let kept = keep_arguments(&program, &[true, false, true]);
        assert_eq!(kept.jaxpr.invars.len(), 2);
        assert_eq!(kept.jaxpr.invars[1], program.jaxpr.invars[2]);
    }
}
