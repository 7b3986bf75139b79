//! Parameter trees: nested, named, ordered. A tree flattens to its leaves in depth-first order
//! (children in the order they were added), which is the argument order of traced programs, and
//! a flat list of values is put back into the same structure with [`Tree::unflatten`].

use crate::error::{NnError, Result};

/// A tree of named nodes whose leaves hold `T` (shapes, arrays, traced tensors, ...).
#[derive(Debug, Clone, PartialEq)]
pub enum Tree<T> {
    /// A value.
    Leaf(T),
    /// Named children, in order.
    Node(Vec<(String, Tree<T>)>),
}

impl<T> Tree<T> {
    /// A node of named children.
    pub fn node<S: Into<String>>(children: impl IntoIterator<Item = (S, Tree<T>)>) -> Self {
        Tree::Node(children.into_iter().map(|(n, t)| (n.into(), t)).collect())
    }

    /// The leaves, depth first.
    pub fn leaves(&self) -> Vec<&T> {
        let mut out = Vec::new();
        self.visit("", &mut |_, leaf| out.push(leaf));
        out
    }

    /// The dotted path of every leaf (`blocks.0.attn.wqkv`), in [`Tree::leaves`] order.
    pub fn paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit("", &mut |path, _| out.push(path.to_owned()));
        out
    }

    /// The number of leaves.
    pub fn len(&self) -> usize {
        self.leaves().len()
    }

    /// Whether the tree has no leaf.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn visit<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(&str, &'a T)) {
        match self {
            Tree::Leaf(value) => f(prefix, value),
            Tree::Node(children) => {
                for (name, child) in children {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    child.visit(&path, f);
                }
            }
        }
    }

    /// The same structure with `f(path, leaf)` at each leaf.
    pub fn map<U>(&self, f: &mut impl FnMut(&str, &T) -> U) -> Tree<U> {
        let infallible: Result<Tree<U>, std::convert::Infallible> =
            self.try_map(&mut |path, leaf| Ok(f(path, leaf)));
        match infallible {
            Ok(tree) => tree,
            Err(never) => match never {},
        }
    }

    /// The same structure with `f(path, leaf)` at each leaf, stopping at the first error.
    pub fn try_map<U, E>(
        &self,
        f: &mut impl FnMut(&str, &T) -> Result<U, E>,
    ) -> Result<Tree<U>, E> {
        self.try_map_at("", f)
    }

    fn try_map_at<U, E>(
        &self,
        prefix: &str,
        f: &mut impl FnMut(&str, &T) -> Result<U, E>,
    ) -> Result<Tree<U>, E> {
        match self {
            Tree::Leaf(value) => Ok(Tree::Leaf(f(prefix, value)?)),
            Tree::Node(children) => children
                .iter()
                .map(|(name, child)| {
                    let path = if prefix.is_empty() {
                        name.clone()
                    } else {
                        format!("{prefix}.{name}")
                    };
                    Ok((name.clone(), child.try_map_at(&path, f)?))
                })
                .collect::<Result<Vec<_>, E>>()
                .map(Tree::Node),
        }
    }

    /// `values` put into this tree's structure, in [`Tree::leaves`] order.
    pub fn unflatten<U>(&self, values: Vec<U>) -> Result<Tree<U>> {
        let (expected, actual) = (self.len(), values.len());
        let mut values = values.into_iter();
        let count_error = || NnError::LeafCount { expected, actual };
        if actual != expected {
            return Err(count_error());
        }
        self.try_map(&mut |_, _| values.next().ok_or_else(count_error))
    }

    /// The subtree at a dotted path (`""` is the tree itself).
    pub fn get(&self, path: &str) -> Result<&Tree<T>> {
        let mut node = self;
        for part in path.split('.').filter(|p| !p.is_empty()) {
            node = match node {
                Tree::Node(children) => children
                    .iter()
                    .find(|(name, _)| name == part)
                    .map(|(_, child)| child),
                Tree::Leaf(_) => None,
            }
            .ok_or_else(|| NnError::NoSuchPath {
                path: path.to_owned(),
                known: self.paths().join(", "),
            })?;
        }
        Ok(node)
    }

    /// The leaf at a dotted path.
    pub fn leaf(&self, path: &str) -> Result<&T> {
        match self.get(path)? {
            Tree::Leaf(value) => Ok(value),
            Tree::Node(_) => Err(NnError::NoSuchPath {
                path: format!("{path} (a node, not a leaf)"),
                known: self.paths().join(", "),
            }),
        }
    }

    /// Checks that `other` has this tree's paths, naming the first difference.
    pub fn check_same_structure<U>(&self, other: &Tree<U>) -> Result<()> {
        let (mine, theirs) = (self.paths(), other.paths());
        if mine == theirs {
            return Ok(());
        }
        let first = mine
            .iter()
            .zip(&theirs)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("`{a}` where the other has `{b}`"))
            .unwrap_or_else(|| format!("{} leaves against {}", mine.len(), theirs.len()));
        Err(NnError::Structure(first))
    }
}

impl<T: Clone> Tree<T> {
    /// The leaves, cloned, depth first: the argument list of a traced program.
    pub fn flatten(&self) -> Vec<T> {
        self.leaves().into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tree<i32> {
        Tree::node([
            ("embed", Tree::Leaf(1)),
            (
                "blocks",
                Tree::node([
                    (
                        "0",
                        Tree::node([("w", Tree::Leaf(2)), ("b", Tree::Leaf(3))]),
                    ),
                    (
                        "1",
                        Tree::node([("w", Tree::Leaf(4)), ("b", Tree::Leaf(5))]),
                    ),
                ]),
            ),
            ("head", Tree::Leaf(6)),
        ])
    }

    #[test]
    fn flatten_and_unflatten_round_trip() {
        let tree = sample();
        assert_eq!(tree.flatten(), vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(
            tree.paths(),
            [
                "embed",
                "blocks.0.w",
                "blocks.0.b",
                "blocks.1.w",
                "blocks.1.b",
                "head"
            ]
        );
        let strings = tree.unflatten(tree.paths()).unwrap();
        assert_eq!(strings.leaf("blocks.1.b").unwrap(), "blocks.1.b");
        let back = tree.unflatten(tree.flatten()).unwrap();
        assert_eq!(back, tree);
    }

    #[test]
    fn wrong_counts_and_paths_are_errors() {
        let tree = sample();
        let err = tree.unflatten(vec![0; 5]).unwrap_err().to_string();
        assert!(err.contains("6 leaves") && err.contains("given 5"), "{err}");
        let err = tree.leaf("blocks.2.w").unwrap_err().to_string();
        assert!(
            err.contains("blocks.2.w") && err.contains("blocks.1.w"),
            "{err}"
        );
        let other = tree.map(&mut |p, v| if p == "head" { 0 } else { *v });
        tree.check_same_structure(&other).unwrap();
        let smaller = Tree::node([("embed", Tree::Leaf(1))]);
        assert!(tree.check_same_structure(&smaller).is_err());
    }

    #[test]
    fn try_map_stops_at_the_first_error() {
        let tree = sample();
        let doubled: Result<Tree<i32>, String> = tree.try_map(&mut |_, v| Ok(v * 2));
        assert_eq!(doubled.unwrap().flatten(), vec![2, 4, 6, 8, 10, 12]);
        let failed: Result<Tree<i32>, String> =
            tree.try_map(&mut |p, v| if *v == 4 { Err(p.to_owned()) } else { Ok(*v) });
        assert_eq!(failed.unwrap_err(), "blocks.1.w");
    }
}
