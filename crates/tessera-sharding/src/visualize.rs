//! A text picture of which device holds which block (like `jax.debug.visualize_array_sharding`).
//!
//! Rank 1 arrays are drawn as one row of blocks, rank 2 arrays as a grid, each cell naming its
//! devices; higher ranks are drawn over their first two dimensions, each cell listing the blocks
//! of the other dimensions as `[start:stop,...]` before their devices.

use crate::error::Result;
use crate::named::{Block, NamedSharding};

/// The blocks of an array and the (sorted) devices holding each, in first-seen order.
pub fn block_owners(sharding: &NamedSharding, shape: &[i64]) -> Result<Vec<(Block, Vec<i64>)>> {
    let mut out: Vec<(Block, Vec<i64>)> = Vec::new();
    for (device, block) in sharding.devices_indices_map(shape)? {
        match out.iter_mut().find(|(b, _)| *b == block) {
            Some((_, devs)) => devs.push(device),
            None => out.push((block, vec![device])),
        }
    }
    for (_, devs) in &mut out {
        devs.sort_unstable();
    }
    Ok(out)
}

/// The row and column range of a block: rank 1 is drawn as one row, scalars as one cell.
fn row_col(block: &Block) -> ((i64, i64), (i64, i64)) {
    match block.as_slice() {
        [] => ((0, 1), (0, 1)),
        [only] => ((0, 1), *only),
        [row, col, ..] => (*row, *col),
    }
}

fn label(block: &Block, devs: &[i64]) -> String {
    let devs = devs
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join(",");
    if block.len() > 2 {
        let rest: Vec<String> = block[2..].iter().map(|(a, b)| format!("{a}:{b}")).collect();
        format!("[{}] {devs}", rest.join(","))
    } else {
        format!("dev {devs}")
    }
}

/// Draws the grid of blocks of an array of this shape.
pub fn picture(sharding: &NamedSharding, shape: &[i64]) -> Result<String> {
    let owners = block_owners(sharding, shape)?;
    let mut rows: Vec<(i64, i64)> = Vec::new();
    let mut cols: Vec<(i64, i64)> = Vec::new();
    for (block, _) in &owners {
        let (row, col) = row_col(block);
        if !rows.contains(&row) {
            rows.push(row);
        }
        if !cols.contains(&col) {
            cols.push(col);
        }
    }
    rows.sort_unstable();
    cols.sort_unstable();
    let cell = |row: (i64, i64), col: (i64, i64)| {
        let labels: Vec<String> = owners
            .iter()
            .filter(|(b, _)| row_col(b) == (row, col))
            .map(|(b, d)| label(b, d))
            .collect();
        labels.join(" | ")
    };
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|&r| cols.iter().map(|&c| cell(r, c)).collect())
        .collect();
    let width = cells
        .iter()
        .flatten()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(1)
        + 2;
    let line = |l: &str, m: &str, r: &str| {
        let seg = "─".repeat(width);
        format!("{l}{}{r}\n", vec![seg; cols.len()].join(m))
    };
    let mut out = line("┌", "┬", "┐");
    for (i, row) in cells.iter().enumerate() {
        if i > 0 {
            out.push_str(&line("├", "┼", "┤"));
        }
        out.push('│');
        for text in row {
            out.push_str(&format!("{text:^width$}│"));
        }
        out.push('\n');
    }
    out.push_str(&line("└", "┴", "┘"));
    Ok(out)
}
