//! The printer: [`Jaxpr`] to JAX's text, byte for byte as `jax.make_jaxpr` prints it.
//!
//! Layout rules (JAX 0.10): a jaxpr goes on one line when it fits in 80 columns; otherwise its
//! equations indent 4 past it and `in` 2. An equation's params go on one line unless that passes
//! 80 columns or holds a multi-line jaxpr; then each param takes its own line indented 2 past the
//! equation and `]` closes at the equation's indent.
//! Variable names continue through nested jaxprs; a nested body's parameters take the names of
//! the caller's operands and its results the names of the call's results, as JAX prints them.

use super::params::{ParamText, print_params};
use crate::ir::{Atom, Eqn, Jaxpr, Literal, Scalar, Var};
use crate::types::DType;
use hashbrown::HashMap;

const WIDTH: usize = 80;

/// Formats a float as Python's `repr` does (`1.0`, `9.999999747378752e-06`, `inf`).
pub fn format_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    let sci = format!("{x:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let s = format!("{x}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", exp.abs())
    }
}

fn literal_text(l: &Literal) -> String {
    let v = match (l.value, l.aval.dtype) {
        (Scalar::Bool(b), _) => if b { "True" } else { "False" }.to_string(),
        (v, d) if d.is_float() => format_float(v.as_f64()),
        (Scalar::Int(i), _) => i.to_string(),
        (Scalar::Float(x), DType::Bool) => if x != 0.0 { "True" } else { "False" }.to_string(),
        (Scalar::Float(x), _) => (x as i64).to_string(),
    };
    format!("{v}:{}", l.aval)
}

fn alpha_name(mut n: usize) -> String {
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

/// Names of one jaxpr's variables; the counter is shared with nested jaxprs.
struct Names<'c> {
    map: HashMap<Var, String>,
    counter: &'c mut usize,
}

impl Names<'_> {
    fn name(&mut self, v: Var) -> String {
        if let Some(n) = self.map.get(&v) {
            return n.clone();
        }
        let n = alpha_name(*self.counter);
        *self.counter += 1;
        self.map.insert(v, n.clone());
        n
    }

    fn atom(&mut self, a: &Atom) -> String {
        match a {
            Atom::Var(v) => self.name(*v),
            Atom::Lit(l) => literal_text(l),
        }
    }
}

/// Prints a jaxpr in JAX's text form.
pub fn print_jaxpr(j: &Jaxpr) -> String {
    let mut counter = 0;
    let mut names = Names {
        map: HashMap::new(),
        counter: &mut counter,
    };
    print_with(j, &mut names, 0, 0)
}

fn binder(j: &Jaxpr, names: &mut Names, v: Var) -> String {
    let ty = j.aval(v).map_or("?[]".to_string(), |a| a.to_string());
    format!("{}:{ty}", names.name(v))
}

/// Prints `j` with its equations at `indent + 4`; `col` is the column the text starts at. A
/// jaxpr whose equations all fit on one line is printed on one line when it ends by column 80.
fn print_with(j: &Jaxpr, names: &mut Names, indent: usize, col: usize) -> String {
    let consts: Vec<String> = j.constvars.iter().map(|v| binder(j, names, *v)).collect();
    let ins: Vec<String> = j.invars.iter().map(|v| binder(j, names, *v)).collect();
    let cs = if consts.is_empty() {
        String::new()
    } else {
        format!("{} ", consts.join(" "))
    };
    let head = format!("{{ lambda {cs}; {}. let", ins.join(" "));
    let eqns: Vec<String> = j
        .eqns
        .iter()
        .map(|e| print_eqn(j, e, names, indent + 4))
        .collect();
    let outs: Vec<String> = j.outvars.iter().map(|a| names.atom(a)).collect();
    let outs = if outs.len() == 1 {
        format!("({},)", outs[0])
    } else {
        format!("({})", outs.join(", "))
    };
    let flat_eqns: Vec<&str> = eqns.iter().map(|e| e.trim_start()).collect();
    let flat = format!("{head} {} in {outs} }}", flat_eqns.join(" "));
    if eqns.iter().all(|e| !e.contains('\n')) && col + flat.len() <= WIDTH {
        return flat;
    }
    let mut s = head;
    for e in &eqns {
        s.push('\n');
        s.push_str(e);
    }
    s.push_str(&format!("\n{}in {outs} }}", " ".repeat(indent + 2)));
    s
}

/// Each equation of `j` printed on its own (top level, names as in the full print).
pub(crate) fn eqn_texts(j: &Jaxpr) -> Vec<String> {
    let mut counter = 0;
    let mut names = Names {
        map: HashMap::new(),
        counter: &mut counter,
    };
    for v in j.constvars.iter().chain(&j.invars) {
        names.name(*v);
    }
    j.eqns
        .iter()
        .map(|e| print_eqn(j, e, &mut names, 4))
        .collect()
}

fn print_eqn(j: &Jaxpr, e: &Eqn, names: &mut Names, indent: usize) -> String {
    let lhs: Vec<String> = e.outputs.iter().map(|v| binder(j, names, *v)).collect();
    let pad = " ".repeat(indent);
    let head = format!("{pad}{} = {}", lhs.join(" "), e.prim.name());
    let params = print_params(&e.prim);
    let mut texts = Vec::new();
    for (k, p) in &params {
        let t = match p {
            ParamText::Text(t) => t.clone(),
            ParamText::AddJaxpr => {
                let ty = e
                    .outputs
                    .first()
                    .and_then(|v| j.aval(*v))
                    .map_or("f32[]".into(), |a| format!("{}[]", a.dtype));
                let [x, y, z] = [(); 3].map(|_| {
                    let n = alpha_name(*names.counter);
                    *names.counter += 1;
                    n
                });
                format!("{{ lambda ; {x}:{ty} {y}:{ty}. let {z}:{ty} = add {x} {y} in ({z},) }}")
            }
            ParamText::Jaxpr(cj) => {
                let col = indent + 2 + k.len() + 1;
                nested(e, &cj.jaxpr, names, indent + 2, col)
            }
        };
        texts.push(format!("{k}={t}"));
    }
    let args: Vec<String> = e.inputs.iter().map(|a| names.atom(a)).collect();
    let args = args.join(" ");
    if texts.is_empty() {
        return format!("{head} {args}");
    }
    let one = format!("{head}[{}] {args}", texts.join(" "));
    if !one.contains('\n') && one.trim_end().len() <= WIDTH {
        return one;
    }
    let inner = " ".repeat(indent + 2);
    let body: Vec<String> = texts.iter().map(|t| format!("{inner}{t}")).collect();
    format!("{head}[\n{}\n{pad}] {args}", body.join("\n"))
}

/// Prints a nested body: its parameters take the caller's operand names and its results the
/// call's result names; everything else continues the shared counter.
fn nested(e: &Eqn, body: &Jaxpr, names: &mut Names, indent: usize, col: usize) -> String {
    let mut map = HashMap::new();
    let mut taken: Vec<String> = Vec::new();
    for (v, a) in body.invars.iter().zip(&e.inputs) {
        if let Atom::Var(o) = a {
            let n = names.name(*o);
            if !taken.contains(&n) {
                taken.push(n.clone());
                map.insert(*v, n);
            }
        }
    }
    for v in &body.invars {
        if !map.contains_key(v) {
            let n = alpha_name(*names.counter);
            *names.counter += 1;
            map.insert(*v, n);
        }
    }
    for (a, o) in body.outvars.iter().zip(&e.outputs) {
        if let Atom::Var(v) = a
            && !map.contains_key(v)
        {
            map.insert(*v, names.name(*o));
        }
    }
    let mut inner = Names {
        map,
        counter: names.counter,
    };
    print_with(body, &mut inner, indent, col)
}
