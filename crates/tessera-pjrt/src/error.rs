//! Typed errors of the PJRT layer. Each message says what failed and how to fix it.

use std::path::PathBuf;

/// The status codes PJRT reports (the same numbering as absl / gRPC status codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The operation was cancelled.
    Cancelled,
    /// An unknown error.
    Unknown,
    /// The caller passed an invalid argument.
    InvalidArgument,
    /// A deadline passed.
    DeadlineExceeded,
    /// Something requested was not found.
    NotFound,
    /// Something being created already exists.
    AlreadyExists,
    /// The caller may not do this.
    PermissionDenied,
    /// Memory or another resource ran out.
    ResourceExhausted,
    /// The system is not in a state that allows the operation.
    FailedPrecondition,
    /// The operation was aborted.
    Aborted,
    /// A value was out of range.
    OutOfRange,
    /// The plugin does not implement this.
    Unimplemented,
    /// An invariant of the plugin broke.
    Internal,
    /// The service is unavailable.
    Unavailable,
    /// Data was lost or corrupted.
    DataLoss,
    /// Authentication failed.
    Unauthenticated,
    /// A code this crate does not know.
    Other(i32),
}

impl ErrorCode {
    /// Maps PJRT's numeric code to the enum.
    pub fn from_raw(code: i32) -> Self {
        use ErrorCode::*;
        match code {
            1 => Cancelled,
            2 => Unknown,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            other => Other(other),
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ErrorCode::Other(code) => write!(f, "code {code}"),
            known => write!(f, "{known:?}"),
        }
    }
}

/// Everything that can go wrong in `tessera-pjrt`.
#[derive(Debug, thiserror::Error)]
pub enum PjrtError {
    /// No plugin was given and none was found where Tessera looks.
    #[error(
        "no PJRT plugin found (looked at: {searched}). Fix: run `cargo xtask setup` to install the \
         PJRT CPU plugin into the Tessera cache, or set TESSERA_PJRT_PLUGIN to the path of a \
         PJRT plugin (.so)"
    )]
    PluginNotFound {
        /// The places that were tried, in order.
        searched: String,
    },
    /// The plugin file exists but the dynamic loader refused it.
    #[error(
        "the PJRT plugin {path} could not be loaded: {reason}. Fix: check that the file is a PJRT \
         plugin built for this machine; to reinstall the CPU plugin, delete it and run \
         `cargo xtask setup`"
    )]
    PluginLoad {
        /// The plugin's path.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// The library loaded but is not a PJRT plugin.
    #[error(
        "{path} is not a PJRT plugin: it has no `GetPjrtApi` symbol ({reason}). Fix: point \
         TESSERA_PJRT_PLUGIN at a PJRT plugin such as xla_cpu_pjrt.so"
    )]
    NotAPlugin {
        /// The library's path.
        path: PathBuf,
        /// What the dynamic loader said.
        reason: String,
    },
    /// The plugin's PJRT C API major version differs from the header Tessera was built with.
    #[error(
        "the PJRT plugin {path} implements PJRT C API {plugin_major}.{plugin_minor}, but Tessera \
         was built against {built_major}.{built_minor}; the major versions must match. Fix: use \
         the plugin installed by `cargo xtask setup`"
    )]
    ApiVersion {
        /// The plugin's path.
        path: PathBuf,
        /// The plugin's major version.
        plugin_major: i32,
        /// The plugin's minor version.
        plugin_minor: i32,
        /// The header's major version.
        built_major: i32,
        /// The header's minor version.
        built_minor: i32,
    },
    /// The plugin's API table is too old to have a function Tessera needs.
    #[error(
        "the PJRT plugin {path} does not provide {function} (its API table is older than the \
         header Tessera was built with). Fix: use a newer plugin"
    )]
    MissingFunction {
        /// The plugin's path.
        path: PathBuf,
        /// The missing C function.
        function: &'static str,
    },
    /// The plugin cannot run Tessera's host callbacks (no PJRT FFI extension, or it refused the
    /// handler).
    #[error(
        "the PJRT plugin {plugin} cannot run host callbacks: {message}. Fix: run programs with \
         pure_callback/io_callback/debug_callback on a CPU plugin with the PJRT FFI extension \
         (`zml-cpu`, `xla-cpu-pjrt`), or on the interpreter"
    )]
    HostCallbacks {
        /// The plugin's path.
        plugin: PathBuf,
        /// Why.
        message: String,
    },
    /// A PJRT call returned an error.
    #[error("{function} failed ({code}): {message}")]
    Call {
        /// The C function that failed.
        function: &'static str,
        /// PJRT's status code.
        code: ErrorCode,
        /// The plugin's message.
        message: String,
    },
    /// No addressable device has the requested id.
    #[error("no addressable device has id {id}; the client's devices are {available:?}")]
    UnknownDevice {
        /// The id asked for.
        id: i32,
        /// The ids that exist.
        available: Vec<i32>,
    },
    /// A sharding names a memory kind its device does not have.
    #[error(
        "device {device} has no memory of kind '{kind}'; its memories are {available:?}: use one \
         of them, or no memory kind for the device's default memory"
    )]
    UnknownMemoryKind {
        /// The kind asked for.
        kind: String,
        /// The device.
        device: i32,
        /// The kinds the device has, default first.
        available: Vec<String>,
    },
    /// Host data does not match the shape and element type it claims.
    #[error("host array of {ty:?}{dims:?} needs {expected} bytes but has {actual}")]
    HostSize {
        /// The element type.
        ty: crate::ElementType,
        /// The dimensions.
        dims: Vec<i64>,
        /// Bytes the shape needs.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// The plugin returned a buffer of an element type Tessera does not handle.
    #[error("the plugin returned a buffer of unsupported element type {0}")]
    UnsupportedElementType(u32),
    /// An executable was called with the wrong number of devices or arguments.
    #[error("executable expects {expected} {what}, got {actual}")]
    Arity {
        /// What was counted (devices, arguments).
        what: &'static str,
        /// How many it takes.
        expected: usize,
        /// How many were given.
        actual: usize,
    },
    /// A sharding could not be applied.
    #[error(transparent)]
    Sharding(#[from] tessera_sharding::ShardingError),
    /// A host array was malformed or cut outside its bounds.
    #[error(transparent)]
    Host(#[from] tessera_ir::IrError),
    /// An execution was given a buffer that was deleted or donated to an earlier execution.
    #[error(
        "argument {argument} (on the executable's device {device}) is a buffer that was deleted \
         or donated to an earlier execution; pass a live array (e.g. the donating call's result)"
    )]
    DonatedArgument {
        /// The argument's position.
        argument: usize,
        /// The position of its device among the executable's devices.
        device: usize,
    },
    /// A host allocation (a copy to the host, or a CPU program's results and temporaries) would
    /// take more memory than the machine has available: refused instead of letting the kernel
    /// kill the process.
    #[error(
        "{what} needs {bytes} bytes of host memory, more than the {available} bytes Linux \
         reports available (MemAvailable in /proc/meminfo); free memory, make the arrays smaller \
         (shard them over more devices, or run fewer micro-batches at once), or run on a device \
         with its own memory"
    )]
    HostMemory {
        /// What needed the memory.
        what: String,
        /// The bytes it needed.
        bytes: u64,
        /// The bytes available.
        available: u64,
    },
    /// An array held only partly by this process was read whole.
    #[error(
        "block {block:?} of the array lives on device {device}, which another process holds; \
         read the blocks held here (`addressable_shards`), or reshard the array first"
    )]
    NotAddressable {
        /// A device whose block is not held here.
        device: i64,
        /// Its block.
        block: Vec<(i64, i64)>,
    },
    /// An array was used after `delete`.
    #[error(
        "the array was deleted; it cannot be used any more (copy it before deleting, or keep the original)"
    )]
    Deleted,
    /// A CPU plugin gave no memory analysis of a program, so the host-memory guard cannot be
    /// kept for it.
    #[error(
        "the CPU plugin {plugin} gave no memory analysis of the compiled program ({reason}), so \
         Tessera cannot check that each run fits in host memory. Fix: use a CPU plugin whose \
         PJRT_Executable_GetCompiledMemoryStats works (`cargo xtask setup` installs two)"
    )]
    NoMemoryAnalysis {
        /// The plugin's path.
        plugin: String,
        /// Why the analysis failed.
        reason: String,
    },
    /// What the plugin returned could not be decoded (e.g. the optimized HLO module).
    #[error("cannot decode {0}; the plugin may be newer than Tessera's reader of it")]
    Decode(String),
    /// A program text contains a NUL byte or is otherwise unusable.
    #[error("invalid program: {0}")]
    InvalidProgram(String),
    /// A plugin was named that Tessera does not know, and it does not look like a path.
    #[error(
        "unknown PJRT plugin `{name}`. Fix: name one of {known}, or give the path of a plugin \
         library (.so)"
    )]
    UnknownPluginName {
        /// The name given.
        name: String,
        /// The names Tessera knows, comma separated.
        known: String,
    },
    /// A known plugin was named but is not in the cache.
    #[error("the PJRT plugin `{name}` is not installed ({path} does not exist). Fix: {fix}")]
    PluginNotInstalled {
        /// The name given.
        name: String,
        /// Where it would be.
        path: PathBuf,
        /// The command that installs it.
        fix: String,
    },
    /// `cuda` was asked for and no CUDA plugin is installed.
    #[error(
        "no CUDA PJRT plugin is installed. Fix: run `cargo xtask setup --cuda` (it installs \
         jax-cuda12-pjrt and the NVIDIA libraries from PyPI into the Tessera cache), or install \
         `jax[cuda12]` for the python3 on PATH"
    )]
    CudaPluginNotInstalled,
    /// A CUDA plugin was asked for on a machine without a GPU or without its driver.
    #[error(
        "no usable NVIDIA GPU on this machine: {message} (plugin: {plugin}). Fix: run on a \
         machine with an NVIDIA GPU and its driver, or use a CPU plugin (`--plugin cpu`)"
    )]
    NoGpu {
        /// The plugin's path.
        plugin: PathBuf,
        /// What the plugin said.
        message: String,
    },
    /// A CPU client was asked for a number of virtual devices it cannot make.
    #[error(
        "a CPU client cannot make {requested} devices: give between 1 and {max} (each virtual \
         device takes threads and memory: {max} took 3 s and 0.6 GB to create here)"
    )]
    DeviceCount {
        /// The number asked for.
        requested: i64,
        /// The most Tessera creates (`tessera_pjrt::MAX_CPU_DEVICES`).
        max: i64,
    },
    /// The plugin refused a client create option.
    #[error(
        "the PJRT plugin {plugin} (platform {platform}) rejected the client option `{option}`: \
         {message}. Fix: pass only the options of its platform (see tessera_pjrt::ClientOptions)"
    )]
    OptionRejected {
        /// The plugin's path.
        plugin: PathBuf,
        /// The platform Tessera took it for.
        platform: String,
        /// The option's name.
        option: String,
        /// What the plugin said.
        message: String,
    },
    /// A client opened for a multi-process job holds only some processes' devices: the plugin
    /// made a single-process client (as XLA's CPU plugins always do).
    #[error("{0}")]
    NotMultiProcess(Box<crate::distributed::SingleProcessClient>),
    /// A client create option could not be passed to PJRT.
    #[error("invalid PJRT create option `{name}`: {reason}")]
    InvalidOption {
        /// The option's name.
        name: String,
        /// Why it was refused.
        reason: String,
    },
    /// An environment variable Tessera reads holds a value it cannot use.
    #[error("{variable}={value:?} is refused: {reason}")]
    BadEnvironment {
        /// The variable.
        variable: String,
        /// Its value.
        value: String,
        /// Why, and what to give instead.
        reason: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = PjrtError> = std::result::Result<T, E>;
