//! Donation in the update (JAX's `donate_argnums` for a step): each donated step argument must be
//! read by exactly one update piece, running on a group, which returns a result of the same type
//! and layout;
//! that piece's module aliases the argument to the result (`tf.aliasing_output`), so the update
//! writes the new parameter into the old one's buffers. Arguments donated *where possible*
//! (`MpmdJitOptions::donate_where_possible`, e.g. optimizer state) are donated when they meet
//! those conditions and kept otherwise (e.g. a small state the update computes on the host).

use super::config;
use super::update::{Piece, Place};
use crate::driver::DriverError;

/// What donation gives the update: for each piece, per input, the result it is donated to; and
/// the step arguments donated.
pub(super) struct Donation {
    pub aliases: Vec<Vec<Option<usize>>>,
    pub donated: Vec<usize>,
}

/// The aliases of `donate` (each must be donatable, else an error names why) and of those of
/// `where_possible` that are (the others are kept). `same_layout(i, k)`: whether update input `i`
/// and step result `k` are laid out alike in their group (their buffers have one size).
pub(super) fn aliases(
    pieces: &[Piece],
    donate: &[usize],
    where_possible: &[usize],
    num_args: usize,
    same_layout: &dyn Fn(usize, usize) -> bool,
) -> Result<Donation, DriverError> {
    let mut aliases: Vec<Vec<Option<usize>>> =
        pieces.iter().map(|p| vec![None; p.inputs.len()]).collect();
    let mut taken: Vec<Vec<bool>> = pieces
        .iter()
        .map(|p| vec![false; p.outputs.len()])
        .collect();
    let mut donated = Vec::new();
    let optional = where_possible.iter().filter(|a| !donate.contains(a));
    for (&arg, required) in donate
        .iter()
        .map(|a| (a, true))
        .chain(optional.map(|a| (a, false)))
    {
        if arg >= num_args {
            return Err(config(format!(
                "donate_argnums names argument {arg}, but the step takes {num_args}"
            )));
        }
        match alias(pieces, &taken, arg, same_layout) {
            Ok((p, j, output)) => {
                taken[p][output] = true;
                aliases[p][j] = Some(output);
                donated.push(arg);
            }
            Err(why) if required => return Err(config(why)),
            Err(_) => {}
        }
    }
    Ok(Donation { aliases, donated })
}

/// The piece reading `arg`, its input position there, and the result `arg` can be donated to;
/// or why it cannot be donated.
fn alias(
    pieces: &[Piece],
    taken: &[Vec<bool>],
    arg: usize,
    same_layout: &dyn Fn(usize, usize) -> bool,
) -> Result<(usize, usize, usize), String> {
    let readers: Vec<(usize, usize)> = pieces
        .iter()
        .enumerate()
        .flat_map(|(p, piece)| {
            piece
                .inputs
                .iter()
                .enumerate()
                .filter(move |&(_, &i)| i == arg)
                .map(move |(j, _)| (p, j))
        })
        .collect();
    let [(p, j)] = readers[..] else {
        return Err(format!(
            "argument {arg} is donated but {} pieces of the update read it; donate an argument only one update on a group reads (a parameter)",
            readers.len()
        ));
    };
    let piece = &pieces[p];
    if piece.place == Place::Host {
        return Err(format!(
            "argument {arg} is donated but the update reading it runs on the host; donate parameters"
        ));
    }
    let jaxpr = &piece.program.jaxpr;
    let want = jaxpr.aval(jaxpr.invars[j]);
    let out_avals = jaxpr.out_avals();
    let output = (0..out_avals.len())
        .find(|&o| {
            !taken[p][o]
                && out_avals[o].shape == want.shape
                && out_avals[o].dtype == want.dtype
                && same_layout(arg, piece.outputs[o])
        })
        .ok_or_else(|| {
            format!(
                "argument {arg} ({want}) is donated, but its update returns no result of its type and layout left to reuse its buffers"
            )
        })?;
    Ok((p, j, output))
}
