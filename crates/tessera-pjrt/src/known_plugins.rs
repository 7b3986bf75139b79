//! The PJRT plugins Tessera knows by name: which PyPI wheel carries each, the pinned SHA-256 sums,
//! where `cargo xtask setup` unpacks it in the cache, and the JAX release it is compared with.
//!
//! This file is plain data with no dependencies: `xtask` includes it with `#[path]` (xtask cannot
//! depend on this crate, whose build script needs the header that xtask installs), so the installer
//! and the loader read one table.

/// The platform a plugin runs on; it decides which client options the plugin accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginPlatform {
    /// XLA's CPU client: takes `cpu_device_count`.
    Cpu,
    /// XLA's CUDA client: takes `visible_devices`, `node_id`, `num_nodes`, `allocator`,
    /// `memory_fraction`, `preallocate`, ...
    Cuda,
}

impl PluginPlatform {
    /// The client create options the platform's plugin takes (XLA's names). Some of XLA's CPU
    /// plugins ignore names they do not know (xla-cpu-pjrt, zml-cpu; jax-0.11-cpu refuses
    /// them), so Tessera checks against this list itself.
    pub fn option_names(self) -> &'static [&'static str] {
        match self {
            PluginPlatform::Cpu => &["cpu_device_count"],
            PluginPlatform::Cuda => &[
                "platform_name",
                "allocator",
                "memory_fraction",
                "preallocate",
                "collective_memory_size",
                "visible_devices",
                "node_id",
                "num_nodes",
                "should_stage_host_to_device_transfers",
                "abort_collectives_on_failure",
                "use_tfrt_gpu_client",
                "enable_mock_nccl",
                "mock_gpu_topology",
                "partition_index",
            ],
        }
    }

    /// `cpu` or `cuda`.
    pub fn label(self) -> &'static str {
        match self {
            PluginPlatform::Cpu => "cpu",
            PluginPlatform::Cuda => "cuda",
        }
    }
}

/// One file taken out of a wheel: its path inside the wheel, its path in the plugin's cache
/// folder, and its SHA-256.
#[derive(Debug, Clone, Copy)]
pub struct WheelFile {
    /// The path inside the wheel (a zip archive).
    pub in_wheel: &'static str,
    /// The path under the plugin's cache folder.
    pub in_cache: &'static str,
    /// The pinned SHA-256, lowercase hex.
    pub sha256: &'static str,
}

/// A PJRT plugin that ships as a PyPI wheel.
#[derive(Debug, Clone, Copy)]
pub struct KnownPlugin {
    /// The name users pass to `--plugin` and `TESSERA_PJRT_PLUGIN`.
    pub name: &'static str,
    /// The PyPI distribution.
    pub package: &'static str,
    /// Its pinned version.
    pub version: &'static str,
    /// The wheel's file name.
    pub wheel: &'static str,
    /// The wheel's pinned SHA-256.
    pub wheel_sha256: &'static str,
    /// The plugin library: the first file of [`KnownPlugin::files`].
    pub files: &'static [WheelFile],
    /// The PJRT C API version the plugin reports, `(major, minor)`.
    pub api: (u32, u32),
    /// The platform of its client.
    pub platform: PluginPlatform,
    /// The CPU jax/jaxlib release `cargo xtask bench --compare-jax` measures it against: the one
    /// whose XLA is nearest to the plugin's among those that run on this Python.
    pub compare_jax: &'static str,
    /// That jaxlib's own PJRT C API version (read from jaxlib's log when it loads the plugin).
    pub compare_jax_api: (u32, u32),
}

impl KnownPlugin {
    /// The plugin's folder under Tessera's cache: `pjrt/<package>-<version>`.
    pub fn cache_subdir(&self) -> String {
        format!("pjrt/{}-{}", self.package, self.version)
    }

    /// The library's path under [`KnownPlugin::cache_subdir`].
    pub fn library(&self) -> &'static str {
        self.files[0].in_cache
    }
}

/// XLA's CPU plugin of November 2025 (PJRT C API 0.81). Its wheel also carries the
/// `pjrt_c_api.h` that Tessera's bindings are generated from, so it is always installed.
pub const XLA_CPU_PJRT: KnownPlugin = KnownPlugin {
    name: "xla-cpu-pjrt",
    package: "xla-cpu-pjrt",
    version: "0.0.1",
    wheel: "xla_cpu_pjrt-0.0.1-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "55837b6b7b47daa717f2d9a5a03563ea0ceaa338d06a81a1e2d3f060d960decc",
    files: &[
        WheelFile {
            in_wheel: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
            in_cache: "xla_cpu_pjrt.so",
            sha256: "88c3f28c5900f48ad4a82cab9e79bba9537809743395e341485f8794268820dc",
        },
        WheelFile {
            in_wheel: "xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h",
            in_cache: "include/pjrt_c_api.h",
            sha256: "c85bb95cb1743c2a353a555b3ab35f065e5f17007c7f182ad68d23754950235c",
        },
    ],
    api: (0, 81),
    platform: PluginPlatform::Cpu,
    compare_jax: "0.8.1",
    compare_jax_api: (0, 81),
};

/// XLA's CPU plugin as built by zml on 2026-06-23 (PJRT C API 0.106), unmodified, shipped by
/// the `fastatomstruct-xla-cpu` wheel.
pub const ZML_CPU: KnownPlugin = KnownPlugin {
    name: "zml-cpu",
    package: "fastatomstruct-xla-cpu",
    version: "2026.6.23",
    wheel: "fastatomstruct_xla_cpu-2026.6.23-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "88b1c430b341b4bea40a37420311c9c75db6e22b46d2ff95b6986577bee6afe9",
    files: &[WheelFile {
        in_wheel: "fastatomstruct_xla_cpu/libpjrt_cpu.so",
        in_cache: "libpjrt_cpu.so",
        sha256: "0a0fe56ca17be9efc7b942e89e534e5e0ad4a0f1e369b66d27b62184509015b9",
    }],
    api: (0, 106),
    platform: PluginPlatform::Cpu,
    compare_jax: "0.10.1",
    compare_jax_api: (0, 108),
};

/// XLA's CPU plugin built from jaxlib 0.11.2's XLA (PJRT C API 0.115), shipped by the
/// `lammps-jax-pjrt-cpu` wheel. jaxlib 0.11.2 itself needs Python 3.12, so it is compared with
/// jaxlib 0.10.2, the newest that runs on Debian 12's Python 3.11.
pub const JAX_0_11_CPU: KnownPlugin = KnownPlugin {
    name: "jax-0.11-cpu",
    package: "lammps-jax-pjrt-cpu",
    version: "0.11.2",
    wheel: "lammps_jax_pjrt_cpu-0.11.2-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "1319390d948b39f69f7dade496b7c385149d9ca6097a6b62114da113216d9ad1",
    files: &[WheelFile {
        in_wheel: "lammps_jax_pjrt_cpu/pjrt_c_api_cpu_plugin.so",
        in_cache: "pjrt_c_api_cpu_plugin.so",
        sha256: "ad1309ac822b1b24d51b7f9947c7c9fa9ef5d67f390584cbc3d1fa2428fed9c2",
    }],
    api: (0, 115),
    platform: PluginPlatform::Cpu,
    compare_jax: "0.10.2",
    compare_jax_api: (0, 112),
};

/// JAX's CUDA 12 plugin (`jax-cuda12-pjrt`), installed by `cargo xtask setup --cuda` together
/// with the NVIDIA library wheels of [`CUDA_LIBRARY_WHEELS`].
pub const JAX_CUDA12: KnownPlugin = KnownPlugin {
    name: "cuda",
    package: "jax-cuda12-pjrt",
    version: "0.10.2",
    wheel: "jax_cuda12_pjrt-0.10.2-py3-none-manylinux_2_27_x86_64.whl",
    wheel_sha256: "806d1fd29038b6acf5a2b289dd62192abea977ee26aef60ea295b1d28a23acf8",
    files: &[WheelFile {
        in_wheel: "jax_plugins/xla_cuda12/xla_cuda_plugin.so",
        in_cache: "xla_cuda_plugin.so",
        sha256: "bb8f2dbb4eed2c5d3a128d919f651069f803dac809719c7cda8254aba20bfdce",
    }],
    api: (0, 112),
    platform: PluginPlatform::Cuda,
    compare_jax: "0.10.2",
    compare_jax_api: (0, 112),
};

/// The NVIDIA wheels the CUDA plugin loads its libraries from (what `jax[cuda12]` installs).
pub const CUDA_LIBRARY_WHEELS: &[&str] = &[
    "nvidia-cublas-cu12",
    "nvidia-cuda-cupti-cu12",
    "nvidia-cuda-nvcc-cu12",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cudnn-cu12",
    "nvidia-cufft-cu12",
    "nvidia-cusolver-cu12",
    "nvidia-cusparse-cu12",
    "nvidia-nccl-cu12",
    "nvidia-nvjitlink-cu12",
];

/// A Python program printing the folder of JAX's CUDA plugin package (`jax_plugins.xla_cuda13`
/// or `jax_plugins.xla_cuda12`) when `python3` has one installed, and nothing otherwise.
pub const PYTHON_CUDA_PLUGIN_QUERY: &str = concat!(
    "import importlib.util as u\n",
    "for m in ('jax_plugins.xla_cuda13', 'jax_plugins.xla_cuda12'):\n",
    "    try:\n",
    "        s = u.find_spec(m)\n",
    "    except Exception:\n",
    "        s = None\n",
    "    if s and s.submodule_search_locations:\n",
    "        print(list(s.submodule_search_locations)[0]); break\n",
);

/// The library's file name inside JAX's CUDA plugin packages.
pub const CUDA_PLUGIN_LIBRARY: &str = "xla_cuda_plugin.so";

/// Every CPU plugin Tessera can install and load by name.
pub const CPU_PLUGINS: &[KnownPlugin] = &[XLA_CPU_PJRT, ZML_CPU, JAX_0_11_CPU];

/// The CPU plugin used when none is named, chosen by measurement (docs/ARCHITECTURE.md says why).
pub const DEFAULT_CPU_PLUGIN: KnownPlugin = ZML_CPU;

/// The known plugin called `name` (`cpu` is the default CPU plugin).
pub fn known_plugin(name: &str) -> Option<KnownPlugin> {
    if name == "cpu" {
        return Some(DEFAULT_CPU_PLUGIN);
    }
    CPU_PLUGINS
        .iter()
        .chain([&JAX_CUDA12])
        .find(|plugin| plugin.name == name)
        .copied()
}

/// The names [`known_plugin`] accepts, for error messages.
pub fn known_plugin_names() -> Vec<&'static str> {
    let mut names = vec!["cpu"];
    names.extend(CPU_PLUGINS.iter().map(|plugin| plugin.name));
    names.push(JAX_CUDA12.name);
    names
}
