//! What `tessera plan` ranks from: each remat policy's measured part costs per micro-batch size
//! and group size, the stages of the fastest layouts measured as they run, and the link between
//! two devices, each cached under the plan cache folder by a key naming what was measured (a
//! second run reuses them; `--remeasure` measures again).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tessera_schedule::search::{Candidate, Link, RowCosts, Space, search, shapes};
use tessera_schedule::stage_costs::{LayoutFactors, StageCosts, StageLayout, layouts_to_measure};
use tessera_schedule::variants::{Variant, merge_rankings};

use super::Args;
use crate::cli::train::profile;

/// The measured costs and link a search needs, from the cache or measured now.
pub(super) struct Measurements {
    /// Per remat policy, rows per device and group size, the costs.
    costs: BTreeMap<(String, u32, u32), RowCosts>,
    pub(super) link: Link,
    /// Per size measured now or read from the cache, what happened (for the user).
    pub(super) notes: Vec<String>,
    /// The cache folder.
    pub(super) dir: PathBuf,
    /// The device kind and the plugin, as the cache keys name them.
    kind: String,
    plugin: String,
}

#[derive(Serialize, Deserialize)]
struct CachedStages {
    key: String,
    stages: Vec<StageCosts>,
    factors: LayoutFactors,
}

#[derive(Serialize, Deserialize)]
struct CachedCosts {
    key: String,
    costs: RowCosts,
}

#[derive(Serialize, Deserialize)]
struct CachedLink {
    key: String,
    link: Link,
}

/// A cache entry, with the key of what it was measured for.
pub(super) trait Cached: serde::de::DeserializeOwned {
    fn key(&self) -> &str;
}

impl Cached for CachedCosts {
    fn key(&self) -> &str {
        &self.key
    }
}

impl Cached for CachedLink {
    fn key(&self) -> &str {
        &self.key
    }
}

impl Cached for CachedStages {
    fn key(&self) -> &str {
        &self.key
    }
}

/// The entry cached at `path` for `key` (none with `--remeasure`, or when it is missing, is
/// not such an entry, or was measured for another key).
pub(super) fn read_cache<T: Cached>(path: &Path, key: &str, remeasure: bool) -> Option<T> {
    if remeasure {
        return None;
    }
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<T>(&t).ok())
        .filter(|c| c.key() == key)
}

/// What the cached costs hold; a new version measures again.
const COSTS_VERSION: u32 = 12;

/// A file name from a cache key.
pub(super) fn file_name(key: &str) -> String {
    key.chars()
        .map(
            |c| match c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                true => c,
                false => '_',
            },
        )
        .collect()
}

/// The plugin as the cache keys name it: `--plugin`, else `TESSERA_PJRT_PLUGIN`, else `cpu`.
pub(super) fn plugin_label(plugin: Option<&str>) -> String {
    plugin
        .map(str::to_string)
        .or_else(|| std::env::var(tessera_pjrt::PLUGIN_ENV).ok())
        .unwrap_or_else(|| "cpu".into())
}

/// The device kind of the plugin's first device and whether it is a CPU.
pub(super) fn device_kind(plugin: Option<&str>) -> anyhow::Result<(String, bool)> {
    let client = tessera_pjrt::Client::open(plugin, 1)?;
    let kind = client.device(0)?.kind()?;
    let platform = client.platform_name()?;
    Ok((
        format!("{platform}-{kind}"),
        platform.to_ascii_lowercase().contains("cpu"),
    ))
}

/// Times device-to-device copies of two sizes between devices 0 and 1: bandwidth and latency.
fn measure_link(plugin: Option<&str>, repeats: u32) -> anyhow::Result<Link> {
    let client = tessera_pjrt::Client::open(plugin, 2)?;
    let to = client.device(1)?;
    let time = |bytes: usize| -> anyhow::Result<f64> {
        let host = tessera_ir::Array::from_bytes(
            tessera_ir::DType::F32,
            &[bytes as i64 / 4],
            vec![0u8; bytes],
        )?;
        let buffer = tessera_pjrt::Buffer::from_host_to(&client, &host, 0)?;
        buffer.block_until_ready()?;
        let mut times = Vec::new();
        for i in 0..=repeats.max(1) {
            let began = std::time::Instant::now();
            let copy = buffer.copy_to_device(&to)?;
            copy.block_until_ready()?;
            if i > 0 {
                times.push(began.elapsed().as_secs_f64());
            }
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    };
    let (small, large) = (64 * 1024, 8 * 1024 * 1024);
    let (t_small, t_large) = (time(small)?, time(large)?);
    let bandwidth = match t_large > t_small {
        true => (large - small) as f64 / (t_large - t_small),
        false => large as f64 / t_large.max(1e-9),
    };
    let latency = (t_small - small as f64 / bandwidth).max(0.0);
    Ok(Link { bandwidth, latency })
}

/// The model under one remat policy and, for fully sharded stages, one FSDP gather mode: its
/// `tessera train` words and the cache key of its costs.
pub(super) struct ModelVariant {
    policy: tessera_mpmd::RematPolicy,
    fsdp: Option<tessera_mpmd::FsdpGather>,
    words: Vec<String>,
    key: String,
}

impl ModelVariant {
    pub(super) fn new(
        policy: tessera_mpmd::RematPolicy,
        fsdp: Option<tessera_mpmd::FsdpGather>,
        words: &[String],
        model_key: &str,
    ) -> ModelVariant {
        let name = policy.name();
        let mut words: Vec<String> = words
            .iter()
            .cloned()
            .chain(["--remat".to_string(), name.to_string()])
            .collect();
        let mut key = format!("{model_key} remat={name}");
        if let Some(when) = fsdp {
            words.extend(["--fsdp", "--fsdp-gather", when.name()].map(String::from));
            key.push_str(&format!(" fsdp={when}"));
        }
        ModelVariant {
            policy,
            fsdp,
            words,
            key,
        }
    }

    /// What its candidates are tagged with.
    pub(super) fn label(&self) -> Variant {
        let plain = Variant::remat(self.policy.name());
        match self.fsdp {
            Some(when) => plain.with_fsdp_gather(when.name()),
            None => plain,
        }
    }

    /// Its name for the costs it keeps and the notes.
    fn name(&self) -> String {
        match self.fsdp {
            Some(when) => format!("{}, FSDP gathered {when}", self.policy.name()),
            None => self.policy.name().to_string(),
        }
    }

    /// The variant whose costs on groups of one device stand for this one's: FSDP over one
    /// device shards nothing, so both gather modes run the same programs there.
    fn one_device_twin<'a>(&self, variants: &'a [ModelVariant]) -> Option<&'a ModelVariant> {
        let per_step = Some(tessera_mpmd::FsdpGather::PerStep);
        variants.iter().find(|v| {
            self.fsdp == Some(tessera_mpmd::FsdpGather::PerMicrobatch)
                && v.policy == self.policy
                && v.fsdp == per_step
        })
    }
}

/// Measures (or reads from the cache) the costs at every rows-per-device `space` needs, under
/// every variant.
pub(super) fn measurements(
    args: &Args,
    plugin: Option<&str>,
    space: &Space,
    variants: &[ModelVariant],
) -> anyhow::Result<Measurements> {
    let dir = match &args.cache {
        Some(dir) => dir.clone(),
        None => tessera_pjrt::cache_dir()
            .context("no cache folder: set HOME or pass --cache DIR")?
            .join("plan"),
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the plan cache {}", dir.display()))?;
    let (kind, _) = device_kind(plugin)?;
    let plugin = plugin_label(plugin);
    let mut notes = Vec::new();
    let mut sizes: Vec<(u32, u32)> = shapes(space)
        .iter()
        .map(|s| (s.rows(space.batch), s.data))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut costs = BTreeMap::new();
    for variant in variants {
        for &(r, d) in &sizes {
            let twin = variant.one_device_twin(variants).filter(|_| d == 1);
            if let Some(same) = twin.and_then(|t| costs.get(&(t.name(), r, d)).cloned()) {
                costs.insert((variant.name(), r, d), same);
                continue;
            }
            let measured = row_costs(args, space, variant, (r, d), (&dir, &kind, &plugin))?;
            notes.push(measured.1);
            costs.insert((variant.name(), r, d), measured.0);
        }
    }
    let key = format!("link device={kind} plugin={plugin}");
    let path = dir.join(format!("{}.json", file_name(&key)));
    let cached: Option<CachedLink> = read_cache(&path, &key, args.remeasure);
    let link = match cached {
        Some(c) => {
            notes.push(format!("link: reused {}", path.display()));
            c.link
        }
        None => {
            let link = measure_link(Some(plugin.as_str()), args.repeats.max(5))?;
            std::fs::write(
                &path,
                serde_json::to_string_pretty(&CachedLink {
                    key: key.clone(),
                    link,
                })?,
            )?;
            notes.push(format!("link: measured, cached in {}", path.display()));
            link
        }
    };
    Ok(Measurements {
        costs,
        link,
        notes,
        dir,
        kind,
        plugin,
    })
}

/// The costs of `variant` at `r` rows per device on groups of `d` devices, from the cache in
/// `dir` or measured now, and a note saying which.
fn row_costs(
    args: &Args,
    space: &Space,
    variant: &ModelVariant,
    (r, d): (u32, u32),
    (dir, kind, plugin): (&Path, &str, &str),
) -> anyhow::Result<(RowCosts, String)> {
    let key = format!(
        "v{COSTS_VERSION} {} rows={r} group={d} of={} device={kind} plugin={plugin}",
        variant.key, space.devices
    );
    let path = dir.join(format!("{}.json", file_name(&key)));
    let label = format!("{r} rows on {d} device(s), {}", variant.name());
    if let Some(c) = read_cache::<CachedCosts>(&path, &key, args.remeasure) {
        return Ok((c.costs, format!("{label}: reused {}", path.display())));
    }
    let began = std::time::Instant::now();
    let c = profile::measure(
        &variant.words,
        Some(plugin),
        r,
        d,
        space.devices,
        args.repeats,
        space.cores,
    )?;
    let entry = CachedCosts {
        key: key.clone(),
        costs: c.clone(),
    };
    std::fs::write(&path, serde_json::to_string_pretty(&entry)?)
        .with_context(|| format!("writing {}", path.display()))?;
    let note = format!(
        "{label}: measured in {:.1} s, cached in {}",
        began.elapsed().as_secs_f64(),
        path.display()
    );
    Ok((c, note))
}

/// The ranking from `measured`, with the stages of its `--refine` fastest layouts measured as
/// compositions (from the cache or now): each round measures those not measured yet and ranks
/// again, until the fastest are all measured (each round measures a layout more, so this ends;
/// a layout measured in an earlier round keeps its times).
pub(super) fn refined_ranking(
    args: &Args,
    space: &Space,
    variants: &[ModelVariant],
    measured: &mut Measurements,
) -> anyhow::Result<Vec<Candidate>> {
    let mut ranked = ranking(space, variants, measured)?;
    let mut tried: Vec<(String, StageLayout)> = Vec::new();
    loop {
        let top: Vec<Candidate> = ranked.iter().take(args.refine).cloned().collect();
        let mut todo: Vec<(&ModelVariant, StageLayout)> = Vec::new();
        for variant in variants {
            let name = variant.name();
            let label = variant.label();
            let mine: Vec<Candidate> = top.iter().filter(|c| label.made(c)).cloned().collect();
            let costs =
                |rows: u32, data: u32| measured.costs.get(&(name.clone(), rows, data)).cloned();
            for layout in layouts_to_measure(&mine, mine.len(), &costs) {
                if !tried.contains(&(name.clone(), layout.clone())) {
                    todo.push((variant, layout));
                }
            }
        }
        if todo.is_empty() {
            break;
        }
        for (variant, layout) in todo {
            tried.push((variant.name(), layout.clone()));
            let (stages, factors) = stage_compositions(args, space, variant, measured, &layout)?;
            let key = (variant.name(), layout.rows, layout.data);
            if let Some(costs) = measured.costs.get_mut(&key) {
                costs.add_stages(&stages);
                costs.set_layout_factors(factors);
            }
        }
        ranked = ranking(space, variants, measured)?;
    }
    Ok(ranked)
}

/// Every variant's search from its measured costs, merged into one ranking (a layout of
/// one-device groups once: FSDP gathered per micro-batch there is its per-step twin).
fn ranking(
    space: &Space,
    variants: &[ModelVariant],
    measured: &Measurements,
) -> anyhow::Result<Vec<Candidate>> {
    let rankings = variants
        .iter()
        .map(|variant| {
            let name = variant.name();
            let costs =
                |rows: u32, data: u32| measured.costs.get(&(name.clone(), rows, data)).cloned();
            let mut ranked = search(&costs, space);
            if let (Ok(list), Some(_)) = (&mut ranked, variant.one_device_twin(variants)) {
                list.retain(|c| c.data > 1);
            }
            (variant.label(), ranked)
        })
        .collect();
    Ok(merge_rankings(rankings)?)
}

/// The stages of `layout` measured as compositions, and the layout's factors (its contention on
/// the run's groups, its fused actions'), from the cache or measured now.
fn stage_compositions(
    args: &Args,
    space: &Space,
    variant: &ModelVariant,
    measured: &mut Measurements,
    layout: &StageLayout,
) -> anyhow::Result<(Vec<StageCosts>, LayoutFactors)> {
    let counts: Vec<String> = layout.stage_layers.iter().map(usize::to_string).collect();
    let key = format!(
        "v{COSTS_VERSION} {} rows={} group={} of={} stages={} device={} plugin={}",
        variant.key,
        layout.rows,
        layout.data,
        space.devices,
        counts.join(","),
        measured.kind,
        measured.plugin
    );
    let path = measured.dir.join(format!("{}.json", file_name(&key)));
    let label = format!(
        "stages {} at {} rows on {} device(s), {}",
        counts.join(","),
        layout.rows,
        layout.data,
        variant.name()
    );
    let cached: Option<CachedStages> = read_cache(&path, &key, args.remeasure);
    if let Some(c) = cached {
        measured
            .notes
            .push(format!("{label}: reused {}", path.display()));
        return Ok((c.stages, c.factors));
    }
    let began = std::time::Instant::now();
    let (stages, factors) = profile::measure_stages(
        &variant.words,
        Some(measured.plugin.as_str()),
        layout.rows,
        layout.data,
        space.devices,
        args.repeats,
        space.cores,
        &layout.stage_layers,
    )?;
    let entry = CachedStages {
        key: key.clone(),
        stages: stages.clone(),
        factors: factors.clone(),
    };
    std::fs::write(&path, serde_json::to_string_pretty(&entry)?)
        .with_context(|| format!("writing {}", path.display()))?;
    measured.notes.push(format!(
        "{label}: measured in {:.1} s, cached in {}",
        began.elapsed().as_secs_f64(),
        path.display()
    ));
    Ok((stages, factors))
}
