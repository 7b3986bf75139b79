//! Text generation from a trained decoder: the prefill program runs the prompt and fills a
//! key/value cache on the device, then the decode program runs once per new token. Each is
//! compiled once (the prefill per prompt length, the decode per cache length), the parameters
//! and the cache stay on the device, and only each step's logits come back to choose the next
//! token: the largest (greedy, temperature 0) or a sample after temperature, top-k and top-p,
//! reproducible from a seed.

use std::time::Instant;

use tessera_ir::{Array, ClosedJaxpr, DType};
use tessera_nn::{DecoderConfig, NnError, Rng, Tree};
use tessera_pjrt::{Array as DeviceArray, Client};
use tessera_sharding::{AbstractMesh, Mesh, NamedSharding, PartitionSpec};

use crate::jit::{Compiled, Jit, JitError};

/// Errors of generation.
#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    /// The model or a request it cannot serve.
    #[error(transparent)]
    Model(#[from] NnError),
    /// An array could not be built.
    #[error(transparent)]
    Array(#[from] tessera_ir::IrError),
    /// Compiling or running a program failed.
    #[error(transparent)]
    Run(#[from] JitError),
    /// Bad options or a prompt the model cannot take; the message says what to change.
    #[error("{0}")]
    Request(String),
}

/// How to choose each new token.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerateOptions {
    /// The most tokens to add.
    pub max_new_tokens: usize,
    /// 0 for greedy (the default); otherwise logits are divided by it before sampling.
    pub temperature: f64,
    /// Sample among the `k` likeliest tokens only.
    pub top_k: Option<usize>,
    /// Sample among the likeliest tokens whose probabilities sum to at least `p`.
    pub top_p: Option<f64>,
    /// The sampler's seed.
    pub seed: u64,
    /// Tokens that end generation (kept in the output); empty to always add `max_new_tokens`.
    pub eos_token_ids: Vec<i64>,
    /// The longest prompt the model takes (its `max_position_embeddings`), if it has one.
    pub max_positions: Option<i64>,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 32,
            temperature: 0.0,
            top_k: None,
            top_p: None,
            seed: 0,
            eos_token_ids: Vec::new(),
            max_positions: None,
        }
    }
}

/// What one generation produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    /// The new tokens only.
    pub ids: Vec<i64>,
    /// Seconds from the prefill's start to the last token (compilation excluded).
    pub seconds: f64,
}

impl Generation {
    /// New tokens per second.
    pub fn tokens_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.ids.len() as f64 / self.seconds
        } else {
            0.0
        }
    }
}

/// A decoder's parameters on one device, with its generation programs compiled on first use.
pub struct Generator {
    config: DecoderConfig,
    client: Client,
    one: NamedSharding,
    params: Vec<DeviceArray>,
    /// `(prompt_len, cache_len, program)`.
    prefill: Option<(i64, i64, Compiled)>,
    /// `(cache_len, program)`.
    decode: Option<(i64, Compiled)>,
}

impl Generator {
    /// Puts `params` (in `config`'s structure) on the first device of `client`.
    pub fn new(
        client: &Client,
        config: DecoderConfig,
        params: &Tree<Array>,
    ) -> Result<Self, GenerateError> {
        let abstract_mesh = AbstractMesh::auto(&[("x", 1)])
            .map_err(|e| GenerateError::Request(format!("one-device mesh: {e}")))?;
        let mesh = Mesh::new(abstract_mesh, vec![0])
            .map_err(|e| GenerateError::Request(format!("one-device mesh: {e}")))?;
        let one = NamedSharding::new(&mesh, PartitionSpec::replicated())
            .map_err(|e| GenerateError::Request(format!("one-device sharding: {e}")))?;
        let params = params
            .flatten()
            .iter()
            .map(|a| DeviceArray::device_put(client, &a.converted(DType::F32), &one))
            .collect::<Result<Vec<_>, _>>()
            .map_err(JitError::from)?;
        Ok(Generator {
            config,
            client: client.clone(),
            one,
            params,
            prefill: None,
            decode: None,
        })
    }

    fn compile(&self, program: ClosedJaxpr) -> Result<Compiled, GenerateError> {
        let (ins, outs) = (program.jaxpr.invars.len(), program.jaxpr.out_avals().len());
        let jit = Jit::new(
            program,
            vec![self.one.clone(); ins],
            vec![self.one.clone(); outs],
        )?;
        Ok(jit.lower()?.compile(&self.client)?)
    }

    fn put(&self, array: &Array) -> Result<DeviceArray, GenerateError> {
        Ok(DeviceArray::device_put(&self.client, array, &self.one).map_err(JitError::from)?)
    }

    /// The new tokens after `prompt_ids`, chosen as `options` say.
    pub fn generate(
        &mut self,
        prompt_ids: &[i64],
        options: &GenerateOptions,
    ) -> Result<Generation, GenerateError> {
        let prompt_len = prompt_ids.len() as i64;
        check_request(&self.config, prompt_ids, options)?;
        let cache_len = prompt_len + options.max_new_tokens as i64;
        if !matches!(&self.prefill, Some((p, c, _)) if *p == prompt_len && *c == cache_len) {
            let program = self.config.prefill(prompt_len, cache_len)?;
            self.prefill = Some((prompt_len, cache_len, self.compile(program)?));
        }
        if !matches!(&self.decode, Some((c, _)) if *c == cache_len) {
            let program = self.config.decode(cache_len)?;
            self.decode = Some((cache_len, self.compile(program)?));
        }
        let (Some((_, _, prefill)), Some((_, decode))) = (&self.prefill, &self.decode) else {
            return Err(GenerateError::Request(
                "the programs did not compile".into(),
            ));
        };
        let start = Instant::now();
        let tokens: Vec<i32> = prompt_ids.iter().map(|&x| x as i32).collect();
        let tokens = self.put(&Array::from_slice::<i32>(&[1, prompt_len], &tokens)?)?;
        let mut args: Vec<&DeviceArray> = vec![&tokens];
        args.extend(self.params.iter());
        let mut outs = prefill.call(&args)?;
        let mut rng = Rng::new(options.seed);
        let mut ids = Vec::new();
        for step in 0..options.max_new_tokens {
            let logits = outs[0].to_host().map_err(JitError::from)?.to_vec();
            let next = choose(&logits, options, &mut rng);
            ids.push(next);
            let last = step + 1 == options.max_new_tokens;
            if last || options.eos_token_ids.contains(&next) {
                break;
            }
            let token = self.put(&Array::from_slice::<i32>(&[1, 1], &[next as i32])?)?;
            let position = self.put(&Array::from_slice::<i32>(
                &[],
                &[(prompt_len as usize + step) as i32],
            )?)?;
            let mut args: Vec<&DeviceArray> = vec![&token, &position];
            args.extend(self.params.iter());
            args.extend(outs[1..].iter());
            outs = decode.call(&args)?;
        }
        Ok(Generation {
            ids,
            seconds: start.elapsed().as_secs_f64(),
        })
    }
}

/// Refuses what the model cannot generate, saying what to change. A prompt longer than the
/// model's positions is refused; generating past them is not (transformers warns and goes on,
/// and dynamic rope scaling is made for it).
fn check_request(
    config: &DecoderConfig,
    prompt_ids: &[i64],
    options: &GenerateOptions,
) -> Result<(), GenerateError> {
    let bad = |m: String| Err(GenerateError::Request(m));
    if prompt_ids.is_empty() {
        return bad("the prompt has no tokens; give some text".into());
    }
    if let Some(id) = prompt_ids.iter().find(|&&id| id < 0 || id >= config.vocab) {
        return bad(format!(
            "prompt token {id} is outside the model's {} ids",
            config.vocab
        ));
    }
    if options.max_new_tokens == 0 {
        return bad("--max-new-tokens must be at least 1".into());
    }
    if let Some(max) = options.max_positions {
        let n = prompt_ids.len() as i64;
        if n > max {
            return bad(format!(
                "the prompt has {n} tokens but the model takes at most {max} positions; \
                 shorten the prompt"
            ));
        }
    }
    let temperature_ok = options.temperature.is_finite() && options.temperature >= 0.0;
    if !temperature_ok
        || options
            .top_p
            .is_some_and(|p| p.is_nan() || p <= 0.0 || p > 1.0)
    {
        return bad("the temperature must be at least 0 and top-p in (0, 1]".into());
    }
    Ok(())
}

/// The next token from `logits`: the first largest when the temperature is 0, else a sample.
fn choose(logits: &[f64], options: &GenerateOptions, rng: &mut Rng) -> i64 {
    let argmax = |xs: &[f64]| {
        let mut best = 0;
        for (i, &x) in xs.iter().enumerate() {
            if x > xs[best] {
                best = i;
            }
        }
        best as i64
    };
    if options.temperature == 0.0 {
        return argmax(logits);
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let keep = options.top_k.unwrap_or(order.len()).clamp(1, order.len());
    order.truncate(keep);
    let top = logits[order[0]];
    let weights: Vec<f64> = order
        .iter()
        .map(|&i| ((logits[i] - top) / options.temperature).exp())
        .collect();
    let total: f64 = weights.iter().sum();
    let mut probs: Vec<f64> = weights.iter().map(|w| w / total).collect();
    if let Some(p) = options.top_p {
        let mut sum = 0.0;
        let cut = probs
            .iter()
            .position(|&q| {
                sum += q;
                sum >= p
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(cut);
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
    }
    let mut u = rng.uniform();
    for (k, q) in probs.iter().enumerate() {
        if u < *q {
            return order[k] as i64;
        }
        u -= q;
    }
    order[probs.len() - 1] as i64
}

/// Generates from `params` on `client`'s first device: [`Generator::generate`] once.
pub fn generate(
    client: &Client,
    config: &DecoderConfig,
    params: &Tree<Array>,
    prompt_ids: &[i64],
    options: &GenerateOptions,
) -> Result<Generation, GenerateError> {
    Generator::new(client, *config, params)?.generate(prompt_ids, options)
}
