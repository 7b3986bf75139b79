//! A folder's `tokenizer.json`, run by Hugging Face's `tokenizers` library (the one
//! `transformers` runs), so text encodes to the same ids as in Python: its post-processor alone
//! decides the special tokens. Also the byte-level tokenizer of Tessera's own byte models (256
//! ids, id = byte), written with an export so `tokenizers` can load it.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;
use tokenizers::models::bpe::{BPE, Vocab};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;

use crate::error::{NnError, Result};

/// A tokenizer and the file it came from.
pub struct HfTokenizer {
    inner: Tokenizer,
    path: PathBuf,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HfTokenizer({}, {} ids)",
            self.path.display(),
            self.vocab_size()
        )
    }
}

fn problem(path: &Path, what: impl Into<String>) -> NnError {
    NnError::HuggingFace {
        path: path.to_path_buf(),
        problem: what.into(),
    }
}

/// GPT-2's map from bytes to printable characters (the byte-level pre-tokenizer's alphabet):
/// printable Latin-1 bytes map to themselves, the others to 256 and up, in order.
fn byte_chars() -> Vec<char> {
    let printable = |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    let mut next = 256u32;
    (0u32..256)
        .map(|b| {
            let code = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(code).unwrap_or('?')
        })
        .collect()
}

impl HfTokenizer {
    /// Reads `path` (a `tokenizer.json`).
    pub fn from_file(path: &Path) -> Result<Self> {
        let inner = Tokenizer::from_file(path).map_err(|e| {
            problem(
                path,
                format!(
                    "is not a tokenizer `tokenizers` can load ({e}); a model \
                folder holds the tokenizer.json its model was trained with"
                ),
            )
        })?;
        Ok(HfTokenizer {
            inner,
            path: path.to_path_buf(),
        })
    }

    /// The byte-level tokenizer of Tessera's byte models: ids 0 to 255 are the bytes, no
    /// merges and no special tokens.
    pub fn byte_level() -> Result<Self> {
        let vocab: Vocab = byte_chars()
            .into_iter()
            .zip(0u32..)
            .map(|(c, id)| (c.to_string(), id))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, Vec::new())
            .build()
            .map_err(|e| NnError::Config(format!("the byte-level tokenizer: {e}")))?;
        let mut inner = Tokenizer::new(bpe);
        inner.with_pre_tokenizer(Some(ByteLevel::new(false, false, false)));
        inner.with_decoder(Some(ByteLevel::new(false, false, false)));
        Ok(HfTokenizer {
            inner,
            path: PathBuf::from("<byte-level>"),
        })
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The ids of `text`, special tokens as the tokenizer's post-processor adds them.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.inner
            .encode(text, true)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| problem(&self.path, format!("cannot encode the text: {e}")))
    }

    /// The text of `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.inner
            .decode(ids, true)
            .map_err(|e| problem(&self.path, format!("cannot decode ids: {e}")))
    }

    /// Refuses a tokenizer with more ids than a model of `vocab` rows has, naming both.
    pub fn check_fits(&self, vocab: i64) -> Result<()> {
        let n = self.vocab_size();
        if n as i64 > vocab {
            return Err(problem(
                &self.path,
                format!(
                    "has {n} ids but the model's vocabulary \
                has {vocab}: this tokenizer belongs to another model; use the model's own \
                tokenizer.json"
                ),
            ));
        }
        Ok(())
    }

    /// Writes it as `tokenizer.json`.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.inner
            .save(path, true)
            .map_err(|e| problem(path, format!("cannot be written: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_byte_level_tokenizer_gives_each_byte_its_value() {
        let tok = HfTokenizer::byte_level().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tok.vocab_size(), 256);
        let text = "héllo wörld\n\t!";
        let ids = tok.encode(text).unwrap_or_else(|e| panic!("{e}"));
        let bytes: Vec<u32> = text.bytes().map(u32::from).collect();
        assert_eq!(ids, bytes);
        assert_eq!(tok.decode(&ids).unwrap_or_else(|e| panic!("{e}")), text);
    }
}
