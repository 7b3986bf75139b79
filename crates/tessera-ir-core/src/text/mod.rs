//! The jaxpr text format, as `jax.make_jaxpr` prints it: a printer ([`print_closed`], which
//! lives with the program in `crate::program::print`) and a parser ([`parse_closed`]). Names
//! are assigned when printing (`a`..`z`, `ba`, `bb`, ... across nested jaxprs); the parser gives
//! each jaxpr its own scope.

mod parse;

pub use crate::program::print::{literal, print_closed, print_eqn_lines, python_float};
pub use parse::{parse_closed, parse_closed_with_consts};
