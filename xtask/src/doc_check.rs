//! Checks of the documentation, run as unit tests by `cargo xtask test` (`cargo test -p xtask
//! doc_check`): every relative link of README.md and docs/**/*.md reaches a file (and its
//! `#anchor` a heading of it), docs/SUMMARY.md lists every guide page and only pages that exist,
//! the pages keep their line limits, and every error message docs/troubleshooting.md quotes (a
//! line starting with `> `) appears in the code of `crates/`.

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// README.md's most lines.
    const README_LINES: usize = 200;
    /// docs/ARCHITECTURE.md's most lines.
    const ARCHITECTURE_LINES: usize = 300;
    /// Every other guide page's most lines.
    const PAGE_LINES: usize = 400;
    /// Pages another piece of work regenerates, not held to the page limit yet.
    const UNLIMITED: &[&str] = &["docs/benchmarks.md", "docs/profiling.md"];

    fn root() -> PathBuf {
        crate::cmd::workspace_root()
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
    }

    /// Every file under `dir` whose name ends with `ext`, recursively, sorted.
    fn files_under(dir: &Path, ext: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            let entries = std::fs::read_dir(&d)
                .unwrap_or_else(|e| panic!("cannot list {}: {e}", d.display()));
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.to_string_lossy().ends_with(ext) {
                    out.push(path);
                }
            }
        }
        out.sort();
        out
    }

    /// README.md and every Markdown file under docs/.
    fn markdown_files() -> Vec<PathBuf> {
        let root = root();
        let mut files = vec![root.join("README.md")];
        files.extend(files_under(&root.join("docs"), ".md"));
        files
    }

    fn relative(path: &Path) -> String {
        path.strip_prefix(root())
            .unwrap_or(path)
            .to_string_lossy()
            .replace('\\', "/")
    }

    /// The lines of a Markdown text outside fenced code blocks, with their numbers from 1.
    fn prose_lines(text: &str) -> Vec<(usize, &str)> {
        let mut fence: Option<&str> = None;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let trimmed = line.trim_start();
            let marker = if trimmed.starts_with("```") {
                Some("```")
            } else if trimmed.starts_with("~~~") {
                Some("~~~")
            } else {
                None
            };
            match (fence, marker) {
                (None, Some(m)) => fence = Some(m),
                (Some(f), Some(m)) if f == m => fence = None,
                (None, None) => out.push((i + 1, line)),
                _ => {}
            }
        }
        out
    }

    /// A line with its inline code spans (`...`) blanked out.
    fn without_code_spans(line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
                out.push(' ');
            } else if in_code {
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        out
    }

    /// The targets of the inline links `[text](target)` of a line (code spans left out).
    fn link_targets(line: &str) -> Vec<String> {
        let line = without_code_spans(line);
        let mut out = Vec::new();
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].trim();
            // `[text](target "title")`: the target is the first word.
            let target = target.split_whitespace().next().unwrap_or("");
            out.push(target.to_owned());
            rest = &after[end..];
        }
        out
    }

    /// GitHub's anchor of a heading: lower case, letters, digits, `-` and `_` kept, spaces
    /// made `-`, everything else dropped.
    fn slug(heading: &str) -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect()
    }

    /// The anchors of a Markdown text's headings, with GitHub's `-1`, `-2` for repeats.
    fn anchors(text: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        for (_, line) in prose_lines(text) {
            let Some(heading) = line.strip_prefix('#') else {
                continue;
            };
            let heading = heading.trim_start_matches('#');
            if !heading.starts_with(' ') {
                continue;
            }
            let base = slug(heading);
            let mut anchor = base.clone();
            let mut n = 0;
            while seen.contains(&anchor) {
                n += 1;
                anchor = format!("{base}-{n}");
            }
            seen.insert(anchor);
        }
        seen
    }

    /// The problems of one link of `file`, if any.
    fn check_link(file: &Path, target: &str) -> Option<String> {
        if target.is_empty()
            || target.contains("://")
            || target.starts_with("mailto:")
            || target.starts_with('<')
        {
            return None;
        }
        let (path_part, anchor) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target, None),
        };
        let dir = file.parent().unwrap_or(Path::new("."));
        let linked = if path_part.is_empty() {
            file.to_path_buf()
        } else {
            dir.join(path_part)
        };
        if !linked.exists() {
            return Some(format!("{target}: {} does not exist", linked.display()));
        }
        let anchor = anchor.filter(|a| !a.is_empty())?;
        if !linked.to_string_lossy().ends_with(".md") {
            return None;
        }
        if anchors(&read(&linked)).contains(anchor) {
            None
        } else {
            Some(format!(
                "{target}: {} has no heading with the anchor #{anchor}",
                relative(&linked)
            ))
        }
    }

    #[test]
    fn every_relative_link_reaches_a_file_and_heading() {
        let mut problems = Vec::new();
        for file in markdown_files() {
            let text = read(&file);
            for (n, line) in prose_lines(&text) {
                for target in link_targets(line) {
                    if let Some(problem) = check_link(&file, &target) {
                        problems.push(format!("{}:{n}: {problem}", relative(&file)));
                    }
                }
            }
        }
        assert!(
            problems.is_empty(),
            "broken links:\n{}",
            problems.join("\n")
        );
    }

    #[test]
    fn the_summary_lists_every_guide_page_and_only_pages_that_exist() {
        let docs = root().join("docs");
        let summary_path = docs.join("SUMMARY.md");
        let summary = read(&summary_path);
        let mut listed = BTreeSet::new();
        let mut problems = Vec::new();
        for (n, line) in prose_lines(&summary) {
            for target in link_targets(line) {
                let page = target.split('#').next().unwrap_or("").to_owned();
                if !docs.join(&page).is_file() {
                    problems.push(format!("docs/SUMMARY.md:{n}: {page} does not exist"));
                }
                listed.insert(page);
            }
        }
        for page in files_under(&docs, ".md") {
            let name = page
                .strip_prefix(&docs)
                .unwrap_or(&page)
                .to_string_lossy()
                .replace('\\', "/");
            if name != "SUMMARY.md" && !listed.contains(&name) {
                problems.push(format!("docs/{name} is not listed in docs/SUMMARY.md"));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        assert!(listed.len() >= 10, "docs/SUMMARY.md lists only {listed:?}");
    }

    #[test]
    fn pages_keep_their_line_limits() {
        let mut problems = Vec::new();
        for file in markdown_files() {
            let name = relative(&file);
            let limit = match name.as_str() {
                "README.md" => README_LINES,
                "docs/ARCHITECTURE.md" => ARCHITECTURE_LINES,
                n if UNLIMITED.contains(&n) => continue,
                _ => PAGE_LINES,
            };
            let lines = read(&file).lines().count();
            if lines > limit {
                problems.push(format!(
                    "{name} has {lines} lines, more than {limit}: move detail to another page"
                ));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// Rust source with its string continuations (`\` at a line's end, then the next line's
    /// leading whitespace) removed, as the compiler reads them.
    fn joined_source(text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\\' && chars.peek() == Some(&'\n') {
                chars.next();
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            } else {
                out.push(c);
            }
        }
        out
    }

    #[test]
    fn every_troubleshooting_message_appears_in_the_code() {
        let root = root();
        let page = read(&root.join("docs/troubleshooting.md"));
        let quoted: Vec<&str> = prose_lines(&page)
            .into_iter()
            .filter_map(|(_, line)| line.strip_prefix("> "))
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .collect();
        assert!(
            quoted.len() >= 10,
            "docs/troubleshooting.md quotes only {} messages",
            quoted.len()
        );
        let sources: Vec<String> = files_under(&root.join("crates"), ".rs")
            .iter()
            .map(|f| joined_source(&read(f)))
            .collect();
        let missing: Vec<&str> = quoted
            .iter()
            .copied()
            .filter(|m| !sources.iter().any(|s| s.contains(m)))
            .collect();
        assert!(
            missing.is_empty(),
            "messages quoted in docs/troubleshooting.md that no crates/**/*.rs holds (copy them \
             from the code's #[error(...)] or format strings, without the {{}} parts):\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug(" Sharded stages: `--mesh`, `--mpmd-axis`, `--fsdp`"),
            "sharded-stages---mesh---mpmd-axis---fsdp"
        );
        assert_eq!(slug("jit's compile surface"), "jits-compile-surface");
        assert_eq!(
            slug("`mpmd_jit_by_yield`'s limits"),
            "mpmd_jit_by_yields-limits"
        );
        let set = anchors("# A\n\n## A\n```sh\n# not a heading\n```\n#nope\n");
        assert_eq!(set, BTreeSet::from(["a".to_owned(), "a-1".to_owned()]));
    }

    #[test]
    fn links_are_found_outside_code() {
        assert_eq!(
            link_targets("see [a](b.md#c) and `[x](y)` and [d](e.md \"t\")"),
            vec!["b.md#c".to_owned(), "e.md".to_owned()]
        );
        assert_eq!(joined_source("\"a \\\n     b\""), "\"a b\"");
        let dir = std::env::temp_dir();
        assert!(check_link(&dir.join("x.md"), "no-such-file-here.md").is_some());
        assert!(check_link(&dir.join("x.md"), "https://example.com/x").is_none());
    }
}
