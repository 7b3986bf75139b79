//! A recursive-descent parser for jaxpr text. Errors carry the line and column.

use std::collections::HashMap;

use crate::array::{Array, Elem, is_exact_int};
use crate::aval::{ExplicitType, ShapedArray};
use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
use crate::program::params::{ParamValue, Params};
use crate::program::prim::Prim;

/// Parses the text of a closed jaxpr without constants. JAX prints constvars' values nowhere, so
/// a program with constvars is refused here: give their values to
/// [`parse_closed_with_consts`].
pub fn parse_closed(text: &str) -> Result<ClosedJaxpr> {
    parse_closed_with_consts(text, &[])
}

/// Parses the text of a closed jaxpr whose constvars take `consts`, in order (one value of the
/// constvar's type each). Sub-jaxprs defined before the program (`let NAME = { lambda ... } in`,
/// as JAX 0.10 prints jaxprs used more than once) are inlined where `jaxpr=NAME` refers to them.
/// A nested jaxpr with constvars is refused: nothing could give their values. The program is
/// verified ([`crate::verify`]): each equation's parameters and types are checked by its
/// primitive's shape rule, so a malformed parameter is an error here, not in a later rule.
pub fn parse_closed_with_consts(text: &str, consts: &[Array]) -> Result<ClosedJaxpr> {
    let mut p = Parser {
        chars: text.chars().collect(),
        pos: 0,
        depth: 0,
        definitions: HashMap::new(),
        defined: HashMap::new(),
    };
    p.definitions()?;
    let jaxpr = p.closed()?.jaxpr;
    p.skip_ws();
    if p.pos < p.chars.len() {
        return Err(p.error("unexpected text after the jaxpr"));
    }
    let closed = with_consts(jaxpr, consts)?;
    // JAX's positional axes of psum/pmax/pmin (`axes=(0, 'i')`) become reductions first.
    let closed = crate::rewrite::desugar_positional_axes(&closed);
    // Every equation's parameters are read and checked here, once, by its shape rule.
    crate::verify(&closed)?;
    Ok(closed)
}

/// Closes `jaxpr` over `consts`, checking their number and types.
fn with_consts(jaxpr: Jaxpr, consts: &[Array]) -> Result<ClosedJaxpr> {
    let wanted: Vec<String> = jaxpr
        .constvars
        .iter()
        .map(|&v| jaxpr.aval(v).to_string())
        .collect();
    if wanted.len() != consts.len() {
        return Err(IrError::Consts(format!(
            "the program has {} constvars ({}) but {} values were given; jaxpr text carries no \
             constant values, so pass them (in order) to parse_closed_with_consts",
            wanted.len(),
            wanted.join(", "),
            consts.len()
        )));
    }
    for (k, (&v, c)) in jaxpr.constvars.iter().zip(consts).enumerate() {
        let aval = jaxpr.aval(v);
        if aval.dtype != c.dtype() || aval.shape != c.shape() {
            return Err(IrError::Consts(format!(
                "constvar {k} has type {aval} but its value is {}",
                c.aval()
            )));
        }
    }
    Ok(ClosedJaxpr {
        jaxpr,
        consts: consts.to_vec(),
    })
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
    /// Where each `let NAME = {` definition's jaxpr starts.
    definitions: HashMap<String, usize>,
    /// Definitions already parsed.
    defined: HashMap<String, ClosedJaxpr>,
}

const MAX_DEPTH: usize = 64;

/// A parameter value for an error message: its text, or `{ lambda ... }` for a jaxpr.
fn brief(value: &ParamValue) -> String {
    match value {
        ParamValue::Jaxpr(_) => "{ lambda ... }".to_owned(),
        other => {
            let text = other.to_string();
            match text.char_indices().nth(60) {
                Some((cut, _)) => format!("{}...", &text[..cut]),
                None => text,
            }
        }
    }
}

/// Whether `text` starts with the keyword `in` closing a jaxpr: `in`, whitespace, `(`.
fn is_in_keyword(text: &[char]) -> bool {
    let [first, second, rest @ ..] = text else {
        return false;
    };
    *first == 'i'
        && *second == 'n'
        && rest
            .iter()
            .find(|c| !c.is_whitespace())
            .is_some_and(|&c| c == '(')
}

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

    /// Whether the text ahead is the keyword `in` closing a jaxpr's body (possibly on the same
    /// line as the last equation). JAX names variables `a`..`z`, `ba`, ... with no exception, so
    /// its 222nd variable is `in` too: the keyword is the word `in` followed by the `(` of the
    /// results. A variable never is: a binder is followed by `:`, an operand by another operand,
    /// the end of the jaxpr's body or the next equation, none of which starts with `(`.
    fn at_in_keyword(&self) -> bool {
        is_in_keyword(&self.chars[self.pos.min(self.chars.len())..])
    }

    /// Whether the line after the newline here continues an equation's operands (JAX wraps a
    /// long operand list onto further lines): it holds only operands, so no `=` (which every
    /// equation has) and it is not the `in (...)` closing the jaxpr (an operand may be named
    /// `in`: see [`Parser::at_in_keyword`]).
    fn at_continuation(&self) -> bool {
        let rest = &self.chars[self.pos + 1..];
        let line: Vec<char> = rest.iter().copied().take_while(|&c| c != '\n').collect();
        let start = line.iter().take_while(|c| c.is_whitespace()).count();
        let text: String = line.iter().collect();
        let text = text.trim();
        !text.is_empty()
            && !text.contains('=')
            && !is_in_keyword(&line[start..])
            && !text.starts_with(['}', ']'])
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
            if self.at_in_keyword() {
                self.pos += 2;
                break;
            }
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
        if self.depth > 1 && !jaxpr.constvars.is_empty() {
            return Err(self.error(
                "a nested jaxpr has constvars, whose values jaxpr text does not carry; make them \
                 arguments of the nested jaxpr",
            ));
        }
        self.depth -= 1;
        Ok(ClosedJaxpr {
            jaxpr,
            consts: Vec::new(),
        })
    }

    /// Records the `let NAME = { lambda ... } in` definitions before the program (their text is
    /// parsed when a `jaxpr=NAME` parameter refers to them).
    fn definitions(&mut self) -> Result<()> {
        loop {
            self.skip_ws();
            let save = self.pos;
            if self.word() != "let" {
                self.pos = save;
                return Ok(());
            }
            let name = self.word();
            if name.is_empty() {
                return Err(self.error("expected a name after `let`"));
            }
            self.expect("=")?;
            self.skip_ws();
            if self.peek() != Some('{') {
                return Err(self.error("expected `{` starting the definition's jaxpr"));
            }
            self.definitions.insert(name, self.pos);
            self.skip_braces()?;
            if self.word() != "in" {
                return Err(self.error("expected `in` after a definition"));
            }
        }
    }

    /// Moves past the balanced `{ ... }` starting here.
    fn skip_braces(&mut self) -> Result<()> {
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            self.pos += 1;
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                _ => {}
            }
        }
        Err(self.error("unbalanced `{` in a definition"))
    }

    /// A parameter holding a jaxpr: inline text, or the name of a definition.
    fn jaxpr_value(&mut self) -> Result<ParamValue> {
        self.skip_ws();
        let save = self.pos;
        let name = self.word();
        let Some(&start) = self.definitions.get(&name) else {
            if !name.is_empty() && name != "None" {
                return Err(self.error_at(
                    save,
                    &format!(
                        "unknown sub-jaxpr `{name}`: no `let {name} = {{ lambda ... }} in` \
                         before the program"
                    ),
                ));
            }
            self.pos = save;
            return self.value();
        };
        if let Some(done) = self.defined.get(&name) {
            return Ok(ParamValue::Jaxpr(Box::new(done.clone())));
        }
        let back = self.pos;
        self.pos = start;
        let parsed = self.closed()?;
        self.pos = back;
        self.defined.insert(name, parsed.clone());
        Ok(ParamValue::Jaxpr(Box::new(parsed)))
    }

    fn binder(&mut self, jaxpr: &mut Jaxpr, names: &mut HashMap<String, Var>) -> Result<Var> {
        let name = self.word();
        if name.is_empty() {
            return Err(self.error("expected a variable binder `name:type`"));
        }
        self.expect(":")?;
        let (aval, todo_at) = self.maybe_todo_aval()?;
        if let Some(at) = todo_at {
            return Err(self.error_at(
                at,
                "a jaxpr's parameter cannot be pending (`Todo[...]`): only an asynchronous \
                 collective's start makes a pending value, inside the jaxpr",
            ));
        }
        let var = jaxpr.new_var(aval);
        if name != "_" && names.insert(name.clone(), var).is_some() {
            return Err(self.error(&format!("variable `{name}` is bound twice")));
        }
        Ok(var)
    }

    /// A type, or the pending type `Todo[type]` of an asynchronous start's result (JAX's
    /// `AbstractTodo`), read as the type it wraps, with where `Todo` was written.
    fn maybe_todo_aval(&mut self) -> Result<(ShapedArray, Option<usize>)> {
        self.skip_ws();
        const TODO: &str = "Todo[";
        let at = self.pos;
        let is_todo = self
            .chars
            .get(at..at + TODO.len())
            .is_some_and(|c| c.iter().copied().eq(TODO.chars()));
        if !is_todo {
            return Ok((self.aval()?, None));
        }
        self.pos += TODO.len();
        let aval = self.aval()?;
        self.expect("]")?;
        Ok((aval, Some(at)))
    }

    fn aval(&mut self) -> Result<ShapedArray> {
        let mut dtype_name = self.word();
        // A typed key: `key<fry>`.
        if dtype_name == "key" && self.peek() == Some('<') {
            while let Some(c) = self.peek() {
                self.pos += 1;
                dtype_name.push(c);
                if c == '>' {
                    break;
                }
            }
        }
        let dtype = DType::parse(&dtype_name)
            .ok_or_else(|| self.error(&format!("unknown dtype `{dtype_name}`")))?;
        // JAX's abstract token (`Tok`) has no shape.
        if dtype.is_token() {
            return Ok(ShapedArray::token());
        }
        self.expect("[")?;
        let mut shape = Vec::new();
        let mut explicit = ExplicitType::default();
        while !self.eat("]") {
            let d = self.integer()?;
            if !(0..=1 << 40).contains(&d) {
                return Err(self.error("dimension out of range"));
            }
            shape.push(d);
            // `8@pp` / `8@(pp,tp)`: the mesh axes an explicit sharding splits the dimension over.
            let axes = if self.peek() == Some('@') {
                self.pos += 1;
                self.type_axes("`@` in a type")?
            } else {
                Vec::new()
            };
            explicit.dims.push(axes);
            self.eat(",");
        }
        if explicit.dims.iter().all(Vec::is_empty) {
            explicit.dims.clear();
        }
        let mut aval = ShapedArray::new(dtype, &shape);
        // `{V:x}`, `{V:(x,y), R:z, U:w}` right after the shape: the manual mesh axes a value
        // inside shard_map varies over, its reduced and its unreduced axes. Whitespace is not
        // skipped first: a newline here ends an equation.
        if self.peek() == Some('{') && !self.at_lambda() {
            self.pos += 1;
            while !self.eat("}") {
                let tag = self.word();
                self.expect(":")?;
                let set = match tag.as_str() {
                    "V" => &mut aval.vma,
                    "R" => &mut explicit.reduced,
                    "U" => &mut explicit.unreduced,
                    other => {
                        return Err(self.error(&format!(
                            "expected `V:`, `R:` or `U:` in a type's axes, found `{other}:`"
                        )));
                    }
                };
                if !set.is_empty() {
                    return Err(self.error(&format!("`{tag}:` is given twice in one type")));
                }
                set.extend(self.type_axes(&format!("`{tag}:` in a type"))?);
                if !self.eat(",") {
                    self.expect("}")?;
                    break;
                }
            }
        }
        if !explicit.is_empty() {
            if !explicit.dims.is_empty() && explicit.dims.len() != aval.shape.len() {
                return Err(self.error("a type's explicit sharding does not fit its rank"));
            }
            aval.explicit = Some(Box::new(explicit));
        }
        Ok(aval)
    }

    /// The mesh axes in a type: one name, or `(a,b,...)`.
    fn type_axes(&mut self, what: &str) -> Result<Vec<String>> {
        let mut axes = Vec::new();
        if self.eat("(") {
            while !self.eat(")") {
                let axis = self.word();
                if axis.is_empty() {
                    return Err(self.error(&format!("expected a mesh axis name in {what}")));
                }
                axes.push(axis);
                self.eat(",");
            }
        } else {
            let axis = self.word();
            if axis.is_empty() {
                return Err(self.error(&format!("expected a mesh axis name in {what}")));
            }
            axes.push(axis);
        }
        if axes.is_empty() {
            return Err(self.error(&format!("expected a mesh axis name in {what}")));
        }
        Ok(axes)
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
        // Where a result is typed `Todo[...]` (the pending result of an asynchronous start).
        let mut todo_at = None;
        while !self.eat("=") {
            let name = self.word();
            if name.is_empty() {
                return Err(self.error("expected an equation `outputs = primitive inputs`"));
            }
            self.expect(":")?;
            let (aval, at) = self.maybe_todo_aval()?;
            todo_at = todo_at.or(at);
            pending.push((name, aval));
        }
        self.skip_ws();
        let prim_at = self.pos;
        let prim_name = self.prim_word();
        let prim =
            Prim::from_name(&prim_name).map_err(|e| self.error_at(prim_at, &e.to_string()))?;
        if matches!(
            prim,
            Prim::PureCallback | Prim::IoCallback | Prim::DebugCallback
        ) {
            return Err(self.error_at(
                prim_at,
                &format!(
                    "`{prim_name}` calls a host callback, and its closure cannot be recovered \
                     from text; trace the program again (trace::pure_callback, \
                     trace::io_callback, trace::debug_callback) instead of parsing it"
                ),
            ));
        }
        if let Some(at) = todo_at.filter(|_| !prim.is_async_start()) {
            return Err(self.error_at(
                at,
                &format!(
                    "a `Todo[...]` type is the pending result of an asynchronous collective's \
                     start, but `{prim_name}` is not one; write the plain type"
                ),
            ));
        }
        let params = if self.peek() == Some('[') {
            self.params(&prim_name)?
        } else {
            Params::new()
        };
        let mut inputs = Vec::new();
        loop {
            self.skip_blank();
            if self.peek() == Some('\n') && self.at_continuation() {
                self.skip_ws();
            }
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
            if aval.rank() != 0 {
                return Err(self.error("literals must be scalars"));
            }
            let bad = || self.error(&format!("bad literal `{text}`"));
            let dtype = aval.dtype;
            let value = match text.as_str() {
                "True" => Elem::from_int(dtype, 1),
                "False" => Elem::from_int(dtype, 0),
                // Integers exactly (an `i64` or `u64` past 2^53 keeps every digit).
                other if is_exact_int(dtype) && other.parse::<i128>().is_ok() => {
                    Elem::from_int(dtype, other.parse::<i128>().map_err(|_| bad())?)
                }
                other => Elem::from_f64(dtype, other.parse::<f64>().map_err(|_| bad())?),
            };
            return Ok(Atom::Lit(Literal { value, aval }));
        }
        names
            .get(&text)
            .map(|&v| Atom::Var(v))
            .ok_or_else(|| self.error_at(start, &format!("unknown variable `{text}`")))
    }

    /// The parameters of an equation of `prim`. Each is given once, as JAX prints them: a
    /// second `name=` (even with the same value) is an error naming it, never a silent choice.
    fn params(&mut self, prim: &str) -> Result<Params> {
        self.expect("[")?;
        let mut params = Params::new();
        while !self.eat("]") {
            self.skip_ws();
            let key_at = self.pos;
            let key = self.word();
            if key.is_empty() {
                return Err(self.error("expected `name=value`"));
            }
            self.expect("=")?;
            let value = if key.ends_with("jaxpr") {
                self.jaxpr_value()?
            } else {
                self.value()?
            };
            if let Some(first) = params.get(&key) {
                let message = format!(
                    "`{prim}` is given parameter `{key}` twice (`{key}={}`, then `{key}={}`); \
                     JAX prints each parameter once: keep the one you mean and delete the other",
                    brief(first),
                    brief(&value)
                );
                self.pos = key_at;
                return Err(self.error(&message));
            }
            params.entries_mut().push((key, value));
        }
        Ok(params)
    }

    fn value(&mut self) -> Result<ParamValue> {
        self.skip_ws();
        match self.peek() {
            Some('(') => self.sequence('(', ')').map(ParamValue::Tuple),
            Some('[') => self.sequence('[', ']').map(ParamValue::List),
            Some('{') if !self.at_lambda() => self.sequence('{', '}').map(ParamValue::Set),
            Some('{') => self.closed().map(|j| ParamValue::Jaxpr(Box::new(j))),
            Some('\'') => self.string().map(ParamValue::Str),
            Some(c) if c.is_ascii_digit() || c == '-' => self.number(),
            Some('<') => self.angle_name(),
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
                    // A type as JAX's `str_short` writes it (`float32[4,2]`, inside
                    // `ShapedArray(...)`: `precv`'s `out_shape`), kept as one name.
                    _ if self.peek() == Some('[') && DType::parse(&word).is_some() => {
                        let dims = self.sequence('[', ']')?;
                        let dims: Vec<String> = dims.iter().map(ToString::to_string).collect();
                        Ok(ParamValue::Name(format!("{word}[{}]", dims.join(","))))
                    }
                    _ => Ok(ParamValue::Name(word)),
                }
            }
            None => Err(self.error("unexpected end of text in parameters")),
        }
    }

    /// `<function f at 0x7f...>`: how JAX prints a Python callable (a custom rule), kept as a
    /// name.
    fn angle_name(&mut self) -> Result<ParamValue> {
        let start = self.pos;
        while let Some(c) = self.peek() {
            self.pos += 1;
            if c == '>' {
                return Ok(ParamValue::Name(
                    self.chars[start..self.pos].iter().collect(),
                ));
            }
            if c == '\n' {
                break;
            }
        }
        Err(self.error_at(start, "unterminated `<...>` in parameters"))
    }

    /// Whether the text at the cursor (a `{`) opens a jaxpr (`{ lambda ...`), not a set.
    fn at_lambda(&self) -> bool {
        let rest = self.chars[self.pos + 1..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take(6)
            .collect::<String>();
        rest == "lambda"
    }

    /// `'text'`: a quoted string (no escapes: JAX quotes axis names this way).
    fn string(&mut self) -> Result<String> {
        let start = self.pos;
        self.expect("'")?;
        let begin = self.pos;
        while let Some(c) = self.peek() {
            if c == '\'' {
                let text = self.chars[begin..self.pos].iter().collect();
                self.pos += 1;
                return Ok(text);
            }
            if c == '\n' {
                break;
            }
            self.pos += 1;
        }
        Err(self.error_at(start, "unterminated string in parameters"))
    }

    /// `Name(args)`: a record whose arguments are `key=value`, positional values or mapping
    /// entries `'key': value` (see [`ParamValue::Record`]).
    fn record(&mut self, name: String) -> Result<ParamValue> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("parameters nested too deeply"));
        }
        self.expect("(")?;
        let mut fields = Vec::new();
        while !self.eat(")") {
            fields.push(self.record_field()?);
            if !self.eat(",") {
                self.expect(")")?;
                break;
            }
        }
        self.depth -= 1;
        Ok(ParamValue::Record(name, fields))
    }

    fn record_field(&mut self) -> Result<(String, ParamValue)> {
        self.skip_ws();
        let start = self.pos;
        if self.peek() == Some('\'') {
            let key = self.string()?;
            if self.eat(":") {
                return Ok((format!("'{key}'"), self.value()?));
            }
            return Ok((String::new(), ParamValue::Str(key)));
        }
        let key = self.word();
        if !key.is_empty() && self.eat("=") {
            return Ok((key, self.value()?));
        }
        self.pos = start;
        Ok((String::new(), self.value()?))
    }

    fn sequence(&mut self, open: char, close: char) -> Result<Vec<ParamValue>> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("parameters nested too deeply"));
        }
        self.expect(&open.to_string())?;
        let mut items = Vec::new();
        while !self.eat(&close.to_string()) {
            let item = match self.value()? {
                ParamValue::Name(n) if self.definitions.contains_key(&n) => {
                    self.pos -= n.chars().count();
                    self.jaxpr_value()?
                }
                other => other,
            };
            let is_jaxpr = matches!(item, ParamValue::Jaxpr(_));
            items.push(item);
            // JAX prints a tuple of jaxprs (`cond`'s branches) one a line, without commas.
            self.skip_ws();
            if is_jaxpr && self.peek() != Some(',') && self.peek() != Some(close) {
                continue;
            }
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
