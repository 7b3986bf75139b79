//! TensorBoard event files: scalars (a loss, a learning rate, a throughput) written so that
//! TensorBoard, or anything that reads its format, plots them.
//!
//! An event file is a sequence of TFRecord records; each holds one serialized
//! `tensorflow.Event` protobuf. A record is
//!
//! ```text
//! u64 little-endian  length of the data
//! u32 little-endian  masked CRC-32C of those 8 length bytes
//! [u8; length]       the data
//! u32 little-endian  masked CRC-32C of the data
//! ```
//!
//! where the mask is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (wrapping), see
//! [`masked_crc32c`]. The first record of a file carries `file_version = "brain.Event:2"`; the
//! others a [`Summary`] of tagged scalar values at a step.
//!
//! [`EventWriter::create`] starts a new file named
//! `events.out.tfevents.<unix seconds>.<hostname>.<pid>.tessera` in a directory (made if
//! missing). TensorBoard reads every event file of a directory as one run, so a training run that
//! is resumed writes a new file beside the old ones and TensorBoard shows the whole run.
//! [`read_events`] reads a file back, checking every checksum.
//!
//! ```no_run
//! use tessera_nn::tensorboard::EventWriter;
//!
//! # fn main() -> Result<(), tessera_nn::tensorboard::EventFileError> {
//! let mut writer = EventWriter::create("runs/first".as_ref())?;
//! for step in 1..=3 {
//!     writer.add_scalars(step, &[("train/loss", 1.0 / step as f32)])?;
//!     writer.flush()?; // on disk (in the OS's hands) after every step
//! }
//! # Ok(())
//! # }
//! ```

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

/// The version string of the first record of every event file.
pub const FILE_VERSION: &str = "brain.Event:2";

/// The CRC-32C (Castagnoli) that TFRecord uses.
const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// Why an event file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum EventFileError {
    /// The file system refused.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// What was being done (e.g. "creating the event file").
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file that is not a well-formed event file.
    #[error("{}: not a TensorBoard event file at byte {offset}: {problem}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Where the bad record starts.
        offset: u64,
        /// What is wrong with it.
        problem: String,
    },
    /// A step that does not fit TensorBoard's signed 64-bit steps.
    #[error("step {0} is beyond TensorBoard's largest step ({max})", max = i64::MAX)]
    StepRange(u64),
}

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Event {
    /// Seconds since the Unix epoch when the event was written.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The training step it belongs to.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// What it carries.
    #[prost(oneof = "What", tags = "3, 5")]
    pub what: Option<What>,
}

/// What an [`Event`] carries (the subset of `tensorflow.Event.what` written here).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum What {
    /// The format's version (`brain.Event:2`), in a file's first record.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Tagged values at the event's step.
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`: tagged values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Summary {
    /// The values.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<SummaryValue>,
}

/// `tensorflow.Summary.Value`, as a scalar (`simple_value`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SummaryValue {
    /// The series it belongs to, e.g. `train/loss`.
    #[prost(string, tag = "1")]
    pub tag: String,
    /// The scalar (always encoded when set, so TensorBoard sees a 0.0 too).
    #[prost(float, optional, tag = "2")]
    pub simple_value: Option<f32>,
}

/// TFRecord's checksum: the CRC-32C of `data`, rotated right by 15 bits plus `0xa282ead8`.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = CASTAGNOLI.checksum(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// One TFRecord record around `data`: length, its checksum, the data, its checksum.
pub fn encode_record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut record = Vec::with_capacity(data.len() + 16);
    record.extend_from_slice(&length);
    record.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
    record.extend_from_slice(data);
    record.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    record
}

/// Seconds since the Unix epoch (0.0 on a clock set before it).
fn now_seconds() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// This machine's name for event file names: the kernel's hostname, with anything but letters,
/// digits, `-` and `_` dropped (`localhost` when there is none).
fn hostname() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_default();
    let clean: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .collect();
    if clean.is_empty() {
        "localhost".into()
    } else {
        clean
    }
}

/// Writes scalars into a new event file. Records are buffered; [`EventWriter::flush`] hands
/// them to the operating system (call it after each step, so a crash loses at most that step),
/// and dropping the writer flushes too (ignoring errors; flush first to see them).
pub struct EventWriter {
    file: BufWriter<File>,
    path: PathBuf,
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter")
            .field("path", &self.path)
            .finish()
    }
}

impl EventWriter {
    /// Starts a new event file in `dir` (created with its parents if missing), named
    /// `events.out.tfevents.<unix seconds>.<hostname>.<pid>.tessera`, and writes its version
    /// record. An existing file is never overwritten: a name already taken gets `.1`, `.2`, ...
    /// before `.tessera`.
    pub fn create(dir: &Path) -> Result<EventWriter, EventFileError> {
        std::fs::create_dir_all(dir).map_err(|source| EventFileError::Io {
            what: "creating the event file directory",
            path: dir.to_path_buf(),
            source,
        })?;
        let seconds = now_seconds() as u64;
        let stem = format!(
            "events.out.tfevents.{seconds}.{}.{}",
            hostname(),
            std::process::id()
        );
        let mut attempt = 0u32;
        let (file, path) = loop {
            let name = match attempt {
                0 => format!("{stem}.tessera"),
                n => format!("{stem}.{n}.tessera"),
            };
            let path = dir.join(name);
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => break (file, path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && attempt < 1000 => {
                    attempt += 1;
                }
                Err(source) => {
                    return Err(EventFileError::Io {
                        what: "creating the event file",
                        path,
                        source,
                    });
                }
            }
        };
        let mut writer = EventWriter {
            file: BufWriter::new(file),
            path,
        };
        writer.write_event(&Event {
            wall_time: now_seconds(),
            step: 0,
            what: Some(What::FileVersion(FILE_VERSION.into())),
        })?;
        writer.flush()?;
        Ok(writer)
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one event as a record (buffered until [`EventWriter::flush`]).
    pub fn write_event(&mut self, event: &Event) -> Result<(), EventFileError> {
        let record = encode_record(&event.encode_to_vec());
        self.file
            .write_all(&record)
            .map_err(|source| EventFileError::Io {
                what: "writing to the event file",
                path: self.path.clone(),
                source,
            })
    }

    /// Writes the scalars `(tag, value)` of one step as one event, stamped with the current time.
    /// Steps are unsigned here; TensorBoard's are `i64`, so a step above `i64::MAX` is an error.
    pub fn add_scalars(
        &mut self,
        step: u64,
        scalars: &[(&str, f32)],
    ) -> Result<(), EventFileError> {
        let step = i64::try_from(step).map_err(|_| EventFileError::StepRange(step))?;
        let value = scalars
            .iter()
            .map(|&(tag, value)| SummaryValue {
                tag: tag.into(),
                simple_value: Some(value),
            })
            .collect();
        self.write_event(&Event {
            wall_time: now_seconds(),
            step,
            what: Some(What::Summary(Summary { value })),
        })
    }

    /// Writes one scalar at `step` (see [`EventWriter::add_scalars`]).
    pub fn add_scalar(&mut self, tag: &str, step: u64, value: f32) -> Result<(), EventFileError> {
        self.add_scalars(step, &[(tag, value)])
    }

    /// Hands the buffered records to the operating system.
    pub fn flush(&mut self) -> Result<(), EventFileError> {
        self.file.flush().map_err(|source| EventFileError::Io {
            what: "writing to the event file",
            path: self.path.clone(),
            source,
        })
    }
}

/// Reads every event of an event file, checking each record's length and data checksums.
pub fn read_events(path: &Path) -> Result<Vec<Event>, EventFileError> {
    let bytes = std::fs::read(path).map_err(|source| EventFileError::Io {
        what: "reading the event file",
        path: path.to_path_buf(),
        source,
    })?;
    decode_records(&bytes)
        .and_then(|records| {
            records
                .into_iter()
                .map(|(offset, data)| {
                    Event::decode(data).map_err(|e| (offset, format!("bad Event protobuf: {e}")))
                })
                .collect()
        })
        .map_err(|(offset, problem)| EventFileError::Corrupt {
            path: path.to_path_buf(),
            offset,
            problem,
        })
}

/// Where a damaged record starts, and what is wrong with it.
type Damage = (u64, String);

/// Splits `bytes` into the data of its TFRecord records (each with the offset it starts at),
/// checking both checksums of each; an error names the offset of the bad record and what is
/// wrong.
fn decode_records(bytes: &[u8]) -> Result<Vec<(u64, &[u8])>, Damage> {
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let offset = at as u64;
        let header = bytes
            .get(at..at + 12)
            .ok_or((offset, "the file ends inside a record's header".to_string()))?;
        let (length_bytes, length_crc) = header.split_at(8);
        let stored =
            u32::from_le_bytes([length_crc[0], length_crc[1], length_crc[2], length_crc[3]]);
        if stored != masked_crc32c(length_bytes) {
            return Err((offset, "the length's checksum does not match".into()));
        }
        let mut length = [0u8; 8];
        length.copy_from_slice(length_bytes);
        let length = usize::try_from(u64::from_le_bytes(length)).map_err(|_| {
            (
                offset,
                "the record's length does not fit in memory".to_string(),
            )
        })?;
        let start = at + 12;
        let end = start
            .checked_add(length)
            .filter(|&end| end.checked_add(4).is_some_and(|e| e <= bytes.len()))
            .ok_or((offset, "the file ends inside a record's data".to_string()))?;
        let data = &bytes[start..end];
        let crc = &bytes[end..end + 4];
        let stored = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        if stored != masked_crc32c(data) {
            return Err((offset, "the data's checksum does not match".into()));
        }
        records.push((offset, data));
        at = end + 4;
    }
    Ok(records)
}

/// The `(step, value)` pairs of the scalar `tag` in `events`, in file order.
pub fn scalars<'a>(events: &'a [Event], tag: &'a str) -> impl Iterator<Item = (i64, f32)> + 'a {
    events.iter().flat_map(move |event| {
        let values = match &event.what {
            Some(What::Summary(summary)) => summary.value.as_slice(),
            _ => &[],
        };
        values
            .iter()
            .filter(move |v| v.tag == tag)
            .filter_map(move |v| v.simple_value.map(|x| (event.step, x)))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The expected values were computed once with TensorBoard 2.21.0's own pure-Python
    /// implementation (`tensorboard.compat.tensorflow_stub.pywrap_tensorflow.crc32c` and
    /// `masked_crc32c`); 0xe3069283 is also CRC-32C's published check value for "123456789".
    #[test]
    fn masked_crc32c_matches_tensorboard() {
        assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xe306_9283);
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        assert_eq!(masked_crc32c(b"hello"), 0x191c_1fbb);
        assert_eq!(masked_crc32c(&5u64.to_le_bytes()), 0x3e04_b2ea);
    }

    /// Two records byte for byte as TensorBoard 2.21.0 writes them: its
    /// `tensorboard.summary.writer.record_writer.RecordWriter` over `event_pb2.Event`s
    /// (wall_time 1.5, file_version "brain.Event:2"; then wall_time 2.0, step 3, a
    /// `train/loss` simple_value of 0.0).
    #[test]
    fn records_equal_tensorboards_bytes() {
        let version = Event {
            wall_time: 1.5,
            step: 0,
            what: Some(What::FileVersion(FILE_VERSION.into())),
        };
        let loss = Event {
            wall_time: 2.0,
            step: 3,
            what: Some(What::Summary(Summary {
                value: vec![SummaryValue {
                    tag: "train/loss".into(),
                    simple_value: Some(0.0),
                }],
            })),
        };
        let mut bytes = encode_record(&version.encode_to_vec());
        bytes.extend(encode_record(&loss.encode_to_vec()));
        assert_eq!(
            hex(&bytes),
            "1800000000000000a37f4b2209000000000000f83f1a0d627261696e2e4576656e743a322a28646c20\
             0000000000000029eda95009000000000000004010032a130a110a0a747261696e2f6c6f737315000000\
             0029f1a1d2"
        );
        let records = decode_records(&bytes).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(Event::decode(records[1].1).unwrap(), loss);
    }

    #[test]
    fn a_written_file_reads_back() {
        let dir = std::env::temp_dir().join(format!("tessera-tb-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut first = EventWriter::create(&dir.join("run")).unwrap();
        let mut second = EventWriter::create(&dir.join("run")).unwrap();
        assert_ne!(first.path(), second.path());
        let name = first
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.starts_with("events.out.tfevents.") && name.ends_with(".tessera"));
        first
            .add_scalars(1, &[("train/loss", 2.5), ("train/learning_rate", 0.1)])
            .unwrap();
        first.add_scalar("train/loss", 2, 0.0).unwrap();
        first.flush().unwrap();
        second.add_scalar("train/loss", 3, -1.0).unwrap();
        drop(second);
        let events = read_events(first.path()).unwrap();
        assert_eq!(events[0].what, Some(What::FileVersion(FILE_VERSION.into())));
        let losses: Vec<_> = scalars(&events, "train/loss").collect();
        assert_eq!(losses, vec![(1, 2.5), (2, 0.0)]);
        assert_eq!(
            scalars(&events, "train/learning_rate").collect::<Vec<_>>(),
            vec![(1, 0.1)]
        );
        let path = dir.join("run").read_dir().unwrap().count();
        assert_eq!(path, 2);
        assert!(matches!(
            first.add_scalar("x", u64::MAX, 1.0),
            Err(EventFileError::StepRange(_))
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn damaged_files_are_refused_not_panicked_on() {
        let data = Event {
            wall_time: 1.0,
            step: 1,
            what: None,
        }
        .encode_to_vec();
        let record = encode_record(&data);
        for cut in 1..record.len() {
            assert!(decode_records(&record[..cut]).is_err(), "cut at {cut}");
        }
        for flip in 0..record.len() {
            let mut bad = record.clone();
            bad[flip] ^= 0x40;
            assert!(decode_records(&bad).is_err(), "flip at {flip}");
        }
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.extend(masked_crc32c(&u64::MAX.to_le_bytes()).to_le_bytes());
        assert!(decode_records(&huge).is_err());
        assert!(decode_records(&[]).unwrap().is_empty());
    }
}
