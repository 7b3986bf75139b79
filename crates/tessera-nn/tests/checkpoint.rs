//! Checkpoints: a round trip keeps every value and dtype, a checkpoint of another model is refused
//! naming the tensor, the newest complete checkpoint is found, and a writer killed mid-write
//! leaves the previous checkpoint readable.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use tessera_ir::{Array, DType};
use tessera_nn::checkpoint::{Manifest, latest, load, save};
use tessera_nn::optim::{AdamW, Optimizer};
use tessera_nn::{DecoderConfig, Tree};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-ckpt-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn manifest(step: u64) -> Manifest {
    Manifest {
        step,
        seed: 7,
        data_position: 1234,
        model: "test".into(),
        history: Default::default(),
    }
}

#[test]
fn a_round_trip_keeps_values_and_dtypes() {
    let dir = scratch("round");
    let config = DecoderConfig::llama(16, 2, 8, 2, 4);
    let params = config.init(1).unwrap();
    let state = AdamW::default().init_state(&params).unwrap();
    let mixed: Tree<Array> = Tree::node([
        (
            "half",
            Tree::Leaf(Array::new(DType::BF16, &[3], vec![1.5, -2.0, 0.25]).unwrap()),
        ),
        (
            "ids",
            Tree::Leaf(Array::new(DType::I64, &[2], vec![9.0e15, -3.0]).unwrap()),
        ),
    ]);
    let folder = save(&dir, &manifest(5), &params, &mixed).unwrap();
    assert_eq!(latest(&dir).unwrap(), Some(folder.clone()));
    let back = load(&folder, &config.avals(), &mixed.map(&mut |_, a| a.aval())).unwrap();
    assert_eq!(back.manifest, manifest(5));
    for (a, b) in params.leaves().iter().zip(back.params.leaves()) {
        assert_eq!(a.to_vec(), b.to_vec());
    }
    for (a, b) in mixed.leaves().iter().zip(back.opt_state.leaves()) {
        assert_eq!((a.aval(), a.to_vec()), (b.aval(), b.to_vec()));
    }
    // The optimizer state of AdamW round-trips too.
    let folder = save(&dir, &manifest(6), &params, &state).unwrap();
    let opt_avals = AdamW::default().state_avals(&config.avals());
    load(&folder, &config.avals(), &opt_avals).unwrap();
    assert_eq!(latest(&dir).unwrap(), Some(folder));
    // So does an empty state (plain SGD has none).
    let folder = save(&dir, &manifest(7), &params, &Tree::Node(Vec::new())).unwrap();
    let back = load(&folder, &config.avals(), &Tree::Node(Vec::new())).unwrap();
    assert!(back.opt_state.is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_checkpoint_of_another_model_is_refused_naming_the_tensor() {
    let dir = scratch("mismatch");
    let small = DecoderConfig::llama(16, 2, 8, 2, 4);
    let params = small.init(0).unwrap();
    let folder = save(&dir, &manifest(1), &params, &Tree::Node(Vec::new())).unwrap();
    let wide = DecoderConfig::llama(16, 2, 16, 2, 4);
    let err = load(&folder, &wide.avals(), &Tree::Node(Vec::new()))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("`embed.tokens.table`") && err.contains("[16, 16]"),
        "{err}"
    );
    let deeper = DecoderConfig::llama(16, 3, 8, 2, 4);
    let err = load(&folder, &deeper.avals(), &Tree::Node(Vec::new()))
        .unwrap_err()
        .to_string();
    assert!(err.contains("`blocks.2.norm1.gain` is missing"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes checkpoints of a large tree into `TESSERA_TORN_DIR` for ever; the parent test kills it.
#[test]
fn torn_writer_child() {
    let Some(dir) = std::env::var_os("TESSERA_TORN_DIR") else {
        return; // only meaningful as the child of the test below
    };
    let big = Tree::node([(
        "w",
        Tree::Leaf(Array::new(DType::F32, &[4 << 20], vec![0.5; 4 << 20]).unwrap()),
    )]);
    for step in 2.. {
        save(
            Path::new(&dir),
            &manifest(step),
            &big,
            &Tree::Node(Vec::new()),
        )
        .unwrap();
    }
}

#[test]
fn a_writer_killed_mid_write_leaves_the_previous_checkpoint_readable() {
    let dir = scratch("torn");
    let small = Tree::node([(
        "w",
        Tree::Leaf(Array::new(DType::F32, &[2], vec![1.0, 2.0]).unwrap()),
    )]);
    save(&dir, &manifest(1), &small, &Tree::Node(Vec::new())).unwrap();
    let mut torn = false;
    for _attempt in 0..5 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "torn_writer_child", "--nocapture"])
            .env("TESSERA_TORN_DIR", &dir)
            .spawn()
            .unwrap();
        // Kill it while a temporary folder exists, i.e. in the middle of a write.
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            let partial = std::fs::read_dir(&dir)
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().contains(".partial"));
            if partial {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        torn |= std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains(".partial"));
        // Whatever was interrupted, the newest complete checkpoint loads.
        let newest = latest(&dir).unwrap().unwrap();
        let name = newest.file_name().unwrap().to_string_lossy().into_owned();
        let expected = if name == "step-00000001" {
            small.map(&mut |_, a| a.aval())
        } else {
            Tree::node([(
                "w",
                Tree::Leaf(tessera_ir::ShapedArray::new(DType::F32, &[4 << 20])),
            )])
        };
        load(&newest, &expected, &Tree::Node(Vec::new())).unwrap();
        if torn {
            break;
        }
    }
    assert!(
        torn,
        "no kill landed in the middle of a write in 5 attempts"
    );
    // The next save removes the torn folder.
    save(&dir, &manifest(99), &small, &Tree::Node(Vec::new())).unwrap();
    let leftovers = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".partial"))
        .count();
    assert_eq!(leftovers, 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
