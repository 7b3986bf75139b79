//! The printer of the jaxpr text format, as `jax.make_jaxpr` prints it. Names are assigned
//! when printing (`a`..`z`, `ba`, `bb`, ... across nested jaxprs). It lives with the program
//! because the parameters and the shape rules print nested programs and values in their
//! messages; the parser, which verifies what it reads, is the `text` module.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::program::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};
use crate::program::params::ParamValue;

/// The line width past which an equation's parameters go on lines of their own.
const WIDTH: usize = 80;

/// Prints a closed jaxpr whose first line starts at column `indent`. As JAX 0.10 does, a nested
/// jaxpr used more than once is printed once, before the program, as `let NAME = { lambda ... }
/// in` (named by the `name` parameter of the first equation calling it), and referred to as
/// `jaxpr=NAME`.
pub fn print_closed(closed: &ClosedJaxpr, indent: usize) -> String {
    let mut namer = Namer {
        shared: super::shared::shared_jaxprs(&closed.jaxpr),
        ..Namer::default()
    };
    let mut out = String::new();
    for k in 0..namer.shared.len() {
        let (jaxpr, name) = namer.shared[k].clone();
        let text = print_jaxpr(&jaxpr, indent, &mut namer);
        out.push_str(&format!("let {name} = {text} in\n{}", " ".repeat(indent)));
    }
    out.push_str(&print_jaxpr(&closed.jaxpr, indent, &mut namer));
    out
}

/// The base-26 names JAX uses: a..z, ba, bb, ..., and the shared jaxprs printed by name.
#[derive(Default)]
struct Namer {
    next: usize,
    shared: Vec<(Jaxpr, String)>,
}

impl Namer {
    /// The name of a jaxpr printed before the program, if it is one.
    fn shared_name(&self, jaxpr: &Jaxpr) -> Option<&str> {
        self.shared
            .iter()
            .find(|(j, _)| j == jaxpr)
            .map(|(_, n)| n.as_str())
    }

    /// Whether a parameter holds a jaxpr printed in place (not by name).
    fn inline_jaxpr(&self, value: &ParamValue) -> bool {
        match value {
            ParamValue::Jaxpr(j) => self.shared_name(&j.jaxpr).is_none(),
            ParamValue::Tuple(items) | ParamValue::List(items) => {
                items.iter().any(|v| self.inline_jaxpr(v))
            }
            _ => false,
        }
    }
}

impl Namer {
    /// The next name, as JAX's `JaxprPpContext` gives them: base-26 digits `a`..`z` with no
    /// exception for the grammar's words (the 222nd name is `in`, the 7560th `let`: the parser
    /// tells them from keywords by position), skipping the names of the jaxprs printed before
    /// the program.
    fn fresh(&mut self) -> String {
        loop {
            let name = base26(self.next);
            self.next += 1;
            if !self.shared.iter().any(|(_, shared)| *shared == name) {
                return name;
            }
        }
    }
}

/// `n` in JAX's base-26 letters: `a`..`z`, then `ba`, `bb`, ... (`a` is the zero digit).
fn base26(mut n: usize) -> String {
    let mut digits = Vec::new();
    loop {
        digits.push((b'a' + (n % 26) as u8) as char);
        n /= 26;
        if n == 0 {
            break;
        }
    }
    digits.iter().rev().collect()
}

struct Scope<'j> {
    jaxpr: &'j Jaxpr,
    names: HashMap<Var, String>,
}

impl Scope<'_> {
    fn bind(&mut self, var: Var, namer: &mut Namer) -> String {
        let name = namer.fresh();
        self.names.insert(var, name.clone());
        format!("{name}:{}", self.jaxpr.aval(var))
    }

    /// A binder of a pending value (an asynchronous start's result), typed `Todo[...]` as JAX
    /// prints its `AbstractTodo`.
    fn bind_pending(&mut self, var: Var, namer: &mut Namer) -> String {
        let name = namer.fresh();
        self.names.insert(var, name.clone());
        format!("{name}:Todo[{}]", self.jaxpr.aval(var))
    }

    fn atom(&self, atom: &Atom) -> String {
        match atom {
            Atom::Var(v) => self
                .names
                .get(v)
                .cloned()
                .unwrap_or_else(|| format!("?{}", v.0)),
            Atom::Lit(l) => literal(l),
        }
    }
}

fn print_jaxpr(jaxpr: &Jaxpr, indent: usize, namer: &mut Namer) -> String {
    let mut scope = Scope {
        jaxpr,
        names: HashMap::new(),
    };
    let consts: Vec<String> = jaxpr
        .constvars
        .iter()
        .map(|&v| scope.bind(v, namer))
        .collect();
    let args: Vec<String> = jaxpr.invars.iter().map(|&v| scope.bind(v, namer)).collect();
    let head = if consts.is_empty() {
        "lambda ; ".to_owned()
    } else {
        format!("lambda {}; ", consts.join(" "))
    };
    let mut out = format!("{{ {head}{}. let\n", args.join(" "));
    for eqn in &jaxpr.eqns {
        out.push_str(&print_eqn(eqn, &mut scope, indent + 4, namer));
        out.push('\n');
    }
    let outs: Vec<String> = jaxpr.outvars.iter().map(|a| scope.atom(a)).collect();
    let tuple = match outs.len() {
        1 => format!("({},)", outs[0]),
        _ => format!("({})", outs.join(", ")),
    };
    out.push_str(&format!("{}in {tuple} }}", " ".repeat(indent + 2)));
    out
}

fn print_eqn(eqn: &Eqn, scope: &mut Scope<'_>, indent: usize, namer: &mut Namer) -> String {
    let args: Vec<String> = eqn.inputs.iter().map(|a| scope.atom(a)).collect();
    let has_jaxpr = eqn
        .params
        .entries()
        .iter()
        .any(|(_, v)| namer.inline_jaxpr(v));
    // The results are named before a nested jaxpr's variables, as JAX does.
    let outs: Vec<String> = eqn
        .outputs
        .iter()
        .map(|&v| {
            if eqn.prim.is_async_start() {
                scope.bind_pending(v, namer)
            } else {
                scope.bind(v, namer)
            }
        })
        .collect();
    let params: Vec<String> = eqn
        .params
        .entries()
        .iter()
        .map(|(k, v)| format!("{k}={}", param_text(v, indent, namer)))
        .collect();
    let lhs = format!(
        "{}{} = {}",
        " ".repeat(indent),
        outs.join(" "),
        eqn.prim.name()
    );
    let args = args.join(" ");
    if params.is_empty() {
        return format!("{lhs} {args}");
    }
    let single = format!("{lhs}[{}] {args}", params.join(" "));
    if !has_jaxpr && single.len() <= WIDTH {
        return single;
    }
    let inner = " ".repeat(indent + 2);
    let body: Vec<String> = params.iter().map(|p| format!("{inner}{p}")).collect();
    format!(
        "{lhs}[\n{}\n{}] {args}",
        body.join("\n"),
        " ".repeat(indent)
    )
}

/// A parameter's text: nested jaxprs printed in place at `indent + 2` or by their shared name.
fn param_text(value: &ParamValue, indent: usize, namer: &mut Namer) -> String {
    match value {
        ParamValue::Jaxpr(j) => match namer.shared_name(&j.jaxpr) {
            Some(name) => name.to_owned(),
            None => print_jaxpr(&j.jaxpr, indent + 2, namer),
        },
        ParamValue::Tuple(items) if items.iter().any(|v| matches!(v, ParamValue::Jaxpr(_))) => {
            // `branches=(` then one jaxpr a line, as JAX prints `cond`'s branches.
            let inner = " ".repeat(indent + 4);
            let parts: Vec<String> = items
                .iter()
                .map(|v| format!("{inner}{}", param_text(v, indent + 2, namer)))
                .collect();
            format!("(\n{}\n{})", parts.join("\n"), " ".repeat(indent + 2))
        }
        other => other.to_string(),
    }
}

/// One line per equation with fresh names (for error context).
pub fn print_eqn_lines(jaxpr: &Jaxpr) -> Vec<String> {
    let mut namer = Namer::default();
    let mut scope = Scope {
        jaxpr,
        names: HashMap::new(),
    };
    for &v in jaxpr.constvars.iter().chain(&jaxpr.invars) {
        scope.bind(v, &mut namer);
    }
    jaxpr
        .eqns
        .iter()
        .map(|e| print_eqn(e, &mut scope, 0, &mut namer).replace('\n', " "))
        .collect()
}

/// A literal as JAX prints it: `2.0:f32[]`, `0:i32[]`, `True:bool[]`.
pub fn literal(l: &Literal) -> String {
    let dtype = l.aval.dtype;
    let text = match dtype {
        DType::Bool if l.value.to_int(dtype) != 0 => "True".to_owned(),
        DType::Bool => "False".to_owned(),
        d if d.is_int() => l.value.to_int(dtype).to_string(),
        _ => python_float(l.to_f64()),
    };
    format!("{text}:{}", l.aval)
}

/// Python's `repr` of a float: shortest round-trip digits, `e-05` style exponents outside
/// `[1e-4, 1e16)`, and a `.0` on integral values.
pub fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let abs = x.abs();
    if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
        let text = format!("{x:e}");
        let (mantissa, exp) = text.split_once('e').unwrap_or((&text, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    let text = format!("{x}");
    if text.contains('.') {
        text
    } else {
        format!("{text}.0")
    }
}
