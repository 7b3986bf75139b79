//! Telling every `dot_product_attention` of a program (and its backward, in nested programs
//! too) how it may run per shard: the program is partitioned over a mesh whose batch and head
//! axes are named (`AttentionShards`). Values do not change; a lowering to a kernel XLA cannot
//! partition (cuDNN's) wraps the kernel in a manual region laid out that way.

use crate::jaxpr::{ClosedJaxpr, Jaxpr};
use crate::prim::{AttentionShards, Prim};

/// `closed` with each attention operation told `shards` (its JVP's and transpose's backward
/// operations inherit them from the forward's parameters).
pub fn shard_attention(closed: &ClosedJaxpr, shards: &AttentionShards) -> ClosedJaxpr {
    let mut jaxpr = closed.jaxpr.clone();
    rewrite(&mut jaxpr, shards);
    ClosedJaxpr {
        jaxpr,
        consts: closed.consts.clone(),
    }
}

fn rewrite(jaxpr: &mut Jaxpr, shards: &AttentionShards) {
    for eqn in &mut jaxpr.eqns {
        for (_, value) in eqn.params.entries_mut().iter_mut() {
            value.for_each_jaxpr_mut(&mut |inner| rewrite(&mut inner.jaxpr, shards));
        }
        if matches!(
            eqn.prim,
            Prim::DotProductAttention | Prim::DotProductAttentionBwd
        ) {
            let plain = AttentionShards::strip(&eqn.params);
            eqn.params = shards.add_to(plain);
        }
    }
}
