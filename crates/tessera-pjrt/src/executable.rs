//! Compiling StableHLO programs, running them on many devices, and (de)serialising executables.

use crate::buffer::Buffer;
use crate::client::{Client, args};
use crate::compile_options::CompileOptions;
use crate::device::Device;
use crate::error::{PjrtError, Result};
use crate::plugin::api_call;
use crate::sys;

/// A process-unique, non-zero launch id.
fn next_launch_id() -> i32 {
    use std::sync::atomic::{AtomicI32, Ordering};
    static NEXT: AtomicI32 = AtomicI32::new(1);
    loop {
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        if id > 0 {
            return id;
        }
        // Wrapped around: start again at 1.
        let _ = NEXT.compare_exchange(id.wrapping_add(1), 1, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A compiled program loaded on its devices, destroyed on drop.
pub struct LoadedExecutable {
    pub(crate) client: Client,
    raw: *mut sys::PJRT_LoadedExecutable,
    num_outputs: usize,
    device_ids: Vec<i32>,
    /// On a CPU plugin, the host bytes one run allocates (its results and temporaries, on
    /// every device); 0 elsewhere.
    host_run_bytes: u64,
    /// Whether the program holds ordered host callbacks (`io_callback(ordered=True)`): each
    /// execution then returns once it has completed, so the callbacks of successive calls run
    /// in call order (JAX threads a runtime token through the calls instead).
    ordered_effects: bool,
    /// The bytes a deserialized executable was loaded from: [`LoadedExecutable::serialize`]
    /// gives them back, since zml-cpu serializes a deserialized executable without its compiled
    /// kernels (loaded again, it fails with "Function wrapped_sine not found").
    serialized: Option<std::sync::Arc<[u8]>>,
}

// SAFETY: PJRT executables may be launched from any thread.
unsafe impl Send for LoadedExecutable {}
// SAFETY: as above.
unsafe impl Sync for LoadedExecutable {}

impl Client {
    /// Compiles a StableHLO (or any MLIR the plugin accepts) module given as text or bytecode,
    /// always with XLA ([`Client::compile_cached`] goes through the persistent cache).
    pub fn compile(&self, module: &[u8], options: &CompileOptions) -> Result<LoadedExecutable> {
        self.compile_keyed(module, options, None)
    }

    /// [`Client::compile`], counted ([`crate::compile_counts`]) under the cache key `key`.
    pub(crate) fn compile_keyed(
        &self,
        module: &[u8],
        options: &CompileOptions,
        key: Option<&str>,
    ) -> Result<LoadedExecutable> {
        self.host_callbacks_for(module)?;
        let format = "mlir";
        let program = args!(PJRT_Program {
            code: module.as_ptr().cast_mut().cast(),
            code_size: module.len(),
            format: format.as_ptr().cast(),
            format_size: format.len(),
        });
        let options = options.to_proto_bytes();
        let mut args = args!(PJRT_Client_Compile_Args {
            client: self.raw(),
            program: &program,
            compile_options: options.as_ptr().cast(),
            compile_options_size: options.len(),
        });
        let began = std::time::Instant::now();
        api_call!(self.plugin(), PJRT_Client_Compile, &mut args)?;
        let mut executable = LoadedExecutable::wrap(self, args.executable)?;
        executable.ordered_effects = has_ordered_effects(module);
        if crate::compile_log::enabled() {
            crate::compile_log::log(format_args!(
                "compile: {} ({:.1} ms, {} devices)",
                crate::compile_log::module_name(module),
                began.elapsed().as_secs_f64() * 1000.0,
                executable.device_ids().len()
            ));
        }
        crate::persistent::record(crate::persistent::Event::Compile, key, module);
        Ok(executable)
    }

    /// Registers the host callback handler with the plugin when `program` (text, bytecode or a
    /// serialised executable) calls it.
    fn host_callbacks_for(&self, program: &[u8]) -> Result<()> {
        let target = crate::HOST_CALLBACK_TARGET.as_bytes();
        if program.windows(target.len()).any(|w| w == target) {
            // The handler reads and writes its buffers as host memory: only a CPU plugin's
            // buffers are.
            let platform = self.platform_name()?;
            if !platform.eq_ignore_ascii_case("cpu") {
                return Err(crate::PjrtError::HostCallbacks {
                    plugin: self.plugin().path().to_path_buf(),
                    message: format!(
                        "its platform is {platform}, and Tessera's host callback handler runs \
                         on CPU plugins only (it reads its operands as host memory)"
                    ),
                });
            }
            crate::register_host_callbacks(self.plugin())?;
        }
        Ok(())
    }

    /// Loads an executable serialised by [`LoadedExecutable::serialize`] with this plugin.
    pub fn deserialize_executable(&self, bytes: &[u8]) -> Result<LoadedExecutable> {
        self.host_callbacks_for(bytes)?;
        let mut args = args!(PJRT_Executable_DeserializeAndLoad_Args {
            client: self.raw(),
            serialized_executable: bytes.as_ptr().cast(),
            serialized_executable_size: bytes.len(),
        });
        api_call!(self.plugin(), PJRT_Executable_DeserializeAndLoad, &mut args)?;
        let mut executable = LoadedExecutable::wrap(self, args.loaded_executable)?;
        executable.ordered_effects = has_ordered_effects(bytes);
        executable.serialized = Some(bytes.into());
        Ok(executable)
    }
}

/// The unloaded executable behind a loaded one (for metadata and serialisation).
pub(crate) struct Executable<'a> {
    client: &'a Client,
    pub(crate) raw: *mut sys::PJRT_Executable,
}

impl Drop for Executable<'_> {
    fn drop(&mut self) {
        let mut args = args!(PJRT_Executable_Destroy_Args {
            executable: self.raw
        });
        let _ = (|| -> Result<()> {
            api_call!(self.client.plugin(), PJRT_Executable_Destroy, &mut args)
        })();
    }
}

/// Whether `program` (text, bytecode or a serialised executable) calls ordered host callbacks:
/// the lowering marks their custom calls with `order_token`.
fn has_ordered_effects(program: &[u8]) -> bool {
    let contains = |needle: &str| {
        program
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
    };
    contains(crate::HOST_CALLBACK_TARGET) && contains(tessera_ir::callback::ORDER_TOKEN_ATTR)
}

impl LoadedExecutable {
    fn wrap(client: &Client, raw: *mut sys::PJRT_LoadedExecutable) -> Result<LoadedExecutable> {
        let mut exec = LoadedExecutable {
            client: client.clone(),
            raw,
            num_outputs: 0,
            device_ids: Vec::new(),
            host_run_bytes: 0,
            ordered_effects: false,
            serialized: None,
        };
        exec.num_outputs = {
            let inner = exec.executable()?;
            let mut args = args!(PJRT_Executable_NumOutputs_Args {
                executable: inner.raw
            });
            api_call!(client.plugin(), PJRT_Executable_NumOutputs, &mut args)?;
            args.num_outputs
        };
        exec.device_ids = exec
            .devices()?
            .iter()
            .map(Device::id)
            .collect::<Result<_>>()?;
        exec.host_run_bytes = exec.host_bytes_per_run()?;
        Ok(exec)
    }

    /// On a CPU plugin, the host bytes one run allocates: its results (less those aliasing
    /// donated arguments) and temporaries, on each of its devices; 0 on other platforms. A CPU
    /// plugin that gives no memory analysis is an error ([`PjrtError::NoMemoryAnalysis`]), not a
    /// guard silently switched off.
    fn host_bytes_per_run(&self) -> Result<u64> {
        let on_cpu = self
            .client
            .platform_name()
            .is_ok_and(|name| name.eq_ignore_ascii_case("cpu"));
        if !on_cpu {
            return Ok(0);
        }
        let plugin = self.client.plugin().path().display().to_string();
        host_bytes(self.memory_analysis(), &plugin, self.device_ids.len())
    }

    pub(crate) fn executable(&self) -> Result<Executable<'_>> {
        let mut args = args!(PJRT_LoadedExecutable_GetExecutable_Args {
            loaded_executable: self.raw
        });
        api_call!(
            self.client.plugin(),
            PJRT_LoadedExecutable_GetExecutable,
            &mut args
        )?;
        Ok(Executable {
            client: &self.client,
            raw: args.executable,
        })
    }

    fn devices(&self) -> Result<Vec<Device<'_>>> {
        let mut args = args!(PJRT_LoadedExecutable_AddressableDevices_Args {
            executable: self.raw
        });
        api_call!(
            self.client.plugin(),
            PJRT_LoadedExecutable_AddressableDevices,
            &mut args
        )?;
        if args.addressable_devices.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returns `num_addressable_devices` pointers owned by the client.
        let raw = unsafe {
            std::slice::from_raw_parts(args.addressable_devices, args.num_addressable_devices)
        };
        Ok(raw.iter().map(|&d| Device::new(&self.client, d)).collect())
    }

    /// The ids of the devices the executable runs on, in partition order.
    pub fn device_ids(&self) -> &[i32] {
        &self.device_ids
    }

    /// The number of outputs per device.
    pub fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// Runs the program: `arguments[d]` are the arguments of the d-th device (in
    /// [`Self::device_ids`] order). Returns each device's outputs. Outputs may still be computing;
    /// reading them (e.g. [`Buffer::to_host`]) waits.
    pub fn execute(&self, arguments: &[Vec<&Buffer>]) -> Result<Vec<Vec<Buffer>>> {
        let num_devices = self.device_ids.len();
        if arguments.len() != num_devices {
            return Err(PjrtError::Arity {
                what: "device argument lists",
                expected: num_devices,
                actual: arguments.len(),
            });
        }
        let num_args = arguments.first().map_or(0, Vec::len);
        if let Some(bad) = arguments.iter().find(|a| a.len() != num_args) {
            return Err(PjrtError::Arity {
                what: "arguments on every device",
                expected: num_args,
                actual: bad.len(),
            });
        }
        crate::host_memory::ensure_available(self.host_run_bytes, || {
            format!(
                "running the program on {num_devices} CPU device(s) (its results and temporaries)"
            )
        })?;
        // Some plugins crash when they run on a donated buffer: refuse it here.
        for (device, list) in arguments.iter().enumerate() {
            for (argument, buffer) in list.iter().enumerate() {
                if buffer.is_deleted()? {
                    return Err(PjrtError::DonatedArgument { argument, device });
                }
            }
        }
        let raw_args: Vec<Vec<*mut sys::PJRT_Buffer>> = arguments
            .iter()
            .map(|list| list.iter().map(|b| b.raw()).collect())
            .collect();
        let arg_ptrs: Vec<*const *mut sys::PJRT_Buffer> =
            raw_args.iter().map(|l| l.as_ptr()).collect();
        let mut outputs: Vec<Vec<*mut sys::PJRT_Buffer>> = (0..num_devices)
            .map(|_| vec![std::ptr::null_mut(); self.num_outputs])
            .collect();
        let output_ptrs: Vec<*mut *mut sys::PJRT_Buffer> =
            outputs.iter_mut().map(|l| l.as_mut_ptr()).collect();
        // XLA's CPU collectives meet in a process-wide rendezvous keyed by the launch id: every
        // execution needs its own, or concurrent launches on the same devices would join each
        // other's collectives.
        let mut options = args!(PJRT_ExecuteOptions {
            launch_id: next_launch_id()
        });
        let mut done: Vec<*mut sys::PJRT_Event> = vec![std::ptr::null_mut(); num_devices];
        let mut args = args!(PJRT_LoadedExecutable_Execute_Args {
            executable: self.raw,
            options: &mut options,
            argument_lists: arg_ptrs.as_ptr(),
            num_devices: num_devices,
            num_args: num_args,
            output_lists: output_ptrs.as_ptr(),
        });
        if self.ordered_effects {
            args.device_complete_events = done.as_mut_ptr();
        }
        api_call!(
            self.client.plugin(),
            PJRT_LoadedExecutable_Execute,
            &mut args
        )?;
        let outputs = outputs
            .into_iter()
            .map(|list| {
                list.into_iter()
                    .map(|raw| Buffer::from_raw(&self.client, raw))
                    .collect()
            })
            .collect();
        // Ordered effects: the call returns when every device has run it (each event is
        // awaited and destroyed; an error, e.g. of a host callback, is returned).
        let waits: Vec<Result<()>> = done
            .into_iter()
            .map(|raw| crate::event::wait(self.client.plugin(), raw))
            .collect();
        waits.into_iter().collect::<Result<Vec<()>>>()?;
        Ok(outputs)
    }

    /// The optimized HLO module XLA compiled (after SPMD partitioning): its instructions'
    /// per-device shapes and the shardings it chose for parameters and results.
    pub fn optimized_program(&self) -> Result<crate::OptimizedProgram> {
        let inner = self.executable()?;
        let mut format = *b"hlo";
        let mut program = args!(PJRT_Program {
            code: std::ptr::null_mut(),
            code_size: 0,
            format: format.as_mut_ptr().cast(),
            format_size: format.len(),
        });
        // Called twice: first for the size, then to fill the buffer.
        let fetch = |program: &mut sys::PJRT_Program| -> Result<()> {
            let mut args = args!(PJRT_Executable_OptimizedProgram_Args {
                executable: inner.raw,
                program: program,
            });
            api_call!(
                self.client.plugin(),
                PJRT_Executable_OptimizedProgram,
                &mut args
            )
        };
        fetch(&mut program)?;
        let mut code = vec![0u8; program.code_size];
        program.code = code.as_mut_ptr().cast();
        fetch(&mut program)?;
        // SAFETY: the plugin set `format` to a string it owns for the executable's lifetime.
        let format =
            unsafe { std::slice::from_raw_parts(program.format.cast::<u8>(), program.format_size) };
        crate::OptimizedProgram::decode(&code, &String::from_utf8_lossy(format))
    }

    /// Serialises the compiled executable (for a persistent compile cache).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        if let Some(bytes) = &self.serialized {
            return Ok(bytes.to_vec());
        }
        let inner = self.executable()?;
        let mut args = args!(PJRT_Executable_Serialize_Args {
            executable: inner.raw
        });
        api_call!(self.client.plugin(), PJRT_Executable_Serialize, &mut args)?;
        let bytes = if args.serialized_bytes.is_null() {
            Vec::new()
        } else {
            // SAFETY: the plugin returns `serialized_bytes_size` bytes backed by
            // `serialized_executable` until the deleter runs.
            unsafe {
                std::slice::from_raw_parts(
                    args.serialized_bytes.cast::<u8>(),
                    args.serialized_bytes_size,
                )
            }
            .to_vec()
        };
        if let Some(deleter) = args.serialized_executable_deleter {
            // SAFETY: the deleter frees what the plugin allocated for this call.
            unsafe { deleter(args.serialized_executable) };
        }
        Ok(bytes)
    }
}

impl Drop for LoadedExecutable {
    fn drop(&mut self) {
        let mut args = args!(PJRT_LoadedExecutable_Destroy_Args {
            executable: self.raw
        });
        let _ = (|| -> Result<()> {
            api_call!(
                self.client.plugin(),
                PJRT_LoadedExecutable_Destroy,
                &mut args
            )
        })();
    }
}

impl std::fmt::Debug for LoadedExecutable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoadedExecutable(devices {:?}, {} outputs)",
            self.device_ids, self.num_outputs
        )
    }
}

/// The host bytes a run of a CPU program allocates on `devices` devices by its memory
/// `analysis` (results less aliases, and temporaries, per device); a failed analysis is
/// [`PjrtError::NoMemoryAnalysis`] naming `plugin`.
fn host_bytes(
    analysis: Result<crate::analysis::MemoryAnalysis>,
    plugin: &str,
    devices: usize,
) -> Result<u64> {
    let memory = analysis.map_err(|e| PjrtError::NoMemoryAnalysis {
        plugin: plugin.to_owned(),
        reason: e.to_string(),
    })?;
    let per_device = (memory.output_bytes - memory.alias_bytes).max(0) + memory.temp_bytes.max(0);
    Ok(u64::try_from(per_device)
        .unwrap_or(0)
        .saturating_mul(devices as u64))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    /// The host-memory guard's bytes, and an error (not a guard switched off, 0 bytes) when
    /// the plugin gives no analysis.
    #[test]
    fn a_missing_memory_analysis_is_an_error_not_zero_bytes() {
        let analysis = crate::analysis::MemoryAnalysis {
            output_bytes: 100,
            alias_bytes: 40,
            temp_bytes: 8,
            ..Default::default()
        };
        assert!(matches!(host_bytes(Ok(analysis), "p.so", 2), Ok(136)));
        let failed = Err(PjrtError::Decode("the memory statistics".into()));
        let err = host_bytes(failed, "p.so", 2).unwrap_err();
        assert!(matches!(&err, PjrtError::NoMemoryAnalysis { plugin, .. } if plugin == "p.so"));
        assert!(err.to_string().contains("the memory statistics"), "{err}");
    }
}
