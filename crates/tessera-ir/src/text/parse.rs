//! A recursive-descent parser for jaxpr text. Errors carry the line and column.

use std::collections::HashMap;

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
use crate::params::{ParamValue, Params};
use crate::prim::Prim;

/// Parses the text of a closed jaxpr (no constants may be bound: JAX prints constvars' values
/// nowhere, so a jaxpr with constvars parses with zero-filled constants).
pub fn parse_closed(text: &str) -> Result<ClosedJaxpr> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
    };
    let closed = p.closed()?;
    p.skip_ws();
    if p.pos < p.chars.len() {
        return Err(p.error("unexpected text after the jaxpr"));
    }
    Ok(closed)
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

const MAX_DEPTH: usize = 64;

impl Parser {
    fn error(&self, message: &str) -> IrError {
        self.error_at(self.pos, message)
    }

    /// An error pointing at character `pos`.
    fn error_at(&self, pos: usize, message: &str) -> IrError {
        let before = &self.chars[..pos.min(self.chars.len())];
        let line = before.iter().filter(|&&c| c == '\n').count() + 1;
        let column = before.iter().rev().take_while(|&&c| c != '\n').count() + 1;
        let found: String = self.chars[self.pos.min(self.chars.len())..]
            .iter()
            .take(12)
            .collect();
        IrError::Parse {
            line,
            column,
            message: format!("{message} (found `{found}`)"),
        }
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    /// Skips spaces and tabs but not newlines.
    fn skip_blank(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\r')) {
            self.pos += 1;
        }
    }

    fn eat(&mut self, s: &str) -> bool {
        self.skip_ws();
        let n = s.chars().count();
        if self.chars.len() >= self.pos + n
            && self.chars[self.pos..self.pos + n]
                .iter()
                .copied()
                .eq(s.chars())
        {
            self.pos += n;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, s: &str) -> Result<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{s}`")))
        }
    }

    fn word(&mut self) -> String {
        self.skip_ws();
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.')
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// A primitive name: letters, digits, `_` and `-` (`scatter-add`).
    fn prim_word(&mut self) -> String {
        self.skip_ws();
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-')
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// Whether the text ahead is the keyword `in` followed by `(` (the end of a jaxpr's body,
    /// possibly on the same line as the last equation).
    fn at_in_keyword(&self) -> bool {
        let mut i = self.pos;
        let chars = &self.chars;
        if chars.get(i) != Some(&'i') || chars.get(i + 1) != Some(&'n') {
            return false;
        }
        i += 2;
        if !chars.get(i).is_some_and(|c| c.is_whitespace() || *c == '(') {
            return false;
        }
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        chars.get(i) == Some(&'(')
    }

    fn closed(&mut self) -> Result<ClosedJaxpr> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("jaxprs nested too deeply"));
        }
        self.expect("{")?;
        if self.word() != "lambda" {
            return Err(self.error("expected `lambda`"));
        }
        let mut jaxpr = Jaxpr::default();
        let mut names: HashMap<String, Var> = HashMap::new();
        while !self.eat(";") {
            let v = self.binder(&mut jaxpr, &mut names)?;
            jaxpr.constvars.push(v);
        }
        while !self.eat(".") {
            let v = self.binder(&mut jaxpr, &mut names)?;
            jaxpr.invars.push(v);
        }
        if self.word() != "let" {
            return Err(self.error("expected `let`"));
        }
        loop {
            self.skip_ws();
            let save = self.pos;
            if self.word() == "in" {
                break;
            }
            self.pos = save;
            let eqn = self.eqn(&mut jaxpr, &mut names)?;
            jaxpr.eqns.push(eqn);
        }
        self.expect("(")?;
        while !self.eat(")") {
            let atom = self.atom(&names, true)?;
            jaxpr.outvars.push(atom);
            self.eat(",");
        }
        self.expect("}")?;
        self.depth -= 1;
        let consts = jaxpr
            .constvars
            .iter()
            .map(|&v| crate::array::Array::zeros(jaxpr.aval(v)))
            .collect();
        Ok(ClosedJaxpr { jaxpr, consts })
    }

    fn binder(&mut self, jaxpr: &mut Jaxpr, names: &mut HashMap<String, Var>) -> Result<Var> {
        let name = self.word();
        if name.is_empty() {
            return Err(self.error("expected a variable binder `name:type`"));
        }
        self.expect(":")?;
        let aval = self.aval()?;
        let var = jaxpr.new_var(aval);
        if name != "_" && names.insert(name.clone(), var).is_some() {
            return Err(self.error(&format!("variable `{name}` is bound twice")));
        }
        Ok(var)
    }

    fn aval(&mut self) -> Result<ShapedArray> {
        let dtype_name = self.word();
        let dtype = DType::parse(&dtype_name)
            .ok_or_else(|| self.error(&format!("unknown dtype `{dtype_name}`")))?;
        self.expect("[")?;
        let mut shape = Vec::new();
        while !self.eat("]") {
            let d = self.integer()?;
            if !(0..=1 << 40).contains(&d) {
                return Err(self.error("dimension out of range"));
            }
            shape.push(d);
            self.eat(",");
        }
        let mut aval = ShapedArray::new(dtype, &shape);
        // `{V:x,y}` right after the shape: the manual mesh axes a value inside shard_map varies
        // over. Whitespace is not skipped first: a newline here ends an equation.
        let marker: Vec<char> = "{V:".chars().collect();
        if self.chars[self.pos..].starts_with(&marker) {
            self.pos += marker.len();
            while !self.eat("}") {
                let axis = self.word();
                if axis.is_empty() {
                    return Err(self.error("expected a mesh axis name in `{V:...}`"));
                }
                aval.vma.insert(axis);
                self.eat(",");
            }
        }
        Ok(aval)
    }

    fn integer(&mut self) -> Result<i64> {
        self.skip_ws();
        let start = self.pos;
        if self.peek() == Some('-') {
            self.pos += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        text.parse().map_err(|_| self.error("expected an integer"))
    }

    fn eqn(&mut self, jaxpr: &mut Jaxpr, names: &mut HashMap<String, Var>) -> Result<Eqn> {
        let mut pending = Vec::new();
        while !self.eat("=") {
            let name = self.word();
            if name.is_empty() {
                return Err(self.error("expected an equation `outputs = primitive inputs`"));
            }
            self.expect(":")?;
            pending.push((name, self.aval()?));
        }
        self.skip_ws();
        let prim_at = self.pos;
        let prim_name = self.prim_word();
        let prim =
            Prim::from_name(&prim_name).map_err(|e| self.error_at(prim_at, &e.to_string()))?;
        let params = if self.peek() == Some('[') {
            self.params()?
        } else {
            Params::new()
        };
        let mut inputs = Vec::new();
        loop {
            self.skip_blank();
            if matches!(self.peek(), None | Some('\n')) || self.at_in_keyword() {
                break;
            }
            inputs.push(self.atom(names, false)?);
        }
        let mut outputs = Vec::new();
        for (name, aval) in pending {
            let var = jaxpr.new_var(aval);
            if name != "_" && names.insert(name.clone(), var).is_some() {
                return Err(self.error(&format!("variable `{name}` is bound twice")));
            }
            outputs.push(var);
        }
        Ok(Eqn {
            prim,
            params,
            inputs,
            outputs,
        })
    }

    fn atom(&mut self, names: &HashMap<String, Var>, in_tuple: bool) -> Result<Atom> {
        self.skip_ws();
        let start = self.pos;
        while self.peek().is_some_and(|c| {
            !c.is_whitespace() && c != ':' && !(in_tuple && (c == ',' || c == ')'))
        }) {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        if self.peek() == Some(':') {
            self.pos += 1;
            let aval = self.aval()?;
            let value = match text.as_str() {
                "True" => 1.0,
                "False" => 0.0,
                other => other
                    .parse::<f64>()
                    .map_err(|_| self.error(&format!("bad literal `{other}`")))?,
            };
            if aval.rank() != 0 {
                return Err(self.error("literals must be scalars"));
            }
            return Ok(Atom::Lit(Literal {
                value: aval.dtype.round(value),
                aval,
            }));
        }
        names
            .get(&text)
            .map(|&v| Atom::Var(v))
            .ok_or_else(|| self.error_at(start, &format!("unknown variable `{text}`")))
    }

    fn params(&mut self) -> Result<Params> {
        self.expect("[")?;
        let mut params = Params::new();
        while !self.eat("]") {
            let key = self.word();
            if key.is_empty() {
                return Err(self.error("expected `name=value`"));
            }
            self.expect("=")?;
            let value = self.value()?;
            params.0.push((key, value));
        }
        Ok(params)
    }

    fn value(&mut self) -> Result<ParamValue> {
        self.skip_ws();
        match self.peek() {
            Some('(') => self.sequence('(', ')').map(ParamValue::Tuple),
            Some('[') => self.sequence('[', ']').map(ParamValue::List),
            Some('{') => self.closed().map(|j| ParamValue::Jaxpr(Box::new(j))),
            Some(c) if c.is_ascii_digit() || c == '-' => self.number(),
            Some(_) => {
                let word = self.word();
                if word.is_empty() {
                    return Err(self.error("expected a parameter value"));
                }
                if word == "np.int64" || word == "np.int32" {
                    self.expect("(")?;
                    let v = self.integer()?;
                    self.expect(")")?;
                    return Ok(ParamValue::NpInt(v));
                }
                match word.as_str() {
                    "True" => Ok(ParamValue::Bool(true)),
                    "False" => Ok(ParamValue::Bool(false)),
                    _ if self.peek() == Some('(') => self.record(word),
                    _ => Ok(ParamValue::Name(word)),
                }
            }
            None => Err(self.error("unexpected end of text in parameters")),
        }
    }

    /// `Name(key=value, ...)`: a record.
    fn record(&mut self, name: String) -> Result<ParamValue> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("parameters nested too deeply"));
        }
        self.expect("(")?;
        let mut fields = Vec::new();
        while !self.eat(")") {
            let key = self.word();
            if key.is_empty() {
                return Err(self.error("expected `key=value` in a record"));
            }
            self.expect("=")?;
            fields.push((key, self.value()?));
            if !self.eat(",") {
                self.expect(")")?;
                break;
            }
        }
        self.depth -= 1;
        Ok(ParamValue::Record(name, fields))
    }

    fn sequence(&mut self, open: char, close: char) -> Result<Vec<ParamValue>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("parameters nested too deeply"));
        }
        self.expect(&open.to_string())?;
        let mut items = Vec::new();
        while !self.eat(&close.to_string()) {
            items.push(self.value()?);
            if !self.eat(",") {
                self.expect(&close.to_string())?;
                break;
            }
        }
        self.depth -= 1;
        Ok(items)
    }

    fn number(&mut self) -> Result<ParamValue> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '+' | '.'))
        {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        if let Ok(v) = text.parse::<i64>() {
            return Ok(ParamValue::Int(v));
        }
        text.parse::<f64>()
            .map(|v| ParamValue::Float(v, text.clone()))
            .map_err(|_| self.error(&format!("bad number `{text}`")))
    }
}
