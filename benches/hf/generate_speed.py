"""The transformers side of `cargo xtask bench --generate`: greedy generation speed of PyTorch
on the CPU, on the same Llama folder `tessera generate` runs.

Usage (torch 2.5.1, transformers 4.57.1, tokenizers 0.22.1; not installed by `cargo xtask
setup`, point TESSERA_TORCH_PYTHON at a Python that has them):
    python generate_speed.py make DIR TOKENIZER_JSON   # a random Llama folder (seeded)
    python generate_speed.py time DIR PROMPT NEW_TOKENS
        # one warm-up generation, then one timed: prints {"tokens_per_second", "ids"}

The model: 8 layers, width 512, 8 query and 4 key/value heads, MLP 1408, vocabulary 8192,
1024 positions (33M parameters), float32, eager attention.
"""
import json, os, shutil, sys, time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast


def make(folder, tokenizer_json):
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=8192,
                         max_position_embeddings=1024, rms_norm_eps=1e-6, bos_token_id=1,
                         eos_token_id=2, rope_theta=10000.0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(tokenizer_json, os.path.join(folder, "tokenizer.json"))


def timed(folder, prompt, new_tokens):
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(folder, "tokenizer.json"))
    ids = torch.tensor([tok(prompt)["input_ids"]])
    kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                  attention_mask=torch.ones_like(ids), pad_token_id=2)
    with torch.no_grad():
        model.generate(ids, **kwargs)
        start = time.perf_counter()
        out = model.generate(ids, **kwargs)[0].tolist()[ids.shape[1]:]
        seconds = time.perf_counter() - start
    print(json.dumps(dict(tokens_per_second=len(out) / seconds, ids=out,
                          threads=torch.get_num_threads())))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        timed(sys.argv[2], sys.argv[3], int(sys.argv[4]))
