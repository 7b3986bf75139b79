//! Hugging Face folders made by `tests/data/hf/gen_hf_cases.py` (small random Llama, Mistral
//! and Qwen2 models, each with one of: grouped-query heads, llama3 rope scaling with tied
//! embeddings, attention and MLP biases with an explicit head_dim, sharded bfloat16 weights,
//! float16 weights with linear rope scaling, dynamic rope in the 5.x spelling, yarn, a sliding
//! window, q/k/v biases) against what `transformers` computed with them: the tokens of a text,
//! the logits at every position (within 1e-4), the loss on a held-out text (within 1e-5); and an
//! import exported again gives back the same tensors and config.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::path::{Path, PathBuf};

use tessera::nn::hf::{self, HfModel};
use tessera_ir::{Array, DType};

const CASES: [&str; 9] = [
    "llama_gqa",
    "llama3_tied",
    "llama_bias_head_dim",
    "llama_sharded_bf16",
    "llama_f16_linear",
    "llama_dynamic_v5",
    "llama_yarn",
    "mistral_window",
    "qwen2",
];

fn case_dir(name: &str) -> PathBuf {
    tessera_tests::repo_root().join("tests/data/hf").join(name)
}

fn expected(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(case_dir(name).join("expected.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(value: &serde_json::Value) -> Vec<i64> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect()
}

/// The logits `transformers` computed, `[tokens, vocab]`.
fn expected_logits(name: &str) -> Vec<f32> {
    let mut files =
        hf::WeightFiles::open_file(&case_dir(name).join("expected.safetensors")).unwrap();
    let shape = files.shape_of("logits").unwrap();
    files.read_f32("logits", &shape).unwrap()
}

fn run(program: &tessera_ir::ClosedJaxpr, inputs: &[Array]) -> Vec<Array> {
    let client = tessera::pjrt::Client::cpu(1).unwrap();
    tessera::jit::run_on_device(&client, program, inputs, 0).unwrap()
}

fn token_array(ids: &[i64]) -> Array {
    let values: Vec<i32> = ids.iter().map(|&x| x as i32).collect();
    Array::from_slice::<i32>(&[1, ids.len() as i64], &values).unwrap()
}

/// Tessera's logits of `ids` under the model in `dir`.
fn logits(model: &HfModel, ids: &[i64]) -> Vec<f64> {
    let params = model.load_all().unwrap();
    let mut decoder = model.config.decoder;
    decoder.seq_len = ids.len() as i64;
    let program = decoder.logits(1, ids.len() as i64).unwrap();
    let mut inputs = vec![token_array(ids)];
    inputs.extend(params.flatten());
    run(&program, &inputs)[0].to_vec()
}

#[test]
fn tokens_logits_and_held_out_loss_equal_transformers() {
    for name in CASES {
        let want = expected(name);
        let model = HfModel::open(&case_dir(name), 16).unwrap();
        let tok = model.tokenizer().unwrap();
        let got: Vec<i64> = tok
            .encode(want["text"].as_str().unwrap())
            .unwrap()
            .into_iter()
            .map(i64::from)
            .collect();
        assert_eq!(got, ids(&want["ids"]), "{name}: tokens");
        let ours = logits(&model, &got);
        let theirs = expected_logits(name);
        assert_eq!(ours.len(), theirs.len(), "{name}: logits count");
        let worst = ours
            .iter()
            .zip(&theirs)
            .map(|(a, b)| (a - f64::from(*b)).abs() / (1.0 + f64::from(b.abs())))
            .fold(0.0, f64::max);
        assert!(
            worst <= 1e-4,
            "{name}: logits differ by {worst:e} (relative to 1 + |x|)"
        );

        // The held-out loss, from the loss program Tessera trains with.
        let held = ids(&want["held_out_ids"]);
        let n = held.len() - 1;
        let mut decoder = model.config.decoder;
        decoder.seq_len = n as i64;
        let program = decoder.loss(1, &tessera::nn::StagePlan::single()).unwrap();
        let mut inputs = vec![token_array(&held[..n])];
        inputs.extend(model.load_all().unwrap().flatten());
        inputs.push(token_array(&held[1..]));
        let loss = run(&program, &inputs)[0].to_vec()[0];
        let theirs = want["held_out_loss"].as_f64().unwrap();
        assert!(
            (loss - theirs).abs() <= 1e-5,
            "{name}: loss {loss} vs {theirs}"
        );
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-hf-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn an_import_exported_again_gives_back_the_same_tensors_and_config() {
    for name in CASES {
        let model = HfModel::open(&case_dir(name), 16).unwrap();
        let params = model.load_all().unwrap();
        let out = scratch(name);
        hf::export(
            &out,
            &model.config,
            &params,
            Some(&case_dir(name).join("tokenizer.json")),
            40_000,
        )
        .unwrap();
        let again = HfModel::open(&out, 16).unwrap();
        assert_eq!(again.config.decoder, model.config.decoder, "{name}");
        let mut original = hf::WeightFiles::open(&case_dir(name)).unwrap();
        let mut exported = hf::WeightFiles::open(&out).unwrap();
        for t in hf::hf_tensors(&model.config.decoder) {
            let a = original.read_f32(&t.name, &t.shape).unwrap();
            let b = exported.read_f32(&t.name, &t.shape).unwrap();
            assert_eq!(a, b, "{name}: {}", t.name);
        }
        // Every field of the config is kept but the dtype, now float32.
        let read = |dir: &Path| -> serde_json::Value {
            let mut v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap())
                    .unwrap();
            let map = v.as_object_mut().unwrap();
            map.remove("torch_dtype");
            map.remove("dtype");
            v
        };
        assert_eq!(read(&out), read(&case_dir(name)), "{name}");
        // Sharded above 40 kB, with the index.
        assert!(out.join("model.safetensors.index.json").exists(), "{name}");
        assert_eq!(
            again.load_all().unwrap().flatten().len(),
            params.flatten().len()
        );
        let _ = std::fs::remove_dir_all(&out);
    }
}

#[test]
fn bad_folders_are_refused_saying_what_is_wrong() {
    let out = scratch("bad");
    std::fs::create_dir_all(&out).unwrap();
    let src = case_dir("llama_gqa");
    let config = std::fs::read_to_string(src.join("config.json")).unwrap();
    let write_config = |text: &str| std::fs::write(out.join("config.json"), text).unwrap();

    write_config(&config.replace("\"llama\"", "\"gpt_neox\""));
    let err = HfModel::open(&out, 16).unwrap_err().to_string();
    assert!(
        err.contains("gpt_neox") && err.contains("llama, mistral, qwen2"),
        "{err}"
    );

    write_config(&config);
    let err = HfModel::open(&out, 16)
        .unwrap()
        .load_all()
        .unwrap_err()
        .to_string();
    assert!(err.contains("neither model.safetensors"), "{err}");

    // Truncated weights.
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    std::fs::write(out.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let err = HfModel::open(&out, 16)
        .unwrap()
        .load_all()
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated"), "{err}");

    // A shape that disagrees with config.json.
    std::fs::write(out.join("model.safetensors"), &bytes).unwrap();
    write_config(&config.replace("\"intermediate_size\": 96", "\"intermediate_size\": 64"));
    let err = HfModel::open(&out, 16)
        .unwrap()
        .load_all()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("of shape") && err.contains("config.json implies"),
        "{err}"
    );

    // A tokenizer with more ids than the model.
    write_config(&config.replace("\"vocab_size\": 320", "\"vocab_size\": 300"));
    std::fs::copy(src.join("tokenizer.json"), out.join("tokenizer.json")).unwrap();
    let err = HfModel::open(&out, 16)
        .unwrap()
        .tokenizer()
        .unwrap_err()
        .to_string();
    assert!(err.contains("320 ids") && err.contains("300"), "{err}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn a_byte_model_exports_to_a_llama_folder_with_a_byte_level_tokenizer() {
    let decoder = tessera::nn::DecoderConfig::llama(256, 1, 16, 2, 8);
    let params = decoder.init(3).unwrap();
    let config = hf::HfConfig::for_decoder(&decoder, 8).unwrap();
    let out = scratch("bytes");
    hf::export(&out, &config, &params, None, hf::DEFAULT_MAX_SHARD_BYTES).unwrap();
    let again = HfModel::open(&out, 8).unwrap();
    assert_eq!(again.config.decoder, decoder);
    let tok = again.tokenizer().unwrap();
    assert_eq!(tok.vocab_size(), 256);
    assert_eq!(tok.encode("ab").unwrap(), vec![97, 98]);
    let loaded = again.load_all().unwrap();
    for (a, b) in loaded.flatten().iter().zip(params.flatten()) {
        assert_eq!(a.converted(DType::F32).to_vec(), b.to_vec());
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn greedy_generation_gives_the_tokens_transformers_generates() {
    let client = tessera::pjrt::Client::cpu(1).unwrap();
    for name in CASES {
        let want = expected(name);
        let model = HfModel::open(&case_dir(name), 16).unwrap();
        let prompt = ids(&want["prompt_ids"]);
        let options = tessera::generate::GenerateOptions {
            max_new_tokens: want["max_new_tokens"].as_u64().unwrap() as usize,
            eos_token_ids: model.eos_token_ids(),
            ..Default::default()
        };
        let params = model.load_all().unwrap();
        let got =
            tessera::generate::generate(&client, &model.config.decoder, &params, &prompt, &options)
                .unwrap();
        assert_eq!(got.ids, ids(&want["greedy_new_ids"]), "{name}");
    }
}

#[test]
fn sampling_is_reproduced_by_its_seed_and_varies_with_it() {
    let client = tessera::pjrt::Client::cpu(1).unwrap();
    let model = HfModel::open(&case_dir("llama_gqa"), 16).unwrap();
    let params = model.load_all().unwrap();
    let mut generator =
        tessera::generate::Generator::new(&client, model.config.decoder, &params).unwrap();
    let sample = |generator: &mut tessera::generate::Generator, seed| {
        let options = tessera::generate::GenerateOptions {
            max_new_tokens: 12,
            temperature: 1.5,
            top_k: Some(50),
            top_p: Some(0.95),
            seed,
            ..Default::default()
        };
        generator.generate(&[1, 54, 74], &options).unwrap().ids
    };
    let (a, b, c) = (
        sample(&mut generator, 7),
        sample(&mut generator, 7),
        sample(&mut generator, 8),
    );
    assert_eq!(a, b);
    assert_ne!(a, c);
    // A prompt longer than the model's positions is refused.
    let long = vec![1i64; 200];
    let options = tessera::generate::GenerateOptions {
        max_positions: Some(model.config.max_positions),
        ..Default::default()
    };
    let err = generator.generate(&long, &options).unwrap_err().to_string();
    assert!(
        err.contains("200 tokens") && err.contains("128 positions"),
        "{err}"
    );
}

#[test]
fn tessera_generate_prints_the_greedy_tokens_as_one_json_line() {
    let want = expected("llama3_tied");
    let dir = case_dir("llama3_tied");
    let line = tessera_tests::tessera_last_line(&[
        "generate",
        "--model-dir",
        dir.to_str().unwrap(),
        "--prompt",
        want["prompt"].as_str().unwrap(),
        "--max-new-tokens",
        "12",
        "--json",
    ]);
    let got: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ids(&got["prompt_ids"]), ids(&want["prompt_ids"]));
    assert_eq!(ids(&got["ids"]), ids(&want["greedy_new_ids"]));
    assert!(got["tokens_per_second"].as_f64().unwrap() > 0.0);
    assert!(got["text"].is_string());
}
