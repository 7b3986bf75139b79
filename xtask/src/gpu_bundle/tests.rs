//! The bundle's parts, and the whole bundle made and run on this machine's CPU.

use std::process::Command;

use super::*;

#[test]
fn ldd_lines_give_the_libraries_beyond_the_system_ones() {
    let ldd = "\tlinux-vdso.so.1 (0x00007ffd)\n\
               \tlibmpi.so.40 => /lib/x86_64-linux-gnu/libmpi.so.40 (0x00007f4e)\n\
               \tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f4e)\n\
               \tlibz.so.1 => /lib/x86_64-linux-gnu/libz.so.1 (0x00007f4e)\n\
               \tlibzstd.so.1 => /lib/x86_64-linux-gnu/libzstd.so.1 (0x00007f4e)\n\
               \tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f4e)\n\
               \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f4e)\n\
               \t/lib64/ld-linux-x86-64.so.2 (0x00007f4e)\n\
               \tlibevent_core-2.1.so.7 => /lib/x86_64-linux-gnu/libevent_core-2.1.so.7 (0x0)\n\
               \tlibgone.so.1 => not found\n";
    let names: Vec<String> = bundled_libraries(ldd)
        .into_iter()
        .map(|(name, path)| format!("{name} {}", path.display()))
        .collect();
    assert_eq!(
        names,
        [
            "libmpi.so.40 /lib/x86_64-linux-gnu/libmpi.so.40",
            "libzstd.so.1 /lib/x86_64-linux-gnu/libzstd.so.1",
            "libevent_core-2.1.so.7 /lib/x86_64-linux-gnu/libevent_core-2.1.so.7",
        ]
    );
}

#[test]
fn the_newest_glibc_symbol_version_is_the_one_needed() {
    let objdump = "0 DF *UND* 0 (GLIBC_2.34) __libc_start_main\n\
                   0 DF *UND* 0 (GLIBC_2.36) arc4random\n\
                   0 DF *UND* 0 (GLIBC_2.2.5) malloc\n\
                   0 DF *UND* 0 (GLIBCXX_3.4.30) _ZSt4cout\n";
    assert_eq!(newest_glibc(objdump), Some((2, 36)));
    assert_eq!(newest_glibc("no versions"), None);
}

/// `cargo xtask gpu-bundle` end to end: the bundle is made, fits in 60 MiB, and its script runs
/// every part to the end on the CPU (`--quick`, with the bundled libraries rather than the
/// system's), its Llama step compared with the JAX of the bench's virtual environment; a script
/// without a Python fails.
#[test]
fn the_bundle_fits_and_its_script_runs_to_the_end_on_the_cpu() -> anyhow::Result<()> {
    let root = cmd::workspace_root();
    let python = crate::venv::ensure_venv(&root)?;
    crate::venv::ensure_jax(&python)?;
    let dir = std::env::temp_dir().join(format!("tessera-gpu-bundle-{}", std::process::id()));
    let total = make(&root, &dir)?;
    assert!(total <= LIMIT_BYTES, "{total} bytes");
    let parts = ["tessera.xz", "libs.tar.xz", "run.sh", "MANIFEST"];
    let scripts = [
        "jax/llama_jax.py",
        "jax/gen_cudnn_lowering.py",
        "data/corpus.txt",
    ];
    for file in parts.iter().chain(&scripts) {
        assert!(dir.join(file).is_file(), "{file} is missing");
    }
    for file in ORACLE_FILES {
        assert!(dir.join("oracle").join(file).is_file(), "{file} is missing");
    }
    let manifest = fs::read_to_string(dir.join("MANIFEST"))?;
    assert!(manifest.contains("library libmpi.so.40"), "{manifest}");
    assert!(manifest.contains("\nglibc 2."), "{manifest}");

    let out = Command::new(dir.join("run.sh"))
        .args(["--plugin", "cpu", "--quick", "--bundled-libs", "--python"])
        .arg(&python)
        .env_remove("TESSERA_PJRT_PLUGIN")
        .output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let row = |start: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(start))
            .unwrap_or_default()
            .to_owned()
    };
    // The dynamic linker took Open MPI from the bundle.
    let setup = row("| setup | ok |");
    assert!(
        setup.contains("libraries from the bundle: libmpi.so.40"),
        "{stdout}"
    );
    let llama = row("| Llama 2 layers, d_model 64, 4 heads, seq_len 32, batch 4, f32 | ok |");
    assert!(llama.contains("Tessera / JAX tokens/s"), "{stdout}");
    for file in ORACLE_FILES {
        let oracle = row(&format!("| oracle jaxpr {file} | ok |"));
        assert!(oracle.contains(" passed, 0 failed"), "{stdout}");
    }
    // On the CPU cuDNN's attention is reported unsupported, the decomposition having run.
    let attention = row("| check attention | ok |");
    assert!(
        attention.contains("0 passed, 12 unsupported by the plugin, 0 skipped, 0 failed"),
        "{stdout}"
    );
    // On the CPU the collectives XLA's CPU backend lacks are reported, not failed.
    let check = row("| check collectives | ok |");
    assert!(
        check.contains(" passed, ") && check.ends_with(" 0 failed |"),
        "{stdout}"
    );
    let mpi = row("| mpirun -n 2: GPT, 2 stages, one per rank, one device | ok |");
    assert!(mpi.contains("losses equal bit for bit: ["), "{stdout}");
    assert!(stdout.contains("run.sh: every part passed"), "{stdout}");
    // The run file: every part's row and the Llama's rounds, drawn as docs/benchmarks.md would.
    let run: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(dir.join("work/out/run.json"))?)?;
    assert_eq!(run["benchmark"], "gpu-run-cpu");
    assert_eq!(
        run["data"]["models"][0]["jax_rounds_s"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    let mut md = String::new();
    crate::gpu_run::render_run(&mut md, &run)?;
    assert!(
        md.contains("| mpirun -n 2: GPT, 2 stages, one per rank, one device | ok |"),
        "{md}"
    );
    assert!(
        md.contains("| Llama 2 layers, d_model 64, 4 heads, seq_len 32, batch 4, f32 |"),
        "{md}"
    );

    let broken = Command::new(dir.join("run.sh"))
        .args(["--plugin", "cpu", "--python", "/nonexistent/python3"])
        .output()?;
    let text = String::from_utf8_lossy(&broken.stdout);
    assert!(!broken.status.success(), "{text}");
    assert!(text.contains("| setup | FAILED | no Python at"), "{text}");
    fs::remove_dir_all(&dir)?;
    Ok(())
}
