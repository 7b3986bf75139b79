"""Small random Hugging Face Llama-family folders and what `transformers` computes with them.

Each case folder under OUT holds what a user downloads (config.json, the weights as safetensors,
tokenizer.json, generation_config.json) and `expected.json` + `expected.safetensors`: the tokens
of a fixed text, the logits at every position, the greedy continuation of a prompt
(`model.generate(do_sample=False)`) and the loss on a held-out text. Tessera's tests
(tests/hf_import.rs) check their own results against these.

Usage (pinned: torch 2.5.1, transformers 4.57.1, tokenizers 0.22.1, safetensors 0.4.5):
    python gen_hf_cases.py OUT                 # writes the case folders
    python gen_hf_cases.py --check-export DIR TEXT
        # loads an exported folder with transformers (warnings about missing or unexpected
        # keys are errors) and prints its tokens, logits and greedy continuation as JSON

The tokenizer is a byte-level BPE trained on the repository's own docs (README.md, docs/*.md),
with Llama's special tokens (<s> added at the start by the post-processor, </s> the end).
"""
import glob, json, os, shutil, sys, warnings

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
import transformers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
TEXT = ("Tessera trains pipelined decoders across many accelerators. "
        "The quick brown fox jumps over the lazy dog, 42 times!")
HELD_OUT = "Pipeline stages exchange activations; each backward reads its forward's residuals."
PROMPT = "The quick brown"
NEW_TOKENS = 12


def train_tokenizer(vocab):
    files = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(files, trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    return tok


BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, max_position_embeddings=128, rms_norm_eps=1e-6,
            hidden_act="silu", bos_token_id=1, eos_token_id=2, rope_theta=10000.0)

# name: (model_type, config overrides, on-disk dtype, shard size or None, rope spelling)
CASES = {
    "llama_gqa": ("llama", dict(num_key_value_heads=2, rope_theta=500000.0), "float32", None, "4"),
    "llama3_tied": ("llama", dict(num_key_value_heads=2, tie_word_embeddings=True,
                                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                    high_freq_factor=4.0,
                                                    original_max_position_embeddings=32)),
                    "float32", None, "4"),
    "llama_bias_head_dim": ("llama", dict(attention_bias=True, mlp_bias=True, head_dim=32),
                            "float32", None, "4"),
    "llama_sharded_bf16": ("llama", dict(num_key_value_heads=1), "bfloat16", "40KB", "4"),
    "llama_f16_linear": ("llama", dict(rope_scaling=dict(rope_type="linear", factor=2.0)),
                         "float16", None, "4"),
    "llama_dynamic_v5": ("llama", dict(rope_scaling=dict(rope_type="dynamic", factor=2.0),
                                       max_position_embeddings=16), "float32", None, "5"),
    "llama_yarn": ("llama", dict(rope_scaling=dict(rope_type="yarn", factor=4.0,
                                                   original_max_position_embeddings=32)),
                   "float32", None, "4"),
    "mistral_window": ("mistral", dict(num_key_value_heads=2, sliding_window=8), "float32", None, "4"),
    "qwen2": ("qwen2", dict(num_key_value_heads=2, use_sliding_window=False), "float32", None, "4"),
}


def make_config(model_type, overrides):
    cfg = dict(BASE, **overrides)
    cls = transformers.AutoConfig.for_model(model_type, **cfg)
    cls._attn_implementation = "eager"
    return cls


def rope_v5(config_path):
    """Rewrites config.json's rope settings the way transformers 5.x writes them."""
    with open(config_path) as f:
        cfg = json.load(f)
    params = dict(cfg.pop("rope_scaling", None) or {"rope_type": "default"})
    params["rope_theta"] = cfg.pop("rope_theta")
    cfg["rope_parameters"] = params
    with open(config_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)


def make_case(out, name, tok_dir):
    model_type, overrides, dtype, shard, spelling = CASES[name]
    torch.manual_seed(sum(map(ord, name)))
    config = make_config(model_type, overrides)
    config.vocab_size = VOCAB
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    # Larger weights than the init's 0.02 so the logits are far from uniform.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.dim() >= 1 and "norm" not in n:
                p.normal_(0.0, 0.2)
            elif "norm" in n:
                p.uniform_(0.5, 1.5)
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    on_disk = model.to(getattr(torch, dtype))
    on_disk.save_pretrained(folder, safe_serialization=True,
                            **({"max_shard_size": shard} if shard else {}))
    for f in os.listdir(tok_dir):
        shutil.copy(os.path.join(tok_dir, f), folder)
    # Reloaded as a user would, computing in float32; afresh for each result, as dynamic rope
    # keeps the longest sequence it has seen in the model's state.
    def fresh():
        return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager").eval()
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    ids = tok(TEXT)["input_ids"]
    with torch.no_grad():
        logits = fresh()(torch.tensor([ids])).logits[0]
        held = tok(HELD_OUT)["input_ids"]
        loss = fresh()(torch.tensor([held]), labels=torch.tensor([held])).loss.item()
        prompt = tok(PROMPT)["input_ids"]
        out_ids = fresh().generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS,
                                   do_sample=False, pad_token_id=config.eos_token_id,
                                   attention_mask=torch.ones(1, len(prompt), dtype=torch.long)
                                   )[0].tolist()
    if spelling == "5":
        rope_v5(os.path.join(folder, "config.json"))
    expected = dict(transformers=transformers.__version__, torch=torch.__version__,
                    text=TEXT, ids=ids, held_out=HELD_OUT, held_out_ids=held, held_out_loss=loss,
                    prompt=PROMPT, prompt_ids=prompt, greedy_new_ids=out_ids[len(prompt):],
                    max_new_tokens=NEW_TOKENS)
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
    save_file({"logits": logits.contiguous()}, os.path.join(folder, "expected.safetensors"))
    print(name, "tokens", len(ids), "loss", round(loss, 4), "greedy", out_ids[len(prompt):])


def check_export(folder, text):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model, info = AutoModelForCausalLM.from_pretrained(
            folder, dtype=torch.float32, attn_implementation="eager",
            output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"transformers reports {bad}")
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    ids = tok(text)["input_ids"]
    with torch.no_grad():
        logits = model.eval()(torch.tensor([ids])).logits[0]
        greedy = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                pad_token_id=model.config.eos_token_id)[0].tolist()[len(ids):]
    print(json.dumps(dict(ids=ids, logits=logits.tolist(), greedy_new_ids=greedy)))


def main():
    global VOCAB
    if sys.argv[1] == "--check-export":
        return check_export(sys.argv[2], sys.argv[3])
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tok = train_tokenizer(320)
    VOCAB = tok.get_vocab_size()
    tok_dir = os.path.join(out, ".tokenizer")
    os.makedirs(tok_dir, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(tok_dir)
    for name in CASES:
        make_case(out, name, tok_dir)
    shutil.rmtree(tok_dir)


if __name__ == "__main__":
    main()
