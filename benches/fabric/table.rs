//! The result table: each row a figure, its target and whether it is met, in Markdown.

use crate::stats::Want;
use std::fmt::Write as _;

pub struct Row {
    what: String,
    measured: String,
    /// Empty for a row that only informs.
    target: String,
    /// measured / bound, for a row with a target.
    ratio: Option<f64>,
    met: Option<bool>,
}

#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
}

impl Table {
    /// A figure against a bound: met when it is on the wanted side of it.
    pub fn check(
        &mut self,
        what: impl Into<String>,
        measured: String,
        value: f64,
        want: Want,
        bound: f64,
        target: String,
    ) {
        let met = match want {
            Want::AtMost => value <= bound,
            Want::AtLeast => value >= bound,
        };
        self.rows.push(Row {
            what: what.into(),
            measured,
            target,
            ratio: Some(value / bound),
            met: Some(met && value.is_finite()),
        });
    }

    /// A target checked by a condition rather than a bound.
    pub fn verdict(
        &mut self,
        what: impl Into<String>,
        measured: String,
        target: String,
        met: bool,
    ) {
        self.rows.push(Row {
            what: what.into(),
            measured,
            target,
            ratio: None,
            met: Some(met),
        });
    }

    /// A figure without a target of its own (a floor, a baseline, a breakdown).
    pub fn info(&mut self, what: impl Into<String>, measured: String) {
        self.rows.push(Row {
            what: what.into(),
            measured,
            target: String::new(),
            ratio: None,
            met: None,
        });
    }

    /// A measurement that could not be made: its target is not met.
    pub fn failed(&mut self, what: impl Into<String>, error: &str) {
        self.rows.push(Row {
            what: what.into(),
            measured: format!("failed: {error}"),
            target: String::new(),
            ratio: None,
            met: Some(false),
        });
    }

    pub fn targets(&self) -> (usize, usize) {
        let checked = self.rows.iter().filter(|r| r.met.is_some()).count();
        let met = self.rows.iter().filter(|r| r.met == Some(true)).count();
        (met, checked)
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "| what | measured | target | ratio | met |");
        let _ = writeln!(out, "| --- | --- | --- | ---: | --- |");
        for row in &self.rows {
            let ratio = row.ratio.map_or(String::new(), |r| format!("{r:.2}"));
            let met = match row.met {
                None => "",
                Some(true) => "yes",
                Some(false) => "no",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                row.what, row.measured, row.target, ratio, met
            );
        }
        out
    }
}
