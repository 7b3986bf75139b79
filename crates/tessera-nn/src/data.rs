//! Training data as tokens, split into a training part and a held-out tail for the eval loss,
//! and cut into windows of `seq_len + 1` tokens (the tokens and, shifted by one, the targets).
//! Batches are a pure function of a position, so a run resumed from a checkpoint's
//! `data_position` sees the same batches as an uninterrupted one.
//!
//! A [`ByteCorpus`] reads any file's bytes as tokens (vocabulary 256); a corpus of other tokens
//! comes from [`ByteCorpus::from_tokens`] (a tokenizer's ids, or a token file read by
//! [`token_files`]).

pub mod token_files;

use std::path::{Path, PathBuf};

use tessera_ir::{Array, DType};

use crate::error::{NnError, Result};

/// Which part of the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    /// The training part (the head of the file).
    Train,
    /// The held-out part (the tail of the file).
    Eval,
}

/// A file's tokens (its bytes, or a tokenizer's ids), split for training and evaluation.
#[derive(Debug, Clone)]
pub struct ByteCorpus {
    source: PathBuf,
    train: Vec<u32>,
    eval: Vec<u32>,
    eval_fraction: f64,
    seq_len: usize,
    /// What a token is, in messages: "bytes" or "tokens".
    unit: &'static str,
}

impl ByteCorpus {
    /// Reads `path` and holds out its last `eval_fraction` (0 to 0.5) for evaluation. The
    /// training part must hold at least one window of `seq_len + 1` bytes; a held-out part
    /// shorter than a window is refused only when its batches are asked for (a run without an
    /// eval loss trains on any file whose training part holds a window).
    /// The path must be a regular file (or a link to one): a device such as `/dev/zero` or a
    /// pipe could be read without end.
    pub fn from_file(path: &Path, seq_len: usize, eval_fraction: f64) -> Result<Self> {
        let meta = std::fs::metadata(path).map_err(|e| {
            NnError::Data(format!("cannot read the data file {}: {e}", path.display()))
        })?;
        if !meta.is_file() {
            return Err(NnError::Data(format!(
                "the data file {} is not a regular file (a directory, device or pipe, which may \
                 never end); give a file of training text",
                path.display()
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| {
            NnError::Data(format!("cannot read the data file {}: {e}", path.display()))
        })?;
        Self::from_bytes(path, bytes, seq_len, eval_fraction)
    }

    /// As [`ByteCorpus::from_file`], for bytes already in memory (`source` names them in errors).
    pub fn from_bytes(
        source: &Path,
        bytes: Vec<u8>,
        seq_len: usize,
        eval_fraction: f64,
    ) -> Result<Self> {
        let tokens = bytes.into_iter().map(u32::from).collect();
        Self::split(source, tokens, seq_len, eval_fraction, "bytes")
    }

    /// A corpus of token ids (`source` names them in errors), split as
    /// [`ByteCorpus::from_file`] splits bytes.
    pub fn from_tokens(
        source: &Path,
        tokens: Vec<u32>,
        seq_len: usize,
        eval_fraction: f64,
    ) -> Result<Self> {
        Self::split(source, tokens, seq_len, eval_fraction, "tokens")
    }

    fn split(
        source: &Path,
        tokens: Vec<u32>,
        seq_len: usize,
        eval_fraction: f64,
        unit: &'static str,
    ) -> Result<Self> {
        if !(0.0..=0.5).contains(&eval_fraction) {
            return Err(NnError::Data(format!(
                "the held-out fraction must be between 0 and 0.5, not {eval_fraction}"
            )));
        }
        let window = seq_len + 1;
        let eval_len = (tokens.len() as f64 * eval_fraction) as usize;
        let train_len = tokens.len() - eval_len;
        if seq_len == 0 || train_len < window {
            return Err(NnError::Data(format!(
                "the data file {} has {} {unit}; its training part (the first {train_len}) is \
                 shorter than one window of seq_len + 1 = {window} {unit}. Fix: use a longer \
                 file or a shorter sequence length",
                source.display(),
                tokens.len(),
            )));
        }
        let split = tokens.len() - eval_len;
        let mut train = tokens;
        let eval = train.split_off(split);
        Ok(ByteCorpus {
            source: source.to_path_buf(),
            eval,
            train,
            eval_fraction,
            seq_len,
            unit,
        })
    }

    /// The largest token, if any: a model must have more ids than it.
    pub fn max_token(&self) -> Option<u32> {
        self.train.iter().chain(&self.eval).copied().max()
    }

    /// Where the tokens came from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The number of tokens in a part.
    pub fn len(&self, split: Split) -> usize {
        self.part(split).len()
    }

    fn part(&self, split: Split) -> &[u32] {
        match split {
            Split::Train => &self.train,
            Split::Eval => &self.eval,
        }
    }

    /// `rows` windows starting at window number `position` (wrapping around the part): tokens
    /// and targets, both `i32 [rows, seq_len]`. Consecutive positions tile the part with
    /// consecutive windows, so a run advances its position by `rows` each step.
    pub fn batch(&self, split: Split, position: u64, rows: usize) -> Result<(Array, Array)> {
        let data = self.part(split);
        let (seq, window) = (self.seq_len, self.seq_len + 1);
        if data.len() < window {
            return Err(NnError::Data(format!(
                "the held-out part of {} (its last {} {unit}) is shorter than one window of \
                 seq_len + 1 = {window} {unit}, so it has no eval batch. Fix: use a file of at \
                 least {} {unit} (the held-out part is its last {}%), a shorter sequence length, \
                 or no eval loss (--eval-every 0)",
                self.source.display(),
                data.len(),
                (window as f64 / self.eval_fraction).ceil(),
                self.eval_fraction * 100.0,
                unit = self.unit,
            )));
        }
        let starts = (data.len() - window) as u64 + 1;
        let (mut tokens, mut targets) = (Vec::new(), Vec::new());
        for row in 0..rows as u64 {
            let start = ((position + row) * seq as u64 % starts) as usize;
            let w = &data[start..start + window];
            tokens.extend(w[..seq].iter().map(|&b| f64::from(b)));
            targets.extend(w[1..].iter().map(|&b| f64::from(b)));
        }
        let shape = [rows as i64, seq as i64];
        Ok((
            Array::new(DType::I32, &shape, tokens)?,
            Array::new(DType::I32, &shape, targets)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(len: usize, seq: usize, eval: f64) -> Result<ByteCorpus> {
        let bytes = (0..len).map(|i| (i % 251) as u8).collect();
        ByteCorpus::from_bytes(Path::new("mem.txt"), bytes, seq, eval)
    }

    #[test]
    fn targets_are_the_tokens_shifted_by_one_and_batches_repeat_by_position() {
        let c = corpus(1000, 8, 0.1).unwrap();
        assert_eq!((c.len(Split::Train), c.len(Split::Eval)), (900, 100));
        let (tokens, targets) = c.batch(Split::Train, 3, 2).unwrap();
        let (t, y) = (tokens.to_vec(), targets.to_vec());
        assert_eq!(&t[1..8], &y[..7]);
        assert_eq!(t[0], 24.0); // window 3 starts at byte 3 * 8
        assert_eq!(t[8], 32.0); // the next row is window 4
        let again = c.batch(Split::Train, 3, 2).unwrap();
        assert_eq!(again.0.to_vec(), t);
        let (eval, _) = c.batch(Split::Eval, 0, 1).unwrap();
        assert_eq!(eval.to_vec()[0], (900 % 251) as f64);
    }

    #[test]
    fn a_file_shorter_than_a_window_is_refused_with_the_fix() {
        let err = corpus(10, 16, 0.0).unwrap_err().to_string();
        assert!(
            err.contains("mem.txt has 10 bytes") && err.contains("longer file"),
            "{err}"
        );
        let err = corpus(40, 16, 0.6).unwrap_err().to_string();
        assert!(err.contains("between 0 and 0.5"), "{err}");
        assert!(corpus(100, 8, 0.9).is_err());
    }

    #[test]
    fn a_short_held_out_part_is_refused_only_when_eval_batches_are_asked_for() {
        // 40 bytes, 10% held out: 36 to train on (two windows of 17), 4 held out.
        let c = corpus(40, 16, 0.1).unwrap();
        assert!(c.batch(Split::Train, 0, 2).is_ok());
        let err = c.batch(Split::Eval, 0, 1).unwrap_err().to_string();
        assert!(
            err.contains("held-out part of mem.txt (its last 4 bytes)")
                && err.contains("at least 170 bytes")
                && err.contains("--eval-every 0"),
            "{err}"
        );
        // A training part shorter than a window is refused at once.
        let err = corpus(17, 16, 0.1).unwrap_err().to_string();
        assert!(err.contains("training part (the first 16)"), "{err}");
    }
}
