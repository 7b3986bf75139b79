//! A Hugging Face folder in and out, as docs/hf-models.md shows it: open a Llama folder
//! (`tests/data/hf/llama_gqa`, a small random model with grouped-query heads), encode a prompt
//! with its tokenizer, generate greedily through the key/value cache, export the model as a new
//! folder, and generate the same tokens from the export.
//!
//! Run: `cargo run -p tessera-examples --example hf_generate [-- FOLDER]`.

use std::path::PathBuf;

use tessera::generate::{GenerateOptions, Generator};
use tessera::nn::hf::{self, HfModel};

fn greedy(model: &HfModel, prompt: &str) -> anyhow::Result<(Vec<i64>, String)> {
    let tokenizer = model.tokenizer()?;
    let prompt: Vec<i64> = tokenizer
        .encode(prompt)?
        .into_iter()
        .map(i64::from)
        .collect();
    let params = model.load_all()?;
    let client = tessera::pjrt::Client::cpu(1)?;
    let mut generator = Generator::new(&client, model.config.decoder, &params)?;
    let options = GenerateOptions {
        max_new_tokens: 12,
        eos_token_ids: model.eos_token_ids(),
        ..Default::default()
    };
    let ids = generator.generate(&prompt, &options)?.ids;
    let new: Vec<u32> = ids.iter().map(|&x| x as u32).collect();
    Ok((ids, tokenizer.decode(&new)?))
}

fn main() -> anyhow::Result<()> {
    let folder = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../tests/data/hf/llama_gqa"
            ))
        });
    let model = HfModel::open(&folder, 1)?;
    let (ids, text) = greedy(&model, "The quick brown")?;
    println!(
        "{} continues the prompt with {ids:?}: {text:?}",
        folder.display()
    );

    let out = std::env::temp_dir().join(format!("tessera-hf-example-{}", std::process::id()));
    let params = model.load_all()?;
    let tokenizer = folder.join("tokenizer.json");
    hf::export(
        &out,
        &model.config,
        &params,
        Some(&tokenizer),
        hf::DEFAULT_MAX_SHARD_BYTES,
    )?;
    let (again, _) = greedy(&HfModel::open(&out, 1)?, "The quick brown")?;
    std::fs::remove_dir_all(&out)?;
    anyhow::ensure!(again == ids, "the export generates {again:?}, not {ids:?}");
    println!("its export in {} generates the same tokens", out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn generates_from_a_folder_and_from_its_export_alike() -> anyhow::Result<()> {
        super::main()
    }
}
