//! Token files as trainers write them: a flat little-endian array of `uint16` or `uint32` ids
//! (`.bin`, as nanoGPT's `prepare.py` writes `uint16`), and JSON Lines of documents with a `text`
//! field (`.jsonl`), for a tokenizer to encode.
//!
//! A `.bin` file may begin with Tessera's 16-byte header, so its width need not be given: the
//! magic `TESSTOK\0`, then the bytes per id (2 or 4) and the format version (1), each a
//! little-endian `u32`. Without the header, the width is given (`--data-dtype u16|u32`).

use std::path::Path;

use crate::error::{NnError, Result};

/// The first 8 bytes of a token file with a header.
pub const MAGIC: &[u8; 8] = b"TESSTOK\0";

/// The width of each id in a `.bin` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenWidth {
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
}

impl TokenWidth {
    /// Bytes per id.
    pub fn bytes(self) -> usize {
        match self {
            TokenWidth::U16 => 2,
            TokenWidth::U32 => 4,
        }
    }

    /// `u16`/`uint16` or `u32`/`uint32`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "u16" | "uint16" => Ok(TokenWidth::U16),
            "u32" | "uint32" => Ok(TokenWidth::U32),
            other => Err(NnError::Data(format!(
                "token width `{other}`: use u16 or u32"
            ))),
        }
    }
}

fn data_error(path: &Path, what: impl std::fmt::Display) -> NnError {
    NnError::Data(format!("the token file {}: {what}", path.display()))
}

/// The ids of a `.bin` file: its header's width, or `width` where it has no header (a header
/// that disagrees with `width` is refused).
pub fn read_bin(path: &Path, width: Option<TokenWidth>) -> Result<Vec<u32>> {
    let bytes =
        std::fs::read(path).map_err(|e| data_error(path, format!("cannot be read ({e})")))?;
    let (found, body) = if bytes.starts_with(MAGIC) {
        if bytes.len() < 16 {
            return Err(data_error(path, "has a header cut short"));
        }
        let field = |at: usize| {
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        let w = match (field(8), field(12)) {
            (2, 1) => TokenWidth::U16,
            (4, 1) => TokenWidth::U32,
            (w, v) => {
                return Err(data_error(
                    path,
                    format!(
                        "has a header of width {w}, version {v}; \
                    Tessera writes width 2 or 4, version 1"
                    ),
                ));
            }
        };
        if width.is_some_and(|given| given != w) {
            return Err(data_error(
                path,
                format!(
                    "says its ids are {} bytes wide, not what \
                --data-dtype says; drop --data-dtype",
                    w.bytes()
                ),
            ));
        }
        (w, &bytes[16..])
    } else {
        let Some(w) = width else {
            return Err(data_error(
                path,
                "has no Tessera header, so its width is unknown: pass \
                --data-dtype u16 or u32 (nanoGPT's .bin files are u16)",
            ));
        };
        (w, &bytes[..])
    };
    if body.len() % found.bytes() != 0 {
        return Err(data_error(
            path,
            format!(
                "holds {} bytes, not a whole number of {}-byte ids \
            (truncated, or another width)",
                body.len(),
                found.bytes()
            ),
        ));
    }
    Ok(match found {
        TokenWidth::U16 => body
            .chunks_exact(2)
            .map(|c| u32::from(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
        TokenWidth::U32 => body
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    })
}

/// Writes `ids` as a `.bin` file with Tessera's header; an id too large for `width` is refused.
pub fn write_bin(path: &Path, ids: &[u32], width: TokenWidth) -> Result<()> {
    let mut bytes = MAGIC.to_vec();
    bytes.extend((width.bytes() as u32).to_le_bytes());
    bytes.extend(1u32.to_le_bytes());
    for &id in ids {
        match width {
            TokenWidth::U16 => {
                let id = u16::try_from(id).map_err(|_| {
                    data_error(path, format!("id {id} does not fit u16; write u32"))
                })?;
                bytes.extend(id.to_le_bytes());
            }
            TokenWidth::U32 => bytes.extend(id.to_le_bytes()),
        }
    }
    std::fs::write(path, bytes).map_err(|e| data_error(path, format!("cannot be written ({e})")))
}

/// The `text` field of each line of a JSON Lines file (blank lines skipped).
pub fn read_jsonl_texts(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| data_error(path, format!("cannot be read as text ({e})")))?;
    let mut out = Vec::new();
    for (n, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let value: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| data_error(path, format!("line {} is not JSON ({e})", n + 1)))?;
        match value.get("text").and_then(serde_json::Value::as_str) {
            Some(t) => out.push(t.to_string()),
            None => {
                return Err(data_error(
                    path,
                    format!(
                        "line {} has no string field `text`; \
                    each line is a document like {{\"text\": \"...\"}}",
                        n + 1
                    ),
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bin_files_round_trip_with_their_header_and_raw_ones_need_a_width() {
        let dir = std::env::temp_dir().join(format!("tessera-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let ids = vec![0u32, 7, 65535, 3];
        let path = dir.join("a.bin");
        write_bin(&path, &ids, TokenWidth::U16).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_bin(&path, None).unwrap_or_else(|e| panic!("{e}")), ids);
        assert!(read_bin(&path, Some(TokenWidth::U32)).is_err());
        let raw = dir.join("raw.bin");
        std::fs::write(&raw, [1u8, 0, 2, 0, 0, 1]).unwrap_or_else(|e| panic!("{e}"));
        let err = read_bin(&raw, None).unwrap_err().to_string();
        assert!(err.contains("--data-dtype"), "{err}");
        let got = read_bin(&raw, Some(TokenWidth::U16)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, vec![1, 2, 256]);
        assert!(read_bin(&raw, Some(TokenWidth::U32)).is_err());
        assert!(write_bin(&path, &[70_000], TokenWidth::U16).is_err());
        let jsonl = dir.join("d.jsonl");
        std::fs::write(
            &jsonl,
            "{\"text\": \"a\"}\n\n{\"text\": \"b c\", \"id\": 2}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            read_jsonl_texts(&jsonl).unwrap_or_else(|e| panic!("{e}")),
            ["a", "b c"]
        );
        std::fs::write(&jsonl, "{\"body\": \"a\"}\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(
            read_jsonl_texts(&jsonl)
                .unwrap_err()
                .to_string()
                .contains("line 1")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
