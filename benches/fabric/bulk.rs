//! The bulk phase: 256 MiB uploads and downloads of bare quinn under every transport setting,
//! beside remote and local writes and reads of the same size, in rounds. Each round moves the
//! data once per setting each way (the settings' order rotating from round to round) and once
//! per path each way, the paths before the bare transfers in even rounds and after them in odd
//! ones, so that load on the machine hits all of them alike.
//!
//! The best bare setting is the one with the highest median over the rounds (not the best single
//! transfer, which would be the luckiest of many draws) among those that send 256 MiB of
//! distinct data, as the remote path does; the remote figure is the median of its rounds against
//! 0.8 × that median, and, round by round, each round's remote transfer against 0.8 × that
//! setting's transfer of the same round. Every round is printed. The setting that re-sends one
//! cached 1 MiB buffer is measured beside them and its ratio printed, but it is no candidate: it
//! moves less memory than a transfer of 256 MiB of data, not a better-configured quinn.

use crate::bare::{self, Data, Setting};
use crate::rig::Rig;
use crate::session::Session;
use crate::stats::{median, rate, spread, Want};
use crate::table::Table;
use crate::{gbps, pattern, progress, Params, BULK_FLOOR, BULK_SHARE, MIB};
use std::fmt::Write as _;
use std::time::Duration;
use tasklet_remote::RemoteGpu;

/// One bare setting's server, client and transfers so far.
struct Bare {
    setting: Setting,
    /// `Err`: why it could not start; its transfers are skipped.
    ends: Result<(bare::Client, bare::Server), String>,
    ups: Vec<f64>,
    downs: Vec<f64>,
    /// Why a transfer failed, if one did (the setting then counts no further).
    failed: Option<String>,
}

impl Bare {
    fn transfer(&mut self, bytes: u64, budget: Duration) {
        if self.failed.is_some() {
            return;
        }
        let Ok((client, _)) = &self.ends else {
            return;
        };
        let streams = self.setting.streams;
        let moved = client
            .upload(bytes, streams, budget)
            .and_then(|up| Ok((up, client.download(bytes, streams, budget)?)));
        match moved {
            Ok((up, down)) => {
                self.ups.push(rate(bytes, up));
                self.downs.push(rate(bytes, down));
            }
            Err(e) => self.failed = Some(e),
        }
    }
}

/// The streams the side-by-side spread path sends each transfer over.
const SPREAD_STREAMS: usize = 4;

/// One path's transfers: a session with its buffer, and the rates so far.
struct Path {
    session: Session,
    writes: Vec<f64>,
    reads: Vec<f64>,
}

impl Path {
    fn transfer(&mut self, data: &[u8], what: &str, check: bool) -> Result<(), String> {
        let bytes = data.len() as u64;
        self.writes
            .push(rate(bytes, self.session.bulk_write(data)?));
        let (took, back) = self.session.bulk_read(bytes)?;
        if check && back != data {
            return Err(format!(
                "{what}: the data read back differs from the data written"
            ));
        }
        self.reads.push(rate(bytes, took));
        Ok(())
    }
}

/// Runs the phase; adds its rows to `table`, and writes the settings and the rounds to
/// `settings`.
pub fn run(rig: &Rig, p: &Params, table: &mut Table, settings: &mut String) -> Result<(), String> {
    let bytes = p.bulk_bytes;
    progress(&format!(
        "bulk: {} rounds of {} MiB each way, bare quinn under {} settings, remote and local",
        p.bulk_reps,
        bytes / MIB,
        Setting::all().len()
    ));
    let mut bares: Vec<Bare> = Setting::all()
        .into_iter()
        .map(|setting| {
            let ends =
                bare::Server::start(&rig.runtime, &rig.certs(), &setting).and_then(|server| {
                    let client = bare::Client::connect(server.addr()?, &rig.certs(), &setting)?;
                    Ok((client, server))
                });
            Bare {
                setting,
                ends,
                ups: Vec::new(),
                downs: Vec::new(),
                failed: None,
            }
        })
        .collect();
    let data = pattern(bytes);
    let open = |gpu, what: &str| -> Result<Path, String> {
        Ok(Path {
            session: Session::open(gpu, bytes + MIB).map_err(|e| format!("{what}: {e}"))?,
            writes: Vec::new(),
            reads: Vec::new(),
        })
    };
    let client = rig.client()?;
    let watch = client.path_watch();
    let mut remote = open(Box::new(RemoteGpu::new(client)), "remote")?;
    // The same transfers spread over several streams (FORK/BRANCH), on a connection of their
    // own, beside the client's default.
    let client = rig.client()?;
    let spread_watch = client.path_watch();
    let spread_gpu = RemoteGpu::new(client).with_transfer_streams(SPREAD_STREAMS);
    let mut spread_path = open(Box::new(spread_gpu), "spread")?;
    let mut local = open(rig.local_gpu(), "local")?;
    for round in 0..p.bulk_reps {
        let paths_first = round % 2 == 0;
        if paths_first {
            remote.transfer(&data, "remote", round == 0)?;
            spread_path.transfer(&data, "spread", round == 0)?;
            local.transfer(&data, "local", round == 0)?;
        }
        let n = bares.len();
        for i in 0..n {
            bares[(i + round) % n].transfer(bytes, p.budget);
        }
        if !paths_first {
            local.transfer(&data, "local", round == 0)?;
            spread_path.transfer(&data, "spread", round == 0)?;
            remote.transfer(&data, "remote", round == 0)?;
        }
    }

    let _ = writeln!(
        settings,
        "| setting | upload, median (min–max) | download, median (min–max) | the client's path at the end |"
    );
    let _ = writeln!(settings, "| --- | ---: | ---: | --- |");
    for b in &bares {
        let why = match (&b.ends, &b.failed) {
            (Err(e), _) | (Ok(_), Some(e)) => format!(" (failed: {e})"),
            _ => String::new(),
        };
        let path = b
            .ends
            .as_ref()
            .map_or(String::new(), |(client, _)| client.path());
        let _ = writeln!(
            settings,
            "| {}{why} | {} | {} | {path} |",
            b.setting.name,
            range(&b.ups),
            range(&b.downs)
        );
    }
    let spread_name = format!("the fabric spread over {SPREAD_STREAMS} streams");
    for (name, path, watch) in [
        ("the fabric", &remote, &watch),
        (spread_name.as_str(), &spread_path, &spread_watch),
    ] {
        let _ = writeln!(
            settings,
            "| {name}: remote write / read | {} | {} | {} |",
            range(&path.writes),
            range(&path.reads),
            watch.read()
        );
    }
    // A setting counts only with a transfer in every round, so that its median is comparable.
    let complete = |b: &&Bare| b.ups.len() == p.bulk_reps && b.failed.is_none();
    let best = |of: fn(&Bare) -> &Vec<f64>| {
        bares
            .iter()
            .filter(complete)
            .filter(|b| b.setting.data == Data::Distinct)
            .max_by(|a, b| median(of(a)).total_cmp(&median(of(b))))
    };
    let resent = bares
        .iter()
        .filter(complete)
        .find(|b| b.setting.data == Data::Resent);
    let best_up = best(|b| &b.ups).ok_or("no bare setting moved data in every round")?;
    let best_down = best(|b| &b.downs).ok_or("no bare setting moved data in every round")?;
    let fabric = bares
        .iter()
        .filter(complete)
        .find(|b| b.setting.name == Setting::fabric().name);

    let mib = bytes / MIB;
    table.info(
        format!("best bare quinn, {mib} MiB of distinct data up / down (median of the rounds)"),
        format!(
            "{} ({}) / {} ({})",
            gbps(median(&best_up.ups)),
            best_up.setting.name,
            gbps(median(&best_down.downs)),
            best_down.setting.name
        ),
    );
    table.info(
        format!("local {mib} MiB write / read (LocalGpu)"),
        format!(
            "{} / {}",
            gbps(median(&local.writes)),
            gbps(median(&local.reads))
        ),
    );
    for (what, remote, best) in [
        ("write", &remote.writes, &best_up.ups),
        ("read", &remote.reads, &best_down.downs),
    ] {
        let (value, bound) = (median(remote), BULK_SHARE * median(best));
        table.check(
            format!("remote {mib} MiB {what} vs bare"),
            gbps(value),
            value,
            Want::AtLeast,
            bound,
            format!("≥ 0.8 × best bare = {}", gbps(bound)),
        );
        let ratios: Vec<f64> = remote
            .iter()
            .zip(best)
            .map(|(r, b)| r / (BULK_SHARE * b))
            .collect();
        table.info(
            format!("remote {mib} MiB {what} / its bound, round by round"),
            spread(&ratios, Want::AtLeast),
        );
        table.check(
            format!("remote {mib} MiB {what}, absolute"),
            gbps(value),
            value,
            Want::AtLeast,
            BULK_FLOOR,
            "≥ 1 GB/s (on a GPU machine)".into(),
        );
    }
    table.info(
        format!("remote {mib} MiB write / read spread over {SPREAD_STREAMS} streams, side by side"),
        format!(
            "{} / {} ({:.2}× / {:.2}× of the remote path's)",
            gbps(median(&spread_path.writes)),
            gbps(median(&spread_path.reads)),
            median(&spread_path.writes) / median(&remote.writes),
            median(&spread_path.reads) / median(&remote.reads),
        ),
    );
    if let Some(resent) = resent {
        table.info(
            format!("remote {mib} MiB write / read vs bare re-sending one cached 1 MiB buffer (no candidate)"),
            format!(
                "{:.2}× of {} / {:.2}× of {} (to 0.8 × it: {:.2} / {:.2})",
                median(&remote.writes) / median(&resent.ups),
                gbps(median(&resent.ups)),
                median(&remote.reads) / median(&resent.downs),
                gbps(median(&resent.downs)),
                median(&remote.writes) / (BULK_SHARE * median(&resent.ups)),
                median(&remote.reads) / (BULK_SHARE * median(&resent.downs)),
            ),
        );
    }
    if let Some(fabric) = fabric {
        table.info(
            format!("remote {mib} MiB write / read vs bare with the fabric's own settings"),
            format!(
                "{:.2}× of {} / {:.2}× of {}",
                median(&remote.writes) / median(&fabric.ups),
                gbps(median(&fabric.ups)),
                median(&remote.reads) / median(&fabric.downs),
                gbps(median(&fabric.downs)),
            ),
        );
    }

    let _ = writeln!(settings);
    let _ = writeln!(
        settings,
        "bulk, round by round (best bare: the settings above with the highest medians of distinct data):"
    );
    let _ = writeln!(
        settings,
        "| round | remote write | best bare up | ratio to 0.8 × | remote read | best bare down | ratio to 0.8 × | local write | local read |"
    );
    let _ = writeln!(
        settings,
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for r in 0..p.bulk_reps {
        let _ = writeln!(
            settings,
            "| {} | {} | {} | {:.2} | {} | {} | {:.2} | {} | {} |",
            r + 1,
            gbps(remote.writes[r]),
            gbps(best_up.ups[r]),
            remote.writes[r] / (BULK_SHARE * best_up.ups[r]),
            gbps(remote.reads[r]),
            gbps(best_down.downs[r]),
            remote.reads[r] / (BULK_SHARE * best_down.downs[r]),
            gbps(local.writes[r]),
            gbps(local.reads[r]),
        );
    }
    Ok(())
}

/// "median (min–max)" of rates.
fn range(rates: &[f64]) -> String {
    if rates.is_empty() {
        return "—".into();
    }
    let min = rates.iter().copied().fold(f64::INFINITY, f64::min);
    let max = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!(
        "{} ({:.2}–{:.2})",
        gbps(median(rates)),
        min / 1e9,
        max / 1e9
    )
}
