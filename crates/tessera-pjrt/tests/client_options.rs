//! Client options per platform: the CPU plugin takes `cpu_device_count`, refuses CUDA's names
//! with an error naming the option and the plugin, and every known CPU plugin that is installed
//! gives its devices.

use tessera_pjrt::known_plugins::CPU_PLUGINS;
use tessera_pjrt::{
    CUDA_MEMORY_FRACTION_ENV, Client, ClientOptions, CudaOptions, OptionValue, PjrtError,
    PluginPlatform, cached_plugin, resolve_plugin,
};

#[test]
fn the_default_plugin_opens_with_its_platform_options() {
    let client = Client::open(Some("cpu"), 4).expect("the default CPU plugin (cargo xtask setup)");
    assert_eq!(client.platform_name().unwrap(), "cpu");
    assert_eq!(client.addressable_devices().unwrap().len(), 4);
}

/// xla-cpu-pjrt and zml-cpu ignore option names they do not know, so Tessera checks them.
#[test]
fn a_cuda_option_given_to_the_cpu_plugin_is_named_in_the_error() {
    let choice = resolve_plugin(Some("cpu")).unwrap();
    assert_eq!(choice.platform, Some(PluginPlatform::Cpu));
    let options = ClientOptions::cuda(&CudaOptions {
        preallocate: Some(false),
        ..CudaOptions::default()
    });
    let err = Client::open_with(&choice, &options).unwrap_err();
    assert!(
        matches!(&err, PjrtError::OptionRejected { option, .. } if option == "preallocate"),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(&choice.path.display().to_string()), "{text}");
    assert!(text.contains("cpu_device_count"), "{text}");
}

/// `TESSERA_CUDA_MEMORY_FRACTION` (how two ranks share one GPU) takes a fraction in (0, 1] and
/// refuses anything else, naming the variable and its value.
#[test]
fn the_cuda_memory_fraction_from_the_environment_is_a_fraction() {
    assert_eq!(CudaOptions::memory_fraction_from("0.4").unwrap(), 0.4);
    assert_eq!(CudaOptions::memory_fraction_from(" 1 ").unwrap(), 1.0);
    for bad in ["0", "1.5", "-0.2", "half", "", "NaN"] {
        let err = CudaOptions::memory_fraction_from(bad).unwrap_err();
        assert!(
            matches!(&err, PjrtError::BadEnvironment { variable, value, .. }
                if variable == CUDA_MEMORY_FRACTION_ENV && value == bad),
            "{bad}: {err}"
        );
        assert!(err.to_string().contains("e.g. 0.4"), "{err}");
    }
    let options = ClientOptions::cuda(&CudaOptions {
        memory_fraction: Some(CudaOptions::memory_fraction_from("0.45").unwrap()),
        ..CudaOptions::default()
    });
    assert_eq!(
        options.named,
        [("memory_fraction".to_owned(), OptionValue::Float(0.45))]
    );
}

#[test]
fn cuda_options_use_the_names_the_plugin_expects() {
    let options = ClientOptions::cuda(&CudaOptions {
        visible_devices: Some(vec![0, 1]),
        node_id: Some(1),
        num_nodes: Some(2),
        memory_fraction: Some(0.5),
        preallocate: Some(false),
        allocator: Some("bfc".into()),
    });
    let names: Vec<&str> = options.named.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "visible_devices",
            "node_id",
            "num_nodes",
            "memory_fraction",
            "preallocate",
            "allocator"
        ]
    );
}

/// Every known CPU plugin that `cargo xtask setup` installed runs a program: the same API table
/// is used with each (the bindings come from the 0.81 header).
#[test]
fn every_installed_cpu_plugin_gives_eight_devices() {
    let mut opened = 0;
    for known in CPU_PLUGINS {
        let installed = cached_plugin(known).is_some_and(|path| path.is_file());
        if !installed {
            continue;
        }
        let client = Client::open(Some(known.name), 8).unwrap();
        assert_eq!(
            client.addressable_devices().unwrap().len(),
            8,
            "{}",
            known.name
        );
        let (major, minor) = client.plugin().api_version();
        assert_eq!((major as u32, minor as u32), known.api, "{}", known.name);
        opened += 1;
    }
    assert!(
        opened >= 2,
        "setup installs xla-cpu-pjrt and the default CPU plugin"
    );
}
