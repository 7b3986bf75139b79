//! Equation parameters as JAX prints them: an ordered list of `name=value` pairs whose values are
//! small trees (integers, `np.int64(..)`, floats, names, tuples, lists, nested jaxprs). Keeping
//! them as printed makes print → parse → print exact; typed accessors read them for the rules.
//!
//! Each family of primitives reads its parameters into one typed value (`StructuralParams`,
//! `ReductionParams`, `GatherParams`, ...), checking every field. [`Params::typed`] keeps that
//! value with the parameters once read (the shape rule reads it when the equation is built or
//! parsed), so the interpreter, the derivative and batching rules and the lowering read the
//! fields of the same value instead of parsing the printed form again.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::{Arc, RwLock};

use crate::dtype::DType;
use crate::error::IrError;
use crate::program::jaxpr::ClosedJaxpr;

/// One parameter value.
#[derive(Debug, Clone, PartialEq)]
pub enum ParamValue {
    /// An integer: `2`.
    Int(i64),
    /// A numpy integer: `np.int64(0)`.
    NpInt(i64),
    /// A float, with the text it was written as (so it prints back the same).
    Float(f64, String),
    /// `True` / `False`.
    Bool(bool),
    /// A bare name: `float32`, `None`, `tril`.
    Name(String),
    /// A tuple: `(1, 0)`, `(0,)`, `()`.
    Tuple(Vec<ParamValue>),
    /// A list: `[1]`, `[]`.
    List(Vec<ParamValue>),
    /// A quoted string: `'data'` (a mesh axis name in a sharding).
    Str(String),
    /// A set: `{}`, `{0, 1}` (as in `frozenset({})`).
    Set(Vec<ParamValue>),
    /// A nested jaxpr: `{ lambda ; ... }`.
    Jaxpr(Box<ClosedJaxpr>),
    /// A named record: `GatherDimensionNumbers(offset_dims=(1,), ...)`. A field's key is its
    /// keyword; an empty key is a positional argument (`P('data', None)`), and a quoted key a
    /// mapping entry (`Mesh('data': 4, ...)`, kept with its quotes).
    Record(String, Vec<(String, ParamValue)>),
}

impl ParamValue {
    /// A tuple of integers.
    pub fn ints(values: &[i64]) -> ParamValue {
        ParamValue::Tuple(values.iter().map(|&v| ParamValue::Int(v)).collect())
    }

    /// The integer, if this is one (plain or numpy).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            ParamValue::Int(v) | ParamValue::NpInt(v) => Some(*v),
            _ => None,
        }
    }

    /// The elements of a tuple or list.
    pub fn as_seq(&self) -> Option<&[ParamValue]> {
        match self {
            ParamValue::Tuple(v) | ParamValue::List(v) => Some(v),
            _ => None,
        }
    }

    /// A sequence of integers.
    pub fn as_ints(&self) -> Option<Vec<i64>> {
        self.as_seq()?.iter().map(ParamValue::as_int).collect()
    }

    /// A field of a record.
    pub fn field(&self, name: &str) -> Option<&ParamValue> {
        match self {
            ParamValue::Record(_, fields) => fields.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The text of a quoted string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            ParamValue::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A record's positional arguments, in order.
    pub fn positional(&self) -> Vec<&ParamValue> {
        match self {
            ParamValue::Record(_, fields) => fields
                .iter()
                .filter(|(k, _)| k.is_empty())
                .map(|(_, v)| v)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// A record's mapping entries (`'key': value`), with the key unquoted.
    pub fn entries(&self) -> Vec<(&str, &ParamValue)> {
        match self {
            ParamValue::Record(_, fields) => fields
                .iter()
                .filter_map(|(k, v)| {
                    let key = k.strip_prefix('\'')?.strip_suffix('\'')?;
                    Some((key, v))
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The nested jaxprs this value holds (in tuples, lists, sets and records too), in order.
    pub fn jaxprs(&self) -> Vec<&ClosedJaxpr> {
        let mut out = Vec::new();
        self.collect_jaxprs(&mut out);
        out
    }

    /// Calls `f` on each nested jaxpr this value holds (in tuples, lists, sets and records
    /// too), in order, to rewrite it in place; `f` recurses itself where it should.
    pub fn for_each_jaxpr_mut(&mut self, f: &mut impl FnMut(&mut ClosedJaxpr)) {
        match self {
            ParamValue::Jaxpr(j) => f(j),
            ParamValue::Tuple(items) | ParamValue::List(items) | ParamValue::Set(items) => {
                items.iter_mut().for_each(|v| v.for_each_jaxpr_mut(f));
            }
            ParamValue::Record(_, fields) => {
                fields.iter_mut().for_each(|(_, v)| v.for_each_jaxpr_mut(f));
            }
            ParamValue::Str(_)
            | ParamValue::Int(_)
            | ParamValue::NpInt(_)
            | ParamValue::Float(..)
            | ParamValue::Bool(_)
            | ParamValue::Name(_) => {}
        }
    }

    fn collect_jaxprs<'a>(&'a self, out: &mut Vec<&'a ClosedJaxpr>) {
        match self {
            ParamValue::Jaxpr(j) => out.push(j),
            ParamValue::Tuple(items) | ParamValue::List(items) | ParamValue::Set(items) => {
                items.iter().for_each(|v| v.collect_jaxprs(out));
            }
            ParamValue::Record(_, fields) => fields.iter().for_each(|(_, v)| v.collect_jaxprs(out)),
            ParamValue::Str(_)
            | ParamValue::Int(_)
            | ParamValue::NpInt(_)
            | ParamValue::Float(..)
            | ParamValue::Bool(_)
            | ParamValue::Name(_) => {}
        }
    }

    /// Whether this is the name `None`.
    pub fn is_none(&self) -> bool {
        matches!(self, ParamValue::Name(n) if n == "None")
    }
}

impl fmt::Display for ParamValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParamValue::Int(v) => write!(f, "{v}"),
            ParamValue::NpInt(v) => write!(f, "np.int64({v})"),
            ParamValue::Float(_, text) => f.write_str(text),
            ParamValue::Bool(b) => f.write_str(if *b { "True" } else { "False" }),
            ParamValue::Name(n) => f.write_str(n),
            ParamValue::Tuple(items) => {
                f.write_str("(")?;
                write_items(f, items)?;
                if items.len() == 1 {
                    f.write_str(",")?;
                }
                f.write_str(")")
            }
            ParamValue::List(items) => {
                f.write_str("[")?;
                write_items(f, items)?;
                f.write_str("]")
            }
            ParamValue::Str(s) => write!(f, "'{s}'"),
            ParamValue::Set(items) => {
                f.write_str("{")?;
                write_items(f, items)?;
                f.write_str("}")
            }
            ParamValue::Jaxpr(j) => write!(f, "{}", crate::program::print::print_closed(j, 0)),
            ParamValue::Record(name, fields) => {
                write!(f, "{name}(")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    match k.as_str() {
                        "" => write!(f, "{v}")?,
                        k if k.starts_with('\'') => write!(f, "{k}: {v}")?,
                        k => write!(f, "{k}={v}")?,
                    }
                }
                f.write_str(")")
            }
        }
    }
}

fn write_items(f: &mut fmt::Formatter<'_>, items: &[ParamValue]) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

/// The parameters of an equation, in print order, and the typed value its rules read (kept
/// once read, see [`Params::typed`]). Equality and printing look at the printed form only.
#[derive(Clone, Default)]
pub struct Params {
    entries: Vec<(String, ParamValue)>,
    typed: TypedSlot,
}

/// The typed value read from some parameters, with what it was read for.
struct Typed {
    /// The value's type and the context it was read in (see [`Params::typed`]).
    key: (TypeId, [usize; 2]),
    value: Box<dyn Any + Send + Sync>,
}

/// Where [`Params::typed`] keeps its value. A clone starts with the same value (it depends
/// only on the printed parameters, which they share) and keeps its own from then on; changing
/// the parameters empties it.
#[derive(Default)]
struct TypedSlot(RwLock<Option<Arc<Typed>>>);

impl TypedSlot {
    fn get(&self) -> Option<Arc<Typed>> {
        self.0.read().ok().and_then(|slot| slot.clone())
    }

    fn set(&self, typed: Typed) {
        if let Ok(mut slot) = self.0.write() {
            *slot = Some(Arc::new(typed));
        }
    }
}

impl Clone for TypedSlot {
    fn clone(&self) -> Self {
        TypedSlot(RwLock::new(self.get()))
    }
}

impl PartialEq for Params {
    fn eq(&self, other: &Params) -> bool {
        self.entries == other.entries
    }
}

impl fmt::Debug for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Params").field(&self.entries).finish()
    }
}

impl Params {
    /// No parameters.
    pub fn new() -> Self {
        Params::default()
    }

    /// Parameters from `name=value` pairs in print order.
    pub fn from_entries(entries: Vec<(String, ParamValue)>) -> Self {
        Params {
            entries,
            typed: TypedSlot::default(),
        }
    }

    /// The `name=value` pairs, in print order.
    pub fn entries(&self) -> &[(String, ParamValue)] {
        &self.entries
    }

    /// The pairs, to change (the kept typed value is dropped).
    pub fn entries_mut(&mut self) -> &mut Vec<(String, ParamValue)> {
        self.typed = TypedSlot::default();
        &mut self.entries
    }

    /// The pairs, taken out.
    pub fn into_entries(self) -> Vec<(String, ParamValue)> {
        self.entries
    }

    /// Adds one (builder style), replacing a parameter of the same name.
    pub fn with(mut self, name: &str, value: ParamValue) -> Self {
        let entries = self.entries_mut();
        match entries.iter_mut().find(|(k, _)| k == name) {
            Some((_, slot)) => *slot = value,
            None => entries.push((name.to_owned(), value)),
        }
        self
    }

    /// The typed value `read` makes of these parameters in `context` (whatever else the reading
    /// depends on, e.g. the primitive and the operand's rank). A successful reading is kept with
    /// the parameters, and later calls for the same type and context return it without reading
    /// again; a reading of another type or context replaces it (parameters copied into an
    /// equation of another rank read again, once). Errors are not kept.
    pub fn typed<T: Clone + Send + Sync + 'static>(
        &self,
        context: [usize; 2],
        read: impl FnOnce(&Params) -> Result<T, IrError>,
    ) -> Result<T, IrError> {
        let key = (TypeId::of::<T>(), context);
        if let Some(typed) = self.typed.get()
            && typed.key == key
            && let Some(value) = typed.value.downcast_ref::<T>()
        {
            return Ok(value.clone());
        }
        let value = read(self)?;
        let typed = Typed {
            key,
            value: Box::new(value.clone()),
        };
        self.typed.set(typed);
        Ok(value)
    }

    /// Whether a typed value is kept with these parameters (see [`Params::typed`]).
    pub fn holds_typed(&self) -> bool {
        self.typed.get().is_some()
    }

    /// Every nested jaxpr of the parameters, in order.
    pub fn jaxprs(&self) -> Vec<&ClosedJaxpr> {
        self.entries.iter().flat_map(|(_, v)| v.jaxprs()).collect()
    }

    /// The value of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.entries.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// A required integer.
    pub fn int(&self, prim: &str, name: &str) -> Result<i64, IrError> {
        self.get(name)
            .and_then(ParamValue::as_int)
            .ok_or_else(|| missing(prim, name, "an integer"))
    }

    /// A required tuple of integers.
    pub fn ints(&self, prim: &str, name: &str) -> Result<Vec<i64>, IrError> {
        self.get(name)
            .and_then(ParamValue::as_ints)
            .ok_or_else(|| missing(prim, name, "a tuple of integers"))
    }

    /// An optional tuple of integers (`None` or absent gives `None`).
    pub fn opt_ints(&self, prim: &str, name: &str) -> Result<Option<Vec<i64>>, IrError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(v) => v
                .as_ints()
                .map(Some)
                .ok_or_else(|| missing(prim, name, "a tuple of integers or None")),
        }
    }

    /// A required dtype (by numpy name).
    pub fn dtype(&self, prim: &str, name: &str) -> Result<DType, IrError> {
        match self.get(name) {
            Some(ParamValue::Name(n)) => {
                DType::parse(n).ok_or_else(|| missing(prim, name, "a dtype name"))
            }
            _ => Err(missing(prim, name, "a dtype name")),
        }
    }

    /// An optional dtype (`None` or absent gives `None`).
    pub fn opt_dtype(&self, prim: &str, name: &str) -> Result<Option<DType>, IrError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) if v.is_none() => Ok(None),
            Some(_) => self.dtype(prim, name).map(Some),
        }
    }

    /// A required boolean (`True`/`False`).
    pub fn bool(&self, prim: &str, name: &str) -> Result<bool, IrError> {
        match self.get(name) {
            Some(ParamValue::Bool(b)) => Ok(*b),
            _ => Err(missing(prim, name, "True or False")),
        }
    }

    /// A boolean parameter, `default` where absent; anything but `True`/`False` is an error.
    pub fn bool_or(&self, prim: &str, name: &str, default: bool) -> Result<bool, IrError> {
        match self.get(name) {
            None => Ok(default),
            Some(ParamValue::Bool(b)) => Ok(*b),
            Some(_) => Err(missing(prim, name, "True or False")),
        }
    }

    /// A required nested jaxpr.
    pub fn jaxpr(&self, prim: &str, name: &str) -> Result<&ClosedJaxpr, IrError> {
        match self.get(name) {
            Some(ParamValue::Jaxpr(j)) => Ok(j),
            _ => Err(missing(prim, name, "a jaxpr")),
        }
    }
}

fn missing(prim: &str, name: &str, what: &str) -> IrError {
    IrError::Param {
        prim: prim.to_owned(),
        param: name.to_owned(),
        expected: what.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    /// Reads `n` from the parameters, counting the readings in `count`.
    fn counted(count: &Cell<u32>) -> impl Fn(&Params) -> Result<i64, IrError> + '_ {
        move |p| {
            count.set(count.get() + 1);
            p.int("test", "n")
        }
    }

    #[test]
    fn a_typed_value_is_read_once_and_shared_by_clones() {
        let count = Cell::new(0);
        let params = Params::new().with("n", ParamValue::Int(3));
        assert!(!params.holds_typed());
        assert_eq!(params.typed([0, 2], counted(&count)).unwrap(), 3);
        assert_eq!(params.typed([0, 2], counted(&count)).unwrap(), 3);
        let copy = params.clone();
        assert_eq!(copy.typed([0, 2], counted(&count)).unwrap(), 3);
        assert_eq!(count.get(), 1);
        assert!(copy.holds_typed());
    }

    #[test]
    fn another_context_or_a_change_reads_again() {
        let count = Cell::new(0);
        let params = Params::new().with("n", ParamValue::Int(3));
        params.typed([0, 2], counted(&count)).unwrap();
        // Another context is read afresh, once, and replaces the kept value in this copy only.
        let copy = params.clone();
        copy.typed([0, 3], counted(&count)).unwrap();
        copy.typed([0, 3], counted(&count)).unwrap();
        assert_eq!(count.get(), 2);
        params.typed([0, 2], counted(&count)).unwrap();
        assert_eq!(count.get(), 2);
        // Changing a parameter drops the kept value.
        let changed = params.with("n", ParamValue::Int(4));
        assert!(!changed.holds_typed());
        assert_eq!(changed.typed([0, 2], counted(&count)).unwrap(), 4);
    }

    #[test]
    fn errors_are_not_kept() {
        let count = Cell::new(0);
        let params = Params::new().with("n", ParamValue::Name("x".into()));
        assert!(params.typed([0, 0], counted(&count)).is_err());
        assert!(params.typed([0, 0], counted(&count)).is_err());
        assert_eq!(count.get(), 2);
        assert!(!params.holds_typed());
    }
}
