//! The parser: jaxpr text to [`Jaxpr`]. Each nested jaxpr has its own name scope.

use super::lexer::{Spanned, Tok, lex};
use super::params::{PValue, build_broadcast, build_primitive};
use crate::ir::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Scalar, Var};
use crate::types::{DType, ShapedArray};
use hashbrown::HashMap;

/// The text is not a jaxpr; `line` and `col` (1-based) point at the offending token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {message}")]
pub struct ParseError {
    /// The line.
    pub line: usize,
    /// The column.
    pub col: usize,
    /// What was expected.
    pub message: String,
}

/// Parses the text of `jax.make_jaxpr(f)(...)` (constvars become invalid without values: use
/// [`parse_closed_jaxpr`] only for jaxprs without constvars).
pub fn parse_jaxpr(text: &str) -> Result<Jaxpr, ParseError> {
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
    };
    let j = p.jaxpr()?;
    p.expect_eof()?;
    Ok(j)
}

/// Parses a jaxpr without constvars into a [`ClosedJaxpr`].
pub fn parse_closed_jaxpr(text: &str) -> Result<ClosedJaxpr, ParseError> {
    let j = parse_jaxpr(text)?;
    if !j.constvars.is_empty() {
        return Err(ParseError {
            line: 1,
            col: 1,
            message: "the jaxpr has constvars but the text holds no values for them".into(),
        });
    }
    Ok(ClosedJaxpr::new(j))
}

pub(crate) struct Parser {
    toks: Vec<Spanned>,
    pos: usize,
    depth: usize,
}

/// How deeply tuples, lists and jaxprs may nest (deeper text is rejected, not a stack overflow).
const MAX_DEPTH: usize = 64;

struct Scope {
    jaxpr: Jaxpr,
    names: HashMap<String, Var>,
}

impl Scope {
    fn bind(&mut self, name: String, aval: ShapedArray, at: &Spanned) -> Result<Var, ParseError> {
        if name != "_" && self.names.contains_key(&name) {
            return Err(err_at(
                at,
                format!("`{name}` is bound twice; a jaxpr is in SSA form"),
            ));
        }
        let v = self.jaxpr.new_var(aval);
        if name != "_" {
            self.names.insert(name, v);
        }
        Ok(v)
    }
}

fn err_at(t: &Spanned, message: String) -> ParseError {
    ParseError {
        line: t.line,
        col: t.col,
        message,
    }
}

fn describe(t: &Tok) -> String {
    match t {
        Tok::Ident(s) => format!("`{s}`"),
        Tok::Num(s) => format!("number `{s}`"),
        Tok::Punct(c) => format!("`{c}`"),
        Tok::Eof => "the end of the text".into(),
    }
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.peek_at(0)
    }

    fn peek_at(&self, k: usize) -> &Tok {
        let last = self.toks.len() - 1;
        &self.toks[(self.pos + k).min(last)].tok
    }

    fn here(&self) -> Spanned {
        self.toks[self.pos.min(self.toks.len() - 1)].clone()
    }

    fn bump(&mut self) -> Spanned {
        let t = self.here();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }

    fn fail<T>(&self, expected: &str) -> Result<T, ParseError> {
        let t = self.here();
        Err(err_at(
            &t,
            format!("expected {expected}, found {}", describe(&t.tok)),
        ))
    }

    fn is_punct(&self, c: char) -> bool {
        *self.peek() == Tok::Punct(c)
    }

    fn punct(&mut self, c: char) -> Result<(), ParseError> {
        if self.is_punct(c) {
            self.bump();
            Ok(())
        } else {
            self.fail(&format!("`{c}`"))
        }
    }

    fn keyword(&mut self, k: &str) -> Result<(), ParseError> {
        if *self.peek() == Tok::Ident(k.into()) {
            self.bump();
            Ok(())
        } else {
            self.fail(&format!("`{k}`"))
        }
    }

    fn ident(&mut self, what: &str) -> Result<String, ParseError> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                self.bump();
                Ok(s)
            }
            _ => self.fail(what),
        }
    }

    fn expect_eof(&mut self) -> Result<(), ParseError> {
        if *self.peek() == Tok::Eof {
            Ok(())
        } else {
            self.fail("the end of the text")
        }
    }

    /// `{ lambda consts ; invars . let eqns in ( outs ) }`
    pub(crate) fn jaxpr(&mut self) -> Result<Jaxpr, ParseError> {
        self.punct('{')?;
        self.keyword("lambda")?;
        let mut sc = Scope {
            jaxpr: Jaxpr::default(),
            names: HashMap::new(),
        };
        while !self.is_punct(';') {
            let v = self.binder(&mut sc)?;
            sc.jaxpr.constvars.push(v);
        }
        self.punct(';')?;
        while !self.is_punct('.') {
            let v = self.binder(&mut sc)?;
            sc.jaxpr.invars.push(v);
        }
        self.punct('.')?;
        self.keyword("let")?;
        while *self.peek() != Tok::Ident("in".into()) {
            let e = self.eqn(&mut sc)?;
            sc.jaxpr.eqns.push(e);
        }
        self.keyword("in")?;
        self.punct('(')?;
        while !self.is_punct(')') {
            let a = self.atom(&sc)?;
            sc.jaxpr.outvars.push(a);
            if !self.is_punct(')') {
                self.punct(',')?;
            }
        }
        self.punct(')')?;
        self.punct('}')?;
        Ok(sc.jaxpr)
    }

    /// `name:type`
    fn binder(&mut self, sc: &mut Scope) -> Result<Var, ParseError> {
        let at = self.here();
        let name = self.ident("a variable `name:type`")?;
        self.punct(':')?;
        let aval = self.aval()?;
        sc.bind(name, aval, &at)
    }

    /// `f32[2,5]`
    fn aval(&mut self) -> Result<ShapedArray, ParseError> {
        let at = self.here();
        let dn = self.ident("a dtype such as `f32`")?;
        let dtype = DType::from_name(&dn).ok_or_else(|| {
            err_at(
                &at,
                format!(
                    "unknown dtype `{dn}`; expected bool, i8..i64, u8..u64, bf16, f16, f32 or f64"
                ),
            )
        })?;
        self.punct('[')?;
        let mut shape = Vec::new();
        while !self.is_punct(']') {
            let t = self.here();
            match self.peek().clone() {
                Tok::Num(n) => {
                    self.bump();
                    shape.push(
                        n.parse::<usize>()
                            .map_err(|_| err_at(&t, format!("`{n}` is not a dimension size")))?,
                    );
                }
                _ => return self.fail("a dimension size"),
            }
            if !self.is_punct(']') {
                self.punct(',')?;
            }
        }
        self.punct(']')?;
        Ok(ShapedArray::new(dtype, &shape))
    }

    fn is_binder_start(&self) -> bool {
        matches!(self.peek(), Tok::Ident(_)) && *self.peek_at(1) == Tok::Punct(':')
    }

    /// `outs = prim[params] args`
    fn eqn(&mut self, sc: &mut Scope) -> Result<Eqn, ParseError> {
        let mut outs = Vec::new();
        while !self.is_punct('=') {
            if !self.is_binder_start() {
                return self.fail("an equation `name:type = primitive operands` or `in`");
            }
            let at = self.here();
            let name = self.ident("a variable")?;
            self.punct(':')?;
            let aval = self.aval()?;
            outs.push((name, aval, at));
        }
        self.punct('=')?;
        let at = self.here();
        let prim_name = self.ident("a primitive name")?;
        let mut params = Vec::new();
        if self.is_punct('[') {
            self.bump();
            while !self.is_punct(']') {
                let key = self.ident("a param `key=value`")?;
                self.punct('=')?;
                params.push((key, self.value()?));
            }
            self.punct(']')?;
        }
        let prim = if prim_name == "broadcast_in_dim" {
            let shape = match outs.as_slice() {
                [(_, a, _)] => Some(a.shape.as_slice()),
                _ => None,
            };
            build_broadcast(params, shape)
        } else {
            build_primitive(&prim_name, params)
        };
        let prim = prim.map_err(|m| err_at(&at, m))?;
        let mut inputs = Vec::new();
        while self.is_operand_start() {
            inputs.push(self.atom(sc)?);
        }
        let mut outputs = Vec::new();
        for (name, aval, at) in outs {
            outputs.push(sc.bind(name, aval, &at)?);
        }
        Ok(Eqn {
            prim,
            inputs,
            outputs,
        })
    }

    fn is_operand_start(&self) -> bool {
        match self.peek() {
            Tok::Num(_) => true,
            Tok::Ident(s) => {
                s != "in" && *self.peek_at(1) != Tok::Punct(':')
                    || matches!(s.as_str(), "True" | "False" | "inf" | "nan")
            }
            _ => false,
        }
    }

    /// A variable name or a literal `value:type`.
    fn atom(&mut self, sc: &Scope) -> Result<Atom, ParseError> {
        let at = self.here();
        match self.peek().clone() {
            Tok::Ident(s) if *self.peek_at(1) != Tok::Punct(':') => {
                self.bump();
                let v = sc.names.get(&s).copied().ok_or_else(|| {
                    err_at(
                        &at,
                        format!("`{s}` is not defined; every variable is bound before its use"),
                    )
                })?;
                Ok(Atom::Var(v))
            }
            Tok::Ident(s) | Tok::Num(s) => {
                self.bump();
                self.punct(':')?;
                let aval = self.aval()?;
                if aval.ndim() != 0 {
                    return Err(err_at(
                        &at,
                        "a literal must have a rank-0 type like `f32[]`".into(),
                    ));
                }
                let value = literal_value(&s, aval.dtype)
                    .ok_or_else(|| err_at(&at, format!("`{s}` is not a {} literal", aval.dtype)))?;
                Ok(Atom::Lit(Literal {
                    value,
                    aval: aval.weak(true),
                }))
            }
            _ => self.fail("an operand"),
        }
    }

    /// A param value: number, name, `np.int64(3)`, tuple, list or nested jaxpr.
    fn value(&mut self) -> Result<PValue, ParseError> {
        if self.depth >= MAX_DEPTH {
            return self.fail(&format!("at most {MAX_DEPTH} levels of nesting"));
        }
        self.depth += 1;
        let v = self.value_inner();
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self) -> Result<PValue, ParseError> {
        let at = self.here();
        match self.peek().clone() {
            Tok::Num(n) => {
                self.bump();
                number(&n).ok_or_else(|| err_at(&at, format!("`{n}` is not a number")))
            }
            Tok::Ident(s) => {
                self.bump();
                if self.is_punct('.') {
                    self.bump();
                    let attr = self.ident("a name after `.`")?;
                    if !self.is_punct('(') {
                        return Ok(PValue::Name(format!("{s}.{attr}")));
                    }
                    self.punct('(')?;
                    let inner = self.value()?;
                    self.punct(')')?;
                    return Ok(PValue::Call(format!("{s}.{attr}"), Box::new(inner)));
                }
                if self.is_punct('(') {
                    self.bump();
                    let mut fields = Vec::new();
                    while !self.is_punct(')') {
                        let key = self.ident("a field `name=value`")?;
                        self.punct('=')?;
                        fields.push((key, self.value()?));
                        if !self.is_punct(')') {
                            self.punct(',')?;
                        }
                    }
                    self.punct(')')?;
                    return Ok(PValue::Struct(s, fields));
                }
                Ok(PValue::Name(s))
            }
            Tok::Punct(c @ ('(' | '[')) => {
                self.bump();
                let close = if c == '(' { ')' } else { ']' };
                let mut items = Vec::new();
                while !self.is_punct(close) {
                    items.push(self.value()?);
                    if !self.is_punct(close) {
                        self.punct(',')?;
                    }
                }
                self.punct(close)?;
                Ok(if c == '(' {
                    PValue::Tuple(items)
                } else {
                    PValue::List(items)
                })
            }
            Tok::Punct('{') => Ok(PValue::Jaxpr(Box::new(self.jaxpr()?))),
            _ => self.fail("a param value"),
        }
    }
}

fn number(n: &str) -> Option<PValue> {
    if let Ok(i) = n.parse::<i64>() {
        return Some(PValue::Int(i));
    }
    n.parse::<f64>().ok().map(PValue::Float)
}

fn literal_value(s: &str, dtype: DType) -> Option<Scalar> {
    match (s, dtype) {
        ("True", DType::Bool) => Some(Scalar::Bool(true)),
        ("False", DType::Bool) => Some(Scalar::Bool(false)),
        (_, DType::Bool) => None,
        (_, d) if d.is_float() => s.parse::<f64>().ok().map(Scalar::Float),
        _ => s.parse::<i64>().ok().map(Scalar::Int),
    }
}
