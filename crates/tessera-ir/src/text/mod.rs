//! JAX's jaxpr text form: a printer that matches `jax.make_jaxpr` output and a parser that reads
//! it back (nested `jit`/`pjit` bodies included). Names are assigned at print time (`a`…`z`,
//! `ba`…), continuing through nested jaxprs as JAX does; parse errors give line and column.

mod lexer;
mod params;
mod parse;
pub(crate) mod print;

pub use params::PValue;
pub use parse::{ParseError, parse_closed_jaxpr, parse_jaxpr};
pub use print::{format_float, print_jaxpr};
