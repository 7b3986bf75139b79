//! Generation programs with a key/value cache: a prefill program runs the prompt and fills the
//! cache, a decode program takes one token at a position and extends it. Both are compiled once
//! per shape (prompt length, cache length), not per token; the cache stays where the programs
//! run. Llama-style decoders only (GPT-2's learned positions would need slicing by position).
//!
//! The cache holds, per layer, keys and values `[1, kv_heads, cache_len, head_dim]` in the
//! compute dtype: `2 × layers` arrays, layer by layer, each layer's keys before its values.
//! Dynamic rope scaling follows `transformers`' generation: the prefill's frequencies are those
//! of the prompt's length, each decode step's those of its position + 1 (computed in the
//! program, so a step past `max_position_embeddings` rotates its token with a larger base while
//! the cached keys keep theirs).

use tessera_ir::trace::Tensor;
use tessera_ir::{ClosedJaxpr, DType, ShapedArray};

use crate::decoder::{DecoderConfig, DecoderKind, trace_fallible};
use crate::error::{NnError, Result};
use crate::rope::RopeLen;
use crate::tree::Tree;

impl DecoderConfig {
    /// The type of each cache array for `cache_len` positions.
    pub fn cache_aval(&self, cache_len: i64) -> ShapedArray {
        ShapedArray::new(
            self.compute_dtype,
            &[1, self.kv_heads, cache_len, self.head_dim],
        )
    }

    fn check_generation(&self, prompt_len: i64, cache_len: i64) -> Result<()> {
        self.validate()?;
        if self.kind != DecoderKind::Llama {
            return Err(NnError::Config(
                "generation with a key/value cache needs a Llama-style decoder (rotary \
                 positions); GPT-2 style ones are not supported"
                    .into(),
            ));
        }
        if prompt_len < 1 || cache_len < prompt_len {
            return Err(NnError::Config(format!(
                "a prompt of {prompt_len} tokens needs a cache of at least as many positions \
                 (got {cache_len}) and at least one token"
            )));
        }
        Ok(())
    }

    /// The prefill program: `(tokens [1, prompt_len] i32, parameters...) -> (logits [vocab]
    /// f32 of the last position, cache...)`, the cache of `cache_len` positions holding the
    /// prompt's keys and values in its first `prompt_len`.
    pub fn prefill(&self, prompt_len: i64, cache_len: i64) -> Result<ClosedJaxpr> {
        self.check_generation(prompt_len, cache_len)?;
        let spec = self.avals();
        let mut avals = vec![ShapedArray::new(DType::I32, &[1, prompt_len])];
        avals.extend(spec.flatten());
        trace_fallible(&avals, |args| {
            let p = spec.unflatten(args[1..].to_vec())?;
            let positions = args[0].iota_along(&[prompt_len], 0);
            let zero = args[0].literal_zero(DType::I32);
            let len = RopeLen::Fixed(prompt_len);
            self.cached_forward(&args[0], &p, &positions, len, cache_len, |_, new| {
                let empty = new
                    .literal_zero(self.compute_dtype)
                    .broadcast_in_dim(&self.cache_aval(cache_len).shape, &[]);
                empty.dynamic_update_slice(new, &[&zero, &zero, &zero, &zero])
            })
        })
    }

    /// The decode program: `(token [1, 1] i32, position i32, parameters..., cache...) ->
    /// (logits [vocab] f32, cache...)`: the token at `position` attends to the cache's first
    /// `position` entries and itself, and its keys and values are written at `position`.
    pub fn decode(&self, cache_len: i64) -> Result<ClosedJaxpr> {
        self.check_generation(1, cache_len)?;
        let spec = self.avals();
        let n = spec.len();
        let mut avals = vec![
            ShapedArray::new(DType::I32, &[1, 1]),
            ShapedArray::new(DType::I32, &[]),
        ];
        avals.extend(spec.flatten());
        avals.extend((0..2 * self.layers).map(|_| self.cache_aval(cache_len)));
        trace_fallible(&avals, |args| {
            let caches = &args[2 + n..];
            let p = spec.unflatten(args[2..2 + n].to_vec())?;
            let position = &args[1];
            let positions = position.broadcast_in_dim(&[1], &[]);
            let zero = position.literal_zero(DType::I32);
            let one_more = position + &position.full_like_scalar(1.0);
            let len = RopeLen::Traced(&one_more);
            self.cached_forward(&args[0], &p, &positions, len, cache_len, |slot, new| {
                caches[slot].dynamic_update_slice(new, &[&zero, &zero, position, &zero])
            })
        })
    }

    /// Runs `tokens` (`[1, t]`, at `positions`) through the decoder, each layer's new keys and
    /// values stored by `store(slot, new)` (slot `2 layer` for keys, `2 layer + 1` for values)
    /// into a cache of `cache_len` positions that the tokens then attend over; returns the last
    /// position's logits and the caches in slot order.
    fn cached_forward(
        &self,
        tokens: &Tensor,
        p: &Tree<Tensor>,
        positions: &Tensor,
        rope_len: RopeLen<'_>,
        cache_len: i64,
        mut store: impl FnMut(usize, &Tensor) -> Tensor,
    ) -> Result<Vec<Tensor>> {
        let t = tokens.shape()[1];
        let cast = |tree: &Tree<Tensor>| tree.map(&mut |_, x| x.astype(self.compute_dtype));
        let embed = cast(p.get("embed")?);
        let mut h = self.embedding().apply(embed.get("tokens")?, tokens)?;
        let key_positions = tokens.iota_along(&[cache_len], 0);
        let mut caches = Vec::new();
        for layer in 0..self.layers {
            let block = cast(p.get(&format!("blocks.{layer}"))?);
            let attn = self.attention(cache_len);
            let normed = self.norm(block.get("norm1")?, &h)?;
            let (q, k, v) = attn.project(block.get("attn")?, &normed, positions, rope_len)?;
            let (k, v) = (store(2 * layer, &k), store(2 * layer + 1, &v));
            let visible = attn.visible(positions, &key_positions);
            let out = attn.attend(&q, &k, &v, &visible);
            h = &h + &attn.output(block.get("attn")?, &out)?;
            let normed = self.norm(block.get("norm2")?, &h)?;
            h = &h + &self.mlp(block.get("mlp")?, &normed)?;
            caches.push(k);
            caches.push(v);
        }
        let last = Tensor::slice_axis(&h, 1, t - 1, t);
        let logits = self.final_logits(p, &last)?;
        let mut outs = vec![logits.reshape(&[self.vocab]).astype(DType::F32)];
        outs.extend(caches);
        Ok(outs)
    }
}
