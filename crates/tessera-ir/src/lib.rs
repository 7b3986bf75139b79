//! The Tessera IR: a typed, SSA, jaxpr-like program representation with its text form, tracing,
//! transformations and a reference interpreter.
