//! The stage graph: pipeline stages as nodes and the values crossing between them as edges, in a
//! `petgraph` graph. It checks that the stages form a DAG whose edges go forward (a value made in
//! stage `i` is read only by stages after `i`), gives the stages' topological order, and lists
//! for each exported value the stages that read it, which is where the runtime sends it.

use petgraph::algo::toposort;
use petgraph::graph::{DiGraph, NodeIndex};

use crate::pipeline::ActRef;

/// Stages and the values between them.
#[derive(Debug, Clone)]
pub struct StageGraph {
    graph: DiGraph<u32, ActRef>,
    nodes: Vec<NodeIndex>,
    exports: Vec<usize>,
}

/// Why a set of stage inputs is not a pipeline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StageGraphError {
    /// A stage reads a value of itself or of a later stage.
    #[error(
        "stage {stage} reads value {k} of stage {from}, which does not run before it; a stage may \
         read only values of earlier stages (check the order of the stage markers)"
    )]
    Backward {
        /// The reading stage.
        stage: u32,
        /// The producing stage.
        from: u32,
        /// The value's index among the producer's exports.
        k: usize,
    },
    /// A stage reads a value its producer does not export.
    #[error("stage {stage} reads value {k} of stage {from}, which exports only {exports} values")]
    NoSuchValue {
        /// The reading stage.
        stage: u32,
        /// The producing stage.
        from: u32,
        /// The missing index.
        k: usize,
        /// How many the producer exports.
        exports: usize,
    },
    /// The stages form a cycle.
    #[error("the stages form a cycle through stage {stage}")]
    Cycle {
        /// A stage on the cycle.
        stage: u32,
    },
}

impl StageGraph {
    /// The graph of stages whose `inputs[s]` are the values stage `s` reads, where stage `s`
    /// exports `exports[s]` values.
    pub fn new(inputs: &[Vec<ActRef>], exports: &[usize]) -> Result<StageGraph, StageGraphError> {
        let mut graph = DiGraph::new();
        let nodes: Vec<NodeIndex> = (0..inputs.len() as u32)
            .map(|s| graph.add_node(s))
            .collect();
        for (s, reads) in inputs.iter().enumerate() {
            for r in reads {
                let stage = s as u32;
                if r.stage >= stage {
                    return Err(StageGraphError::Backward {
                        stage,
                        from: r.stage,
                        k: r.k,
                    });
                }
                let count = exports.get(r.stage as usize).copied().unwrap_or(0);
                if r.k >= count {
                    return Err(StageGraphError::NoSuchValue {
                        stage,
                        from: r.stage,
                        k: r.k,
                        exports: count,
                    });
                }
                graph.add_edge(nodes[r.stage as usize], nodes[s], *r);
            }
        }
        toposort(&graph, None).map_err(|cycle| StageGraphError::Cycle {
            stage: graph[cycle.node_id()],
        })?;
        Ok(StageGraph {
            graph,
            nodes,
            exports: exports.to_vec(),
        })
    }

    /// The stages in an order where every producer comes before its consumers.
    pub fn topological_order(&self) -> Vec<u32> {
        toposort(&self.graph, None)
            .map(|order| order.into_iter().map(|n| self.graph[n]).collect())
            .unwrap_or_default()
    }

    /// For each export of stage `stage`, the stages that read it, in increasing order.
    pub fn consumers(&self, stage: u32) -> Vec<Vec<u32>> {
        let count = self.exports.get(stage as usize).copied().unwrap_or(0);
        let mut users = vec![Vec::new(); count];
        if let Some(&node) = self.nodes.get(stage as usize) {
            for edge in self.graph.edges(node) {
                use petgraph::visit::EdgeRef;
                let to = self.graph[edge.target()];
                let list: &mut Vec<u32> = &mut users[edge.weight().k];
                if !list.contains(&to) {
                    list.push(to);
                }
            }
        }
        for list in &mut users {
            list.sort_unstable();
        }
        users
    }

    /// Exports no later stage reads.
    pub fn unread(&self, stage: u32) -> Vec<usize> {
        self.consumers(stage)
            .iter()
            .enumerate()
            .filter(|(_, users)| users.is_empty())
            .map(|(k, _)| k)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(stage: u32, k: usize) -> ActRef {
        ActRef { stage, k }
    }

    #[test]
    fn a_residual_skipping_a_stage_has_two_consumers_and_a_topological_order() {
        // Stage 0 exports h and r; stage 1 reads h; stage 2 reads stage 1's value and r.
        let inputs = vec![vec![], vec![r(0, 0)], vec![r(1, 0), r(0, 1)]];
        let g = StageGraph::new(&inputs, &[2, 1, 0]).unwrap();
        assert_eq!(g.consumers(0), vec![vec![1], vec![2]]);
        assert_eq!(g.consumers(1), vec![vec![2]]);
        assert_eq!(g.topological_order(), vec![0, 1, 2]);
        assert!(g.unread(0).is_empty());
    }

    #[test]
    fn reading_a_later_stage_or_a_missing_value_is_refused() {
        let backward = StageGraph::new(&[vec![r(1, 0)], vec![]], &[0, 1]).unwrap_err();
        assert!(
            backward
                .to_string()
                .contains("stage 0 reads value 0 of stage 1")
        );
        let missing = StageGraph::new(&[vec![], vec![r(0, 3)]], &[1, 0]).unwrap_err();
        assert!(missing.to_string().contains("exports only 1 values"));
    }
}
