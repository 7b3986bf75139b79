//! The parser of `PartitionSpec` text (`P('x', ('y', 'z'), None, unreduced={'w'})`).

use crate::error::Result;
use crate::spec::{DimSpec, PartitionSpec, parse_error};

struct Cursor<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<()> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(parse_error(
                self.text,
                self.pos,
                format!("expected `{token}`"),
            ))
        }
    }

    fn string(&mut self) -> Result<Option<String>> {
        self.skip_ws();
        let Some(quote) = self
            .rest()
            .chars()
            .next()
            .filter(|c| *c == '\'' || *c == '"')
        else {
            return Ok(None);
        };
        let start = self.pos + 1;
        let Some(len) = self.text[start..].find(quote) else {
            return Err(parse_error(self.text, self.pos, "unterminated axis name"));
        };
        let name = &self.text[start..start + len];
        if name.is_empty() {
            return Err(parse_error(self.text, self.pos, "empty axis name"));
        }
        self.pos = start + len + 1;
        Ok(Some(name.to_string()))
    }

    fn word(&mut self) -> &'a str {
        self.skip_ws();
        let rest = self.rest();
        let n = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
        let word = &rest[..n.unwrap_or(rest.len())];
        self.pos += word.len();
        word
    }
}

/// Parses a whole spec.
pub(crate) fn parse_spec(text: &str) -> Result<PartitionSpec> {
    let mut c = Cursor { text, pos: 0 };
    let head = c.word();
    if head != "P" && head != "PartitionSpec" {
        return Err(parse_error(text, 0, "a spec starts with `P(`"));
    }
    c.expect("(")?;
    let (mut dims, mut unreduced, mut reduced) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        if c.eat(")") {
            break;
        }
        let save = c.pos;
        let word = c.word();
        if (word == "unreduced" || word == "reduced") && c.eat("=") {
            let set = axis_set(&mut c)?;
            if word == "unreduced" {
                unreduced = set
            } else {
                reduced = set
            }
        } else {
            c.pos = save;
            dims.push(dim(&mut c)?);
        }
        if !c.eat(",") {
            c.expect(")")?;
            break;
        }
    }
    c.skip_ws();
    if !c.rest().is_empty() {
        return Err(parse_error(text, c.pos, "unexpected text after the spec"));
    }
    Ok(PartitionSpec::new(dims)
        .with_unreduced(&unreduced)
        .with_reduced(&reduced))
}

fn dim(c: &mut Cursor<'_>) -> Result<DimSpec> {
    if let Some(name) = c.string()? {
        return Ok(DimSpec::Axes(vec![name]));
    }
    if c.eat("(") {
        let mut axes = Vec::new();
        loop {
            if c.eat(")") {
                break;
            }
            let Some(name) = c.string()? else {
                return Err(parse_error(c.text, c.pos, "expected a quoted axis name"));
            };
            axes.push(name);
            if !c.eat(",") {
                c.expect(")")?;
                break;
            }
        }
        return Ok(DimSpec::from_axes(&axes));
    }
    let at = c.pos;
    match c.word() {
        "None" => Ok(DimSpec::Replicated),
        "UNCONSTRAINED" | "P.UNCONSTRAINED" | "PartitionSpec.UNCONSTRAINED" => {
            Ok(DimSpec::Unconstrained)
        }
        _ => Err(parse_error(
            c.text,
            at,
            "expected None, UNCONSTRAINED, 'axis' or a tuple",
        )),
    }
}

fn axis_set(c: &mut Cursor<'_>) -> Result<Vec<String>> {
    let close = if c.eat("{") {
        "}"
    } else if c.eat("(") {
        ")"
    } else {
        return Err(parse_error(
            c.text,
            c.pos,
            "expected `{` to start an axis set",
        ));
    };
    let mut axes = Vec::new();
    loop {
        if c.eat(close) {
            return Ok(axes);
        }
        let Some(name) = c.string()? else {
            return Err(parse_error(c.text, c.pos, "expected a quoted axis name"));
        };
        axes.push(name);
        if !c.eat(",") {
            c.expect(close)?;
            return Ok(axes);
        }
    }
}
