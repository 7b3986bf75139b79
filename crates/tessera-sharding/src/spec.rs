//! `PartitionSpec`: how each array dimension is split over mesh axes, printed and parsed as
//! `P('x', ('y', 'z'), None)`.

use std::fmt;

use crate::error::{Result, ShardingError, clip};

/// The sharding of one array dimension.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DimSpec {
    /// Not sharded (`None`).
    Replicated,
    /// Left for the compiler to choose (`P.UNCONSTRAINED`).
    Unconstrained,
    /// Sharded over these mesh axes, major to minor (never empty).
    Axes(Vec<String>),
}

impl DimSpec {
    /// The mesh axes of this dimension (empty for `None`/`UNCONSTRAINED`).
    pub fn axes(&self) -> &[String] {
        match self {
            DimSpec::Axes(a) => a,
            _ => &[],
        }
    }

    /// A dimension over the given axes: no axes means `None`.
    pub fn from_axes<S: AsRef<str>>(axes: &[S]) -> DimSpec {
        if axes.is_empty() {
            DimSpec::Replicated
        } else {
            DimSpec::Axes(axes.iter().map(|a| a.as_ref().to_string()).collect())
        }
    }
}

impl fmt::Display for DimSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DimSpec::Replicated => f.write_str("None"),
            DimSpec::Unconstrained => f.write_str("UNCONSTRAINED"),
            DimSpec::Axes(a) if a.len() == 1 => write!(f, "'{}'", a[0]),
            DimSpec::Axes(a) => {
                let parts: Vec<String> = a.iter().map(|x| format!("'{x}'")).collect();
                write!(f, "({})", parts.join(", "))
            }
        }
    }
}

/// A partition spec: one [`DimSpec`] per leading array dimension, plus the `unreduced` and
/// `reduced` axis sets.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PartitionSpec {
    dims: Vec<DimSpec>,
    unreduced: Vec<String>,
    reduced: Vec<String>,
}

impl PartitionSpec {
    /// A spec from its dimensions.
    pub fn new(dims: Vec<DimSpec>) -> PartitionSpec {
        PartitionSpec {
            dims,
            unreduced: Vec::new(),
            reduced: Vec::new(),
        }
    }

    /// The spec `P()`: replicated over every mesh axis.
    pub fn replicated() -> PartitionSpec {
        PartitionSpec::default()
    }

    /// Convenience: each entry is `None` (not sharded) or a list of axes (major to minor).
    pub fn from_axes(dims: &[&[&str]]) -> PartitionSpec {
        PartitionSpec::new(dims.iter().map(|d| DimSpec::from_axes(d)).collect())
    }

    /// The same spec with these `unreduced` axes.
    pub fn with_unreduced<S: AsRef<str>>(mut self, axes: &[S]) -> PartitionSpec {
        self.unreduced = dedup(axes);
        self
    }

    /// The same spec with these `reduced` axes.
    pub fn with_reduced<S: AsRef<str>>(mut self, axes: &[S]) -> PartitionSpec {
        self.reduced = dedup(axes);
        self
    }

    /// The dimensions.
    pub fn dims(&self) -> &[DimSpec] {
        &self.dims
    }

    /// The number of dimensions the spec names.
    pub fn len(&self) -> usize {
        self.dims.len()
    }

    /// Whether the spec names no dimension.
    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }

    /// The `unreduced` axes.
    pub fn unreduced(&self) -> &[String] {
        &self.unreduced
    }

    /// The `reduced` axes.
    pub fn reduced(&self) -> &[String] {
        &self.reduced
    }

    /// Every mesh axis used to shard a dimension, in spec order (repeats kept).
    pub fn used_axes(&self) -> impl Iterator<Item = &str> {
        self.dims
            .iter()
            .flat_map(|d| d.axes().iter().map(String::as_str))
    }

    /// Parses the text printed by `Display` (also `PartitionSpec(...)`, double quotes,
    /// `P.UNCONSTRAINED`, and one-element tuples).
    pub fn parse(text: &str) -> Result<PartitionSpec> {
        crate::spec_parse::parse_spec(text)
    }
}

fn dedup<S: AsRef<str>>(axes: &[S]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in axes {
        if !out.iter().any(|x| x == a.as_ref()) {
            out.push(a.as_ref().to_string());
        }
    }
    out
}

fn fmt_set(name: &str, axes: &[String]) -> String {
    let parts: Vec<String> = axes.iter().map(|x| format!("'{x}'")).collect();
    format!("{name}={{{}}}", parts.join(", "))
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        let mut body = dims.join(", ");
        if dims.len() == 1 {
            body.push(',');
        }
        let mut sets = Vec::new();
        if !self.unreduced.is_empty() {
            sets.push(fmt_set("unreduced", &self.unreduced));
        }
        if !self.reduced.is_empty() {
            sets.push(fmt_set("reduced", &self.reduced));
        }
        if !sets.is_empty() {
            if body.ends_with(',') {
                body.push(' ');
            } else if !body.is_empty() {
                body.push_str(", ");
            }
            body.push_str(&sets.join(", "));
        }
        write!(f, "P({body})")
    }
}

pub(crate) fn parse_error(input: &str, pos: usize, message: impl Into<String>) -> ShardingError {
    ShardingError::Parse {
        what: "a PartitionSpec",
        input: clip(input),
        pos,
        message: message.into(),
    }
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::PartitionSpec;

    /// Parses `text` and prints it back (or the error).
    fn check(text: &str, expected: Expect) {
        let actual = PartitionSpec::parse(text).map_or_else(|e| e.to_string(), |s| s.to_string());
        expected.assert_eq(&actual);
    }

    #[test]
    fn specs_print_like_python() {
        check(
            "P('x', ('y', 'z'), None)",
            expect!["P('x', ('y', 'z'), None)"],
        );
        check("PartitionSpec(\"x\")", expect!["P('x',)"]);
        check(
            "P(('x',), (), P.UNCONSTRAINED)",
            expect!["P('x', None, UNCONSTRAINED)"],
        );
        check("P()", expect!["P()"]);
        check(
            "P('x', unreduced={'a', 'b'}, reduced={'c'})",
            expect!["P('x', unreduced={'a', 'b'}, reduced={'c'})"],
        );
        check("P(unreduced={'a'})", expect!["P(unreduced={'a'})"]);
    }

    #[test]
    fn malformed_specs_are_refused() {
        check(
            "Q('x')",
            expect![[
                r#"cannot parse a PartitionSpec at byte 0 of "Q('x')": a spec starts with `P(`"#
            ]],
        );
        check(
            "P('x'",
            expect![[r#"cannot parse a PartitionSpec at byte 5 of "P('x'": expected `)`"#]],
        );
        check(
            "P('x) ",
            expect![[
                r#"cannot parse a PartitionSpec at byte 2 of "P('x) ": unterminated axis name"#
            ]],
        );
        check(
            "P(x)",
            expect![[
                r#"cannot parse a PartitionSpec at byte 2 of "P(x)": expected None, UNCONSTRAINED, 'axis' or a tuple"#
            ]],
        );
    }
}
