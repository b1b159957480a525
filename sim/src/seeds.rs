//! The regression corpus in `seeds/`: plain text, `<seed> [nodes=N] [no-idempotent]  # what it
//! found` per line. Without `nodes=`, the seed picks its node count as in a swarm sweep.

use std::path::Path;

use crate::parse_seed;
use crate::swarm::{NodesChoice, RunOptions};

/// One regression seed and why it is there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegressionSeed {
    pub seed: u64,
    /// How to run it (node count, idempotent commits).
    pub options: RunOptions,
    pub note: String,
    /// `file:line` it came from.
    pub origin: String,
}

/// Parses `<seed> [nodes=N] [no-idempotent]`.
fn parse_entry(value: &str) -> Result<(u64, RunOptions), String> {
    let mut words = value.split_whitespace();
    let seed = parse_seed(words.next().unwrap_or_default())?;
    let mut options = RunOptions::default();
    for word in words {
        if let Some(n) = word.strip_prefix("nodes=") {
            options.nodes = NodesChoice::parse(n)?;
        } else if word == "no-idempotent" {
            options.idempotent_commits = false;
        } else {
            return Err(format!("unknown option `{word}`"));
        }
    }
    Ok((seed, options))
}

/// Parses one corpus file's text.
pub fn parse_corpus(text: &str, file: &str) -> Result<Vec<RegressionSeed>, String> {
    let mut seeds = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let (value, note) = line.split_once('#').unwrap_or((line, ""));
        if value.trim().is_empty() {
            continue;
        }
        let origin = format!("{file}:{}", index + 1);
        let (seed, options) = parse_entry(value).map_err(|e| format!("{origin}: {e}"))?;
        seeds.push(RegressionSeed { seed, options, note: note.trim().to_string(), origin });
    }
    Ok(seeds)
}

/// Every seed of every `*.txt` file in `dir`, in file-name order.
pub fn load_corpus(dir: &Path) -> Result<Vec<RegressionSeed>, String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "txt"))
        .collect();
    files.sort();
    let mut seeds = Vec::new();
    for path in files {
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        seeds.extend(parse_corpus(&text, &path.display().to_string())?);
    }
    Ok(seeds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seeds_and_notes() {
        let text = "# header\n0x10 nodes=3  # found a thing\n\n42\n7 nodes=1 no-idempotent\n";
        let seeds = parse_corpus(text, "f.txt").expect("valid");
        assert_eq!(seeds.len(), 3);
        assert_eq!(seeds[0].seed, 16);
        assert_eq!(seeds[0].options, RunOptions::nodes(3));
        assert_eq!(seeds[0].note, "found a thing");
        assert_eq!(seeds[1].origin, "f.txt:4");
        assert_eq!(seeds[1].options, RunOptions::default());
        assert!(!seeds[2].options.idempotent_commits);
        assert!(parse_corpus("zz # bad", "f.txt").is_err());
        assert!(parse_corpus("1 nodes=x", "f.txt").is_err());
    }
}
