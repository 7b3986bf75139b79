//! The weight files of a Hugging Face folder: `model.safetensors`, or shards named by
//! `model.safetensors.index.json`. Each tensor is read alone (its header entry, then its byte
//! range), so a process reads only the tensors it asks for; float32, bfloat16 and float16 on
//! disk are read as float32. Writing shards the tensors above a size, with the index.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, TensorView};
use serde_json::{Value, json};
use tessera_ir::{Array, DType};

use crate::error::{NnError, Result};

/// The largest safetensors header read (the format's own limit).
const MAX_HEADER: u64 = 100_000_000;

/// One entry of a safetensors header.
#[derive(Debug, Clone, serde::Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<i64>,
    data_offsets: (u64, u64),
}

/// One safetensors file's header.
#[derive(Debug)]
struct Header {
    /// Where the data begins.
    data_start: u64,
    /// The file's length.
    len: u64,
    entries: HashMap<String, Entry>,
}

fn problem(path: &Path, what: impl Into<String>) -> NnError {
    NnError::HuggingFace {
        path: path.to_path_buf(),
        problem: what.into(),
    }
}

fn read_header(path: &Path) -> Result<Header> {
    let missing = |e: std::io::Error| {
        problem(
            path,
            format!("cannot be read ({e}); download the model folder again"),
        )
    };
    let mut file = File::open(path).map_err(missing)?;
    let len = file.metadata().map_err(missing)?.len();
    let mut size = [0u8; 8];
    file.read_exact(&mut size).map_err(|_| {
        problem(
            path,
            "is shorter than a safetensors header (truncated?); download it again",
        )
    })?;
    let n = u64::from_le_bytes(size);
    if n > MAX_HEADER || 8 + n > len {
        return Err(problem(
            path,
            format!(
                "has a header of {n} bytes in a file of {len}: \
            truncated or not safetensors; download it again"
            ),
        ));
    }
    let mut text = vec![0u8; n as usize];
    file.read_exact(&mut text).map_err(missing)?;
    let raw: BTreeMap<String, Value> = serde_json::from_slice(&text)
        .map_err(|e| problem(path, format!("has a header that is not valid JSON ({e})")))?;
    let mut entries = HashMap::new();
    for (name, value) in raw.into_iter().filter(|(k, _)| k != "__metadata__") {
        let entry: Entry = serde_json::from_value(value)
            .map_err(|e| problem(path, format!("has a bad header entry for `{name}` ({e})")))?;
        entries.insert(name, entry);
    }
    Ok(Header {
        data_start: 8 + n,
        len,
        entries,
    })
}

/// Where one tensor lies ([`WeightFiles::locate`]).
struct Located {
    entry: Entry,
    /// Where the file's data begins.
    data_start: u64,
    /// The file's length.
    len: u64,
    path: PathBuf,
}

/// The weight files of a folder, their headers read on first use.
#[derive(Debug)]
pub struct WeightFiles {
    dir: PathBuf,
    /// Tensor name to file name.
    files: HashMap<String, String>,
    headers: HashMap<String, Header>,
    /// Bytes of tensor data read so far.
    pub bytes_read: u64,
}

impl WeightFiles {
    /// The weights of `dir`: the sharded index if there is one, else `model.safetensors`.
    pub fn open(dir: &Path) -> Result<Self> {
        let index = dir.join("model.safetensors.index.json");
        let single = dir.join("model.safetensors");
        let mut files = HashMap::new();
        let mut headers = HashMap::new();
        if index.exists() {
            let text = std::fs::read_to_string(&index)
                .map_err(|e| problem(&index, format!("cannot be read ({e})")))?;
            let raw: Value = serde_json::from_str(&text)
                .map_err(|e| problem(&index, format!("is not valid JSON ({e})")))?;
            let Some(map) = raw.get("weight_map").and_then(Value::as_object) else {
                return Err(problem(&index, "has no `weight_map` object"));
            };
            for (name, file) in map {
                let Some(file) = file.as_str() else {
                    return Err(problem(
                        &index,
                        format!("maps `{name}` to {file}, not a file"),
                    ));
                };
                files.insert(name.clone(), file.to_string());
            }
        } else if single.exists() {
            let header = read_header(&single)?;
            for name in header.entries.keys() {
                files.insert(name.clone(), "model.safetensors".to_string());
            }
            headers.insert("model.safetensors".to_string(), header);
        } else {
            return Err(problem(
                dir,
                "holds neither model.safetensors nor \
                model.safetensors.index.json; Tessera reads safetensors weights (convert \
                pytorch_model.bin with transformers' save_pretrained(safe_serialization=True))",
            ));
        }
        Ok(WeightFiles {
            dir: dir.to_path_buf(),
            files,
            headers,
            bytes_read: 0,
        })
    }

    /// The tensors of one safetensors file.
    pub fn open_file(path: &Path) -> Result<Self> {
        let header = read_header(path)?;
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let files = header
            .entries
            .keys()
            .map(|n| (n.clone(), file.clone()))
            .collect();
        Ok(WeightFiles {
            dir: path.parent().unwrap_or(Path::new(".")).to_path_buf(),
            files,
            headers: HashMap::from([(file, header)]),
            bytes_read: 0,
        })
    }

    /// The shape of tensor `name` as its file's header gives it.
    pub fn shape_of(&mut self, name: &str) -> Result<Vec<i64>> {
        Ok(self.locate(name, "")?.entry.shape)
    }

    /// Where tensor `name` lies: its file, header entry and the file's data start and length
    /// (the header read on first use). `expected` ends the message of a missing tensor.
    fn locate(&mut self, name: &str, expected: &str) -> Result<Located> {
        let Some(file) = self.files.get(name).cloned() else {
            return Err(problem(
                &self.dir,
                format!("has no tensor `{name}`{expected}"),
            ));
        };
        let path = self.dir.join(&file);
        if !self.headers.contains_key(&file) {
            let header = read_header(&path)?;
            self.headers.insert(file.clone(), header);
        }
        let Some(header) = self.headers.get(&file) else {
            return Err(problem(&path, "lost its header"));
        };
        let Some(entry) = header.entries.get(name).cloned() else {
            return Err(problem(
                &path,
                format!(
                    "does not hold `{name}`, which the index puts there; download the folder \
                     again"
                ),
            ));
        };
        Ok(Located {
            entry,
            data_start: header.data_start,
            len: header.len,
            path,
        })
    }

    /// Tensor `name` as float32, checked to have `shape`.
    pub fn read_f32(&mut self, name: &str, shape: &[i64]) -> Result<Vec<f32>> {
        let expected = ", which config.json implies; the weights do not belong to this config";
        let Located {
            entry,
            data_start,
            len,
            path,
        } = self.locate(name, expected)?;
        if entry.shape != shape {
            return Err(problem(
                &path,
                format!(
                    "holds `{name}` of shape {:?} where config.json \
                implies {shape:?}; the weights do not belong to this config",
                    entry.shape
                ),
            ));
        }
        let dtype = match entry.dtype.as_str() {
            "F32" => DType::F32,
            "BF16" => DType::BF16,
            "F16" => DType::F16,
            other => {
                return Err(problem(
                    &path,
                    format!(
                        "holds `{name}` as {other}; Tessera reads \
                    float32, bfloat16 and float16 weights"
                    ),
                ));
            }
        };
        let (start, end) = entry.data_offsets;
        let count: i64 = shape.iter().product();
        let want = count as u64 * dtype.size_in_bytes() as u64;
        if end < start || end - start != want {
            return Err(problem(
                &path,
                format!(
                    "gives `{name}` {} bytes for {count} {dtype} \
                values",
                    end.saturating_sub(start)
                ),
            ));
        }
        if data_start + end > len {
            return Err(problem(
                &path,
                format!(
                    "is truncated: `{name}` ends at byte {} of a \
                file of {}; download it again",
                    data_start + end,
                    len
                ),
            ));
        }
        let mut file = File::open(&path).map_err(|e| problem(&path, e.to_string()))?;
        file.seek(SeekFrom::Start(data_start + start))
            .map_err(|e| problem(&path, e.to_string()))?;
        let mut bytes = vec![0u8; want as usize];
        file.read_exact(&mut bytes)
            .map_err(|e| problem(&path, format!("cannot read `{name}` ({e})")))?;
        self.bytes_read += want;
        let array = Array::from_bytes(dtype, shape, bytes)?.converted(DType::F32);
        array
            .to_typed::<f32>()
            .ok_or_else(|| problem(&path, format!("`{name}` did not convert to float32")))
    }
}

/// Writes `tensors` (name, shape, float32 values) as safetensors in `dir`: one
/// `model.safetensors` up to `max_shard_bytes`, else `model-0000i-of-0000n.safetensors` files
/// of at most that size each (a larger tensor alone in its file) and
/// `model.safetensors.index.json`.
pub fn write_weights(
    dir: &Path,
    tensors: &[(String, Vec<i64>, Vec<f32>)],
    max_shard_bytes: u64,
) -> Result<()> {
    let mut shards: Vec<Vec<usize>> = vec![Vec::new()];
    let mut size = 0u64;
    for (i, (_, _, values)) in tensors.iter().enumerate() {
        let bytes = values.len() as u64 * 4;
        if size > 0 && size + bytes > max_shard_bytes {
            shards.push(Vec::new());
            size = 0;
        }
        size += bytes;
        if let Some(last) = shards.last_mut() {
            last.push(i);
        }
    }
    let n = shards.len();
    let name_of = |s: usize| {
        if n == 1 {
            "model.safetensors".to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", s + 1)
        }
    };
    let mut weight_map = serde_json::Map::new();
    let total: u64 = tensors.iter().map(|t| t.2.len() as u64 * 4).sum();
    for (s, members) in shards.iter().enumerate() {
        let bytes: Vec<Vec<u8>> = members
            .iter()
            .map(|&i| tensors[i].2.iter().flat_map(|x| x.to_le_bytes()).collect())
            .collect();
        let mut views = Vec::new();
        for (&i, data) in members.iter().zip(&bytes) {
            let shape: Vec<usize> = tensors[i].1.iter().map(|&d| d as usize).collect();
            let view = TensorView::new(Dtype::F32, shape, data)
                .map_err(|e| problem(dir, format!("cannot lay out `{}`: {e}", tensors[i].0)))?;
            views.push((tensors[i].0.clone(), view));
            weight_map.insert(tensors[i].0.clone(), json!(name_of(s)));
        }
        let metadata = Some(HashMap::from([("format".to_string(), "pt".to_string())]));
        let path = dir.join(name_of(s));
        safetensors::serialize_to_file(views, metadata, &path)
            .map_err(|e| problem(&path, format!("cannot be written: {e}")))?;
    }
    if n > 1 {
        let index = json!({"metadata": {"total_size": total}, "weight_map": weight_map});
        let path = dir.join("model.safetensors.index.json");
        let text =
            serde_json::to_string_pretty(&index).map_err(|e| problem(&path, e.to_string()))?;
        std::fs::write(&path, text)
            .map_err(|e| problem(&path, format!("cannot be written: {e}")))?;
    }
    Ok(())
}
