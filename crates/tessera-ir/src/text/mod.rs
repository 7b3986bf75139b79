//! The jaxpr text format, as `jax.make_jaxpr` prints it: a printer ([`print_closed`]) and a
//! parser ([`parse_closed`]). Names are assigned when printing (`a`..`z`, `ba`, `bb`, ... across
//! nested jaxprs); the parser gives each jaxpr its own scope.

mod parse;

pub use parse::{parse_closed, parse_closed_with_consts};

use std::collections::HashMap;

use crate::aval::ShapedArray;
use crate::dtype::DType;
use crate::jaxpr::{Atom, ClosedJaxpr, Eqn, Jaxpr, Literal, Var};

/// The line width past which an equation's parameters go on lines of their own.
const WIDTH: usize = 80;

/// Prints a closed jaxpr whose first line starts at column `indent`.
pub fn print_closed(closed: &ClosedJaxpr, indent: usize) -> String {
    let mut namer = Namer::default();
    print_jaxpr(&closed.jaxpr, indent, &mut namer)
}

/// The base-26 names JAX uses: a..z, ba, bb, ...
#[derive(Default)]
struct Namer {
    next: usize,
}

impl Namer {
    fn fresh(&mut self) -> String {
        let mut n = self.next;
        self.next += 1;
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
        .0
        .iter()
        .any(|(_, v)| matches!(v, crate::params::ParamValue::Jaxpr(_)));
    // The results are named before a nested jaxpr's variables, as JAX does.
    let outs: Vec<String> = eqn.outputs.iter().map(|&v| scope.bind(v, namer)).collect();
    let params: Vec<String> = eqn
        .params
        .0
        .iter()
        .map(|(k, v)| match v {
            crate::params::ParamValue::Jaxpr(j) => {
                format!("{k}={}", print_jaxpr(&j.jaxpr, indent + 2, namer))
            }
            other => format!("{k}={other}"),
        })
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

/// One line per equation with fresh names (for error context).
pub(crate) fn print_eqn_lines(jaxpr: &Jaxpr) -> Vec<String> {
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
    format!("{}:{}", scalar_text(l.value, &l.aval), l.aval)
}

fn scalar_text(value: f64, aval: &ShapedArray) -> String {
    match aval.dtype {
        DType::Bool => (if value != 0.0 { "True" } else { "False" }).to_owned(),
        d if d.is_int() => format!("{}", value as i64),
        _ => python_float(value),
    }
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
