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
/// returns its wall time. Each time is told to `log` as it comes; the
/// first error `one` gives ends the runs.
pub fn interleaved<E>(
    names: &[&str],
    runs: usize,
    mut one: impl FnMut(usize) -> Result<Duration, E>,
    log: &mut dyn FnMut(&str),
) -> Result<Vec<Samples>, E> {
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
            log(&format!(
                "  run {run} {:<width$} {:>8.3} s",
                names[i],
                t.as_secs_f64()
            ));
            samples[i].times.push(t);
        }
    }
    Ok(samples)
}

/// One contender of a rate comparison: its times and what each run did.
#[derive(Clone, Debug)]
pub struct Rate<'a> {
    /// Its timed runs.
    pub samples: &'a Samples,
    /// Entries each run handled.
    pub entries: u64,
    /// Bytes of file data each run copied.
    pub bytes: u64,
}

impl Rate<'_> {
    /// Entries per second at the median time.
    pub fn entries_per_s(&self) -> f64 {
        per_s(self.entries as f64, self.samples.median())
    }

    /// Bytes per second at the median time.
    pub fn bytes_per_s(&self) -> f64 {
        per_s(self.bytes as f64, self.samples.median())
    }
}

fn per_s(n: f64, t: Duration) -> f64 {
    let s = t.as_secs_f64();
    if s > 0.0 { n / s } else { 0.0 }
}

/// A Markdown table of entries/s and MB/s at each contender's median
/// time, then how many times `feeder`'s entry rate is `consumer`'s: for
/// the walker beside one worker, how many workers the walker can keep
/// busy. `None` for the ratio when a rate is zero.
pub fn rates(feeder: &Rate, consumer: &Rate) -> (String, Option<f64>) {
    let mut s = String::from(
        "| contender | entries | MB | median s | entries/s | MB/s |\n\
         |---|---:|---:|---:|---:|---:|\n",
    );
    for r in [feeder, consumer] {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.3} | {:.0} | {:.1} |",
            r.samples.tool.replace('|', "\\|"),
            r.entries,
            r.bytes as f64 / 1e6,
            r.samples.median().as_secs_f64(),
            r.entries_per_s(),
            r.bytes_per_s() / 1e6,
        );
    }
    let (f, c) = (feeder.entries_per_s(), consumer.entries_per_s());
    let ratio = (f > 0.0 && c > 0.0).then(|| f / c);
    (s, ratio)
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
        let mut logged = Vec::new();
        let s = interleaved(
            &["a", "b", "c"],
            2,
            |i| {
                order.push(i);
                Ok::<_, String>(Duration::from_secs(i as u64 + 1))
            },
            &mut |l| logged.push(l.to_string()),
        )
        .unwrap();
        assert_eq!(order, [0, 1, 2, 1, 2, 0]);
        assert_eq!(s[2].times, [Duration::from_secs(3); 2]);
        assert_eq!(logged.len(), 6);
        assert!(logged[0].contains("run 0 a"), "{logged:?}");
        let e = interleaved(&["a"], 3, |_| Err("no"), &mut |_| {});
        assert!(e.is_err());
    }

    #[test]
    fn rates_at_the_median_and_their_ratio() {
        let walk = Samples {
            tool: "walk-only".into(),
            times: [1, 2, 3].map(Duration::from_millis).to_vec(),
        };
        let copy = Samples {
            tool: "copy | 1 worker".into(),
            times: [40, 30, 50].map(Duration::from_millis).to_vec(),
        };
        let (md, ratio) = rates(
            &Rate {
                samples: &walk,
                entries: 1000,
                bytes: 0,
            },
            &Rate {
                samples: &copy,
                entries: 1000,
                bytes: 4_000_000,
            },
        );
        assert!(
            md.contains("| walk-only | 1000 | 0.0 | 0.002 | 500000 | 0.0 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| copy \\| 1 worker | 1000 | 4.0 | 0.040 | 25000 | 100.0 |"
            ),
            "{md}"
        );
        assert_eq!(ratio, Some(20.0));
        let none = Samples {
            tool: "none".into(),
            times: Vec::new(),
        };
        let empty = Rate {
            samples: &none,
            entries: 1000,
            bytes: 0,
        };
        let (_, ratio) = rates(&empty, &empty);
        assert_eq!(ratio, None);
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
