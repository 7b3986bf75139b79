//! The program's data model, whose parts refer to one another: equations ([`jaxpr`]) hold a
//! primitive ([`prim`], with its shape rule) and parameters ([`params`]), parameters hold
//! nested programs, and shape rules read them; [`mod@print`] shows all three (messages of the
//! parameters and rules print them). What reads a program from outside (the parser, the
//! verifier, the rewrites) depends on this folder, never the other way.

pub mod jaxpr;
pub mod params;
pub mod prim;
pub mod print;
pub(crate) mod shared;
