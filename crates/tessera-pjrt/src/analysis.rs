//! What XLA says about a compiled program before it runs: its cost analysis (FLOPs, bytes
//! accessed, and the other properties the plugin reports, JAX's `compiled.cost_analysis()`) and
//! its memory analysis (argument, output, alias, temporary and code bytes, JAX's
//! `compiled.memory_analysis()`), and the memory kind of each output
//! (`PJRT_Executable_OutputMemoryKinds`, JAX's `get_output_memory_kinds`).

use std::collections::BTreeMap;

use crate::client::args;
use crate::error::Result;
use crate::executable::LoadedExecutable;
use crate::plugin::api_call;
use crate::sys;
use crate::util::string_from_raw;

/// The cost analysis of a compiled program: every numeric property the plugin reports, by its
/// name (`flops`, `bytes accessed`, `transcendentals`, `utilization0{}`, ...).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct CostAnalysis {
    /// The properties, by name.
    pub properties: BTreeMap<String, f64>,
}

impl CostAnalysis {
    /// The floating-point operations of one run, if reported.
    pub fn flops(&self) -> Option<f64> {
        self.properties.get("flops").copied()
    }

    /// The bytes read and written by one run, if reported.
    pub fn bytes_accessed(&self) -> Option<f64> {
        self.properties.get("bytes accessed").copied()
    }
}

/// The memory a compiled program takes on its device (and on the host), in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryAnalysis {
    /// The generated code.
    pub generated_code_bytes: i64,
    /// The arguments.
    pub argument_bytes: i64,
    /// The results.
    pub output_bytes: i64,
    /// Results that alias (reuse) argument buffers, e.g. donated ones.
    pub alias_bytes: i64,
    /// Temporaries.
    pub temp_bytes: i64,
    /// The same five on the host, for programs that also use host memory.
    pub host_generated_code_bytes: i64,
    /// Host arguments.
    pub host_argument_bytes: i64,
    /// Host results.
    pub host_output_bytes: i64,
    /// Host aliases.
    pub host_alias_bytes: i64,
    /// Host temporaries.
    pub host_temp_bytes: i64,
    /// The peak of device memory in use while it runs (0 where the plugin does not say).
    pub peak_bytes: i64,
}

impl LoadedExecutable {
    /// XLA's cost analysis of the program (the properties of its first device's program).
    pub fn cost_analysis(&self) -> Result<CostAnalysis> {
        let inner = self.executable()?;
        let mut args = args!(PJRT_Executable_GetCostAnalysis_Args {
            executable: inner.raw
        });
        api_call!(
            self.client.plugin(),
            PJRT_Executable_GetCostAnalysis,
            &mut args
        )?;
        let mut properties = BTreeMap::new();
        if !args.properties.is_null() {
            // SAFETY: the plugin returns `num_properties` values, owned by the executable.
            let values =
                unsafe { std::slice::from_raw_parts(args.properties, args.num_properties) };
            for value in values {
                // SAFETY: each name is `name_size` bytes owned by the executable.
                let name = unsafe { string_from_raw(value.name, value.name_size) };
                if let Some(number) = numeric(value) {
                    properties.insert(name, number);
                }
            }
        }
        Ok(CostAnalysis { properties })
    }

    /// XLA's memory analysis of the program.
    pub fn memory_analysis(&self) -> Result<MemoryAnalysis> {
        let inner = self.executable()?;
        let mut a = args!(PJRT_Executable_GetCompiledMemoryStats_Args {
            executable: inner.raw
        });
        api_call!(
            self.client.plugin(),
            PJRT_Executable_GetCompiledMemoryStats,
            &mut a
        )?;
        Ok(MemoryAnalysis {
            generated_code_bytes: a.generated_code_size_in_bytes,
            argument_bytes: a.argument_size_in_bytes,
            output_bytes: a.output_size_in_bytes,
            alias_bytes: a.alias_size_in_bytes,
            temp_bytes: a.temp_size_in_bytes,
            host_generated_code_bytes: a.host_generated_code_size_in_bytes,
            host_argument_bytes: a.host_argument_size_in_bytes,
            host_output_bytes: a.host_output_size_in_bytes,
            host_alias_bytes: a.host_alias_size_in_bytes,
            host_temp_bytes: a.host_temp_size_in_bytes,
            peak_bytes: a.peak_memory_in_bytes,
        })
    }

    /// The memory kind each output of one device is returned in (`device`, `pinned_host`, ...),
    /// as the plugin compiled it: JAX's `get_output_memory_kinds`, from which it gives results
    /// their memory kind.
    pub fn output_memory_kinds(&self) -> Result<Vec<String>> {
        let inner = self.executable()?;
        let mut a = args!(PJRT_Executable_OutputMemoryKinds_Args {
            executable: inner.raw
        });
        api_call!(
            self.client.plugin(),
            PJRT_Executable_OutputMemoryKinds,
            &mut a
        )?;
        if a.num_outputs == 0 || a.memory_kinds.is_null() || a.memory_kind_sizes.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returns `num_outputs` strings and their sizes, owned by the
        // executable.
        let (kinds, sizes) = unsafe {
            (
                std::slice::from_raw_parts(a.memory_kinds, a.num_outputs),
                std::slice::from_raw_parts(a.memory_kind_sizes, a.num_outputs),
            )
        };
        Ok(kinds
            .iter()
            .zip(sizes)
            // SAFETY: each kind is `size` bytes owned by the executable.
            .map(|(&k, &size)| unsafe { string_from_raw(k, size) })
            .collect())
    }
}

/// A named value's number (integers and floats; strings, lists and booleans are left out).
fn numeric(value: &sys::PJRT_NamedValue) -> Option<f64> {
    use sys::PJRT_NamedValue_Type as T;
    // SAFETY: the union member read is the one `type_` names.
    unsafe {
        match value.type_ {
            T::PJRT_NamedValue_kFloat => Some(f64::from(value.__bindgen_anon_1.float_value)),
            T::PJRT_NamedValue_kInt64 => Some(value.__bindgen_anon_1.int64_value as f64),
            _ => None,
        }
    }
}
