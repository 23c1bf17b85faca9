//! Samples, medians, ratios; CSV and Markdown.

use std::fmt::Write as _;
use std::time::Duration;

/// Every timed run of one tool.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// The tool's name.
    pub tool: String,
    /// Wall times, in run order.
    pub times: Vec<Duration>,
}

impl Samples {
    /// The median (the mean of the middle two for an even count).
    pub fn median(&self) -> Duration {
        let mut t = self.times.clone();
        t.sort();
        match t.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => t[n / 2],
            n => (t[n / 2 - 1] + t[n / 2]) / 2,
        }
    }

    /// The fastest run.
    pub fn min(&self) -> Duration {
        self.times.iter().min().copied().unwrap_or_default()
    }

    /// The slowest run.
    pub fn max(&self) -> Duration {
        self.times.iter().max().copied().unwrap_or_default()
    }
}

/// One row per run: `tree,tool,run,seconds`.
pub fn csv(tree: &str, all: &[Samples]) -> String {
    let mut s = String::from("tree,tool,run,seconds\n");
    for sm in all {
        for (i, t) in sm.times.iter().enumerate() {
            let _ =
                writeln!(s, "{tree},{},{i},{:.6}", sm.tool, t.as_secs_f64());
        }
    }
    s
}

/// A Markdown table: median, min, max, and each median divided by the
/// reference tool's (so below 1.0 is faster than the reference).
pub fn markdown(all: &[Samples], reference: &str) -> String {
    // No ratio column without a reference among the tools.
    let base = all
        .iter()
        .find(|s| s.tool == reference && !s.times.is_empty())
        .map(|s| s.median().as_secs_f64())
        .filter(|&b| b > 0.0);
    let mut s = String::from("| tool | median s | min s | max s | runs |");
    match base {
        Some(_) => {
            let _ = writeln!(s, " × {} |", reference.replace('|', "\\|"));
            s.push_str("|---|---:|---:|---:|---:|---:|\n");
        }
        None => s.push_str("\n|---|---:|---:|---:|---:|\n"),
    }
    // A tool whose every copy was wrong has no time to show.
    for sm in all.iter().filter(|sm| !sm.times.is_empty()) {
        let m = sm.median().as_secs_f64();
        let _ = write!(
            s,
            "| {} | {:.3} | {:.3} | {:.3} | {} |",
            sm.tool.replace('|', "\\|"),
            m,
            sm.min().as_secs_f64(),
            sm.max().as_secs_f64(),
            sm.times.len(),
        );
        match base {
            Some(b) => {
                let _ = writeln!(s, " {:.2} |", m / b);
            }
            None => s.push('\n'),
        }
    }
    s
}

/// Times `names.len()` contenders `runs` times each, interleaved (the
/// order rotates every run): `one(i)` prepares and runs contender `i` and
/// returns its wall time. Each time is logged as it comes.
pub fn interleaved(
    names: &[&str],
    runs: usize,
    mut one: impl FnMut(usize) -> Result<Duration, String>,
) -> Result<Vec<Samples>, String> {
    let mut samples: Vec<Samples> = names
        .iter()
        .map(|n| Samples {
            tool: n.to_string(),
            times: Vec::new(),
        })
        .collect();
    let width = names.iter().map(|n| n.len()).max().unwrap_or(0);
    for run in 0..runs {
        for k in 0..names.len() {
            let i = (k + run) % names.len();
            let t = one(i)?;
            eprintln!(
                "  run {run} {:<width$} {:>8.3} s",
                names[i],
                t.as_secs_f64()
            );
            samples[i].times.push(t);
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn medians_and_ratios() {
        let a = Samples {
            tool: "a".into(),
            times: [3, 1, 2].map(Duration::from_secs).to_vec(),
        };
        let b = Samples {
            tool: "b".into(),
            times: [4, 1, 2, 3].map(Duration::from_secs).to_vec(),
        };
        assert_eq!(a.median(), Duration::from_secs(2));
        assert_eq!(b.median(), Duration::from_millis(2500));
        let md = markdown(&[a, b.clone()], "a");
        assert!(
            md.contains("| b | 2.500 | 1.000 | 4.000 | 4 | 1.25 |"),
            "{md}"
        );
        assert_eq!(csv("t", &[b]).lines().count(), 5);
    }

    #[test]
    fn pipes_escaped_and_timeless_tools_left_out() {
        let t = Samples {
            tool: "tar | tar".into(),
            times: vec![Duration::from_secs(1)],
        };
        let wrong = Samples {
            tool: "xcp".into(),
            times: Vec::new(),
        };
        let md = markdown(&[t, wrong], "tar | tar");
        assert!(md.contains("| tar \\| tar | 1.000 |"), "{md}");
        assert!(!md.contains("xcp"), "{md}");
    }

    #[test]
    fn interleaving_rotates_and_keeps_each_contenders_times() {
        let mut order = Vec::new();
        let s = interleaved(&["a", "b", "c"], 2, |i| {
            order.push(i);
            Ok(Duration::from_secs(i as u64 + 1))
        })
        .unwrap();
        assert_eq!(order, [0, 1, 2, 1, 2, 0]);
        assert_eq!(s[2].times, [Duration::from_secs(3); 2]);
        assert!(interleaved(&["a"], 3, |_| Err("no".into())).is_err());
    }

    #[test]
    fn no_ratio_column_without_the_reference() {
        let b = Samples {
            tool: "b".into(),
            times: [4, 1, 2, 3].map(Duration::from_secs).to_vec(),
        };
        let md = markdown(&[b], "absent");
        assert!(md.starts_with("| tool | median s | min s | max s | runs |\n"));
        assert!(md.contains("| b | 2.500 | 1.000 | 4.000 | 4 |\n"), "{md}");
    }
}
