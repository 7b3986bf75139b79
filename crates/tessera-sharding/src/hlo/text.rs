//! XLA's text format of `HloSharding`, printed and parsed.
//!
//! ```text
//! {replicated}   {manual}   {maximal device=3}
//! {devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}
//! {devices=[2,2]0,3,2,1 last_tile_dims={manual}}
//! {{replicated}, {devices=[2]<=[2]}}
//! ```

use std::fmt;

use super::iota::{IotaTileAssignment, TileAssignment};
use super::{HloSharding, MAX_TILES, SubgroupType, Tiled, join};
use crate::error::{Result, ShardingError, clip};

pub(super) fn print(s: &HloSharding, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match s {
        HloSharding::Replicated => f.write_str("{replicated}"),
        HloSharding::Manual => f.write_str("{manual}"),
        HloSharding::Unreduced => f.write_str("{unreduced}"),
        HloSharding::Maximal { device } => write!(f, "{{maximal device={device}}}"),
        HloSharding::Tiled(t) => print_tiled(t, f),
        HloSharding::Tuple(elems) => {
            f.write_str("{")?;
            for (i, e) in elems.iter().enumerate() {
                if i != 0 {
                    f.write_str(", ")?;
                    if i % 5 == 0 {
                        write!(f, "/*index={i}*/")?;
                    }
                }
                print(e, f)?;
            }
            f.write_str("}")
        }
    }
}

fn print_tiled(t: &Tiled, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match &t.tiles {
        TileAssignment::Iota(i) => {
            write!(
                f,
                "{{devices=[{}]<=[{}]",
                join(i.dims()),
                join(i.reshape_dims())
            )?;
            if i.reshape_dims().len() > 1 {
                write!(f, "T({})", join(i.transpose_perm()))?;
            }
        }
        TileAssignment::Explicit { dims, devices } => {
            write!(f, "{{devices=[{}]{}", join(dims), join(devices))?;
        }
    }
    if t.last_tile_dim_replicate {
        f.write_str(" last_tile_dim_replicate")?;
    }
    if !t.subgroup_types.is_empty() {
        let kinds: Vec<&str> = t.subgroup_types.iter().map(|k| k.as_str()).collect();
        write!(f, " last_tile_dims={{{}}}", kinds.join(", "))?;
    }
    f.write_str("}")
}

/// The most dimensions a tile assignment may have.
const MAX_DIMS: usize = 256;

/// The deepest tuple nesting the parser accepts.
const MAX_DEPTH: usize = 64;

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

pub(super) fn parse(text: &str) -> Result<HloSharding> {
    let mut p = Parser { text, pos: 0 };
    let s = p.sharding(0)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(p.error("unexpected text after the sharding"));
    }
    Ok(s)
}

impl<'a> Parser<'a> {
    fn error(&self, message: &str) -> ShardingError {
        ShardingError::Parse {
            what: "an HloSharding",
            input: clip(self.text),
            pos: self.pos,
            message: message.to_string(),
        }
    }

    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    fn skip_ws(&mut self) {
        loop {
            let rest = self.rest();
            let trimmed = rest.trim_start();
            self.pos += rest.len() - trimmed.len();
            if trimmed.starts_with("/*") {
                match trimmed.find("*/") {
                    Some(end) => self.pos += end + 2,
                    None => return,
                }
            } else {
                return;
            }
        }
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
            Err(self.error(&format!("expected `{token}`")))
        }
    }

    fn word(&mut self) -> &'a str {
        self.skip_ws();
        let rest = self.rest();
        let n = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
        let w = &rest[..n.unwrap_or(rest.len())];
        self.pos += w.len();
        w
    }

    fn int(&mut self) -> Result<i64> {
        self.skip_ws();
        let rest = self.rest();
        let n = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let value = rest[..n]
            .parse::<i64>()
            .map_err(|_| self.error("expected a number"))?;
        self.pos += n;
        Ok(value)
    }

    /// `[a,b,...]` (possibly empty).
    fn int_list(&mut self, open: &str, close: &str) -> Result<Vec<i64>> {
        self.expect(open)?;
        let mut out = Vec::new();
        if self.eat(close) {
            return Ok(out);
        }
        loop {
            out.push(self.int()?);
            if out.len() > MAX_DIMS {
                return Err(self.error("too many dimensions"));
            }
            if !self.eat(",") {
                self.expect(close)?;
                return Ok(out);
            }
        }
    }

    fn sharding(&mut self, depth: usize) -> Result<HloSharding> {
        if depth > MAX_DEPTH {
            return Err(self.error("tuples nested too deeply"));
        }
        self.expect("{")?;
        self.skip_ws();
        if self.rest().starts_with('{') || self.rest().starts_with('}') {
            let mut elems = Vec::new();
            if self.eat("}") {
                return Ok(HloSharding::Tuple(elems));
            }
            loop {
                elems.push(self.sharding(depth + 1)?);
                if !self.eat(",") {
                    self.expect("}")?;
                    return Ok(HloSharding::Tuple(elems));
                }
            }
        }
        let s = self.single()?;
        self.expect("}")?;
        Ok(s)
    }

    fn single(&mut self) -> Result<HloSharding> {
        let mut a = Attrs::default();
        loop {
            self.skip_ws();
            if self.rest().starts_with('}') || self.rest().is_empty() {
                break;
            }
            let at = self.pos;
            match self.word() {
                "replicated" => a.replicated = true,
                "manual" => a.manual = true,
                "unreduced" => a.unreduced = true,
                "maximal" => a.maximal = true,
                "last_tile_dim_replicate" => a.last_tile_dim_replicate = true,
                "device" => {
                    self.expect("=")?;
                    a.device = Some(self.int()?);
                }
                "devices" => {
                    self.expect("=")?;
                    self.devices(&mut a)?;
                }
                "last_tile_dims" => {
                    self.expect("=")?;
                    a.subgroups = Some(self.kinds()?);
                }
                "" => return Err(self.error("expected a sharding attribute")),
                _ => {
                    self.pos = at;
                    return Err(self.error("unknown sharding attribute"));
                }
            }
        }
        a.build(self)
    }

    fn devices(&mut self, a: &mut Attrs) -> Result<()> {
        let dims = self.int_list("[", "]")?;
        if self.eat("<=") {
            let reshape = self.int_list("[", "]")?;
            let perm = if self.eat("T") {
                let p = self.int_list("(", ")")?;
                p.iter()
                    .map(|&x| usize::try_from(x).unwrap_or(usize::MAX))
                    .collect()
            } else {
                (0..reshape.len()).collect()
            };
            a.iota = Some((dims, reshape, perm));
        } else {
            let mut list = vec![self.int()?];
            while self.rest().starts_with(',') {
                self.pos += 1;
                list.push(self.int()?);
                if list.len() as i64 > MAX_TILES {
                    return Err(self.error("device list too long"));
                }
            }
            a.explicit = Some((dims, list));
        }
        Ok(())
    }

    fn kinds(&mut self) -> Result<Vec<SubgroupType>> {
        self.expect("{")?;
        let mut out = Vec::new();
        loop {
            let kind = match self.word() {
                "manual" => SubgroupType::Manual,
                "replicated" => SubgroupType::Replicated,
                "unreduced" => SubgroupType::Unreduced,
                _ => return Err(self.error("expected manual, replicated or unreduced")),
            };
            out.push(kind);
            if !self.eat(",") {
                self.expect("}")?;
                return Ok(out);
            }
        }
    }
}

#[derive(Default)]
struct Attrs {
    replicated: bool,
    manual: bool,
    unreduced: bool,
    maximal: bool,
    last_tile_dim_replicate: bool,
    device: Option<i64>,
    iota: Option<(Vec<i64>, Vec<i64>, Vec<usize>)>,
    explicit: Option<(Vec<i64>, Vec<i64>)>,
    subgroups: Option<Vec<SubgroupType>>,
}

impl Attrs {
    fn build(self, p: &Parser<'_>) -> Result<HloSharding> {
        let tiled = self.iota.is_some() || self.explicit.is_some();
        let kinds = [
            self.replicated,
            self.manual,
            self.unreduced,
            self.maximal,
            tiled,
        ];
        if kinds.iter().filter(|k| **k).count() != 1 {
            return Err(p.error(
                "a sharding is exactly one of replicated, manual, unreduced, maximal or devices=",
            ));
        }
        let tile_extras = self.last_tile_dim_replicate || self.subgroups.is_some();
        if (self.device.is_some() && !self.maximal) || (tile_extras && !tiled) {
            return Err(p.error("attribute does not apply to this kind of sharding"));
        }
        if self.replicated {
            return Ok(HloSharding::Replicated);
        }
        if self.manual {
            return Ok(HloSharding::Manual);
        }
        if self.unreduced {
            return Ok(HloSharding::Unreduced);
        }
        if self.maximal {
            let device = self
                .device
                .ok_or_else(|| p.error("maximal needs device=N"))?;
            return Ok(HloSharding::Maximal { device });
        }
        let tiles = match (self.iota, self.explicit) {
            (Some((dims, reshape, perm)), _) => {
                let iota = IotaTileAssignment::new(&dims, &reshape, &perm).ok_or_else(|| {
                    p.error("the iota dimensions, reshape and transpose disagree")
                })?;
                TileAssignment::Iota(iota)
            }
            (None, Some((dims, devices))) => TileAssignment::Explicit { dims, devices },
            (None, None) => return Err(p.error("missing devices=")),
        };
        let result = match (self.last_tile_dim_replicate, self.subgroups) {
            (true, Some(_)) => {
                return Err(
                    p.error("last_tile_dim_replicate and last_tile_dims exclude each other")
                );
            }
            (true, None) => HloSharding::partial_tile(tiles),
            (false, Some(kinds)) => HloSharding::subgroup(tiles, &kinds),
            (false, None) => HloSharding::tile(tiles),
        };
        result.map_err(|e| p.error(&e.to_string()))
    }
}
