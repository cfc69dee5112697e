//! The HTML page of an `analyze`: the workload's shape in tables, and charts of
//! its arrivals, its prefix sharing and the cache hit rates by capacity and
//! rank. Self-contained like the run report, with the same charts.

use crate::report::{grid, page, section};
use crate::svg::{Chart, Rule, Scale, Series, Style, esc};
use batchbench_contract::analysis::{Analysis, Dist};
use std::fmt::Write as _;

fn dist_row(o: &mut String, name: &str, d: Option<&Dist>) {
    match d {
        None => {
            let _ = write!(
                o,
                "<tr><th>{}</th><td colspan=\"7\">none</td></tr>",
                esc(name)
            );
        }
        Some(d) => {
            let _ = write!(
                o,
                "<tr><th>{}</th><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(name),
                d.mean,
                d.min,
                d.p50,
                d.p90,
                d.p99,
                d.max,
                d.total
            );
        }
    }
}

/// The page of `a`, titled by what was analysed.
pub fn render(a: &Analysis, title: &str, generated: &str) -> String {
    let mut body = String::new();
    let _ = write!(
        body,
        "<header><h1>batchbench analyze</h1><p class=\"sub\">{} &middot; {} requests in {} sessions &middot; generated {}</p></header>",
        esc(title),
        a.requests,
        a.sessions,
        esc(generated)
    );

    let mut shape = String::from(
        "<table class=\"summary\"><thead><tr><th></th><th>mean</th><th>min</th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>total</th></tr></thead><tbody>",
    );
    dist_row(
        &mut shape,
        "turns per session",
        a.turns_per_session.as_ref(),
    );
    dist_row(&mut shape, "prompt tokens", a.prompt_tokens.as_ref());
    dist_row(&mut shape, "output tokens", a.output_tokens.as_ref());
    dist_row(&mut shape, "think time (ms)", a.think_time_ms.as_ref());
    let mut also = Vec::new();
    if let Some(c) = &a.content {
        if c.inputs_per_request.is_some() {
            dist_row(
                &mut shape,
                &format!("{} inputs per request", c.codec),
                c.inputs_per_request.as_ref(),
            );
        }
        if let Some(au) = &c.audio {
            dist_row(&mut shape, "audio clip (ms)", Some(&au.clip_ms));
            also.push(format!(
                "{} audio clips on {} requests, {:.1} s in all",
                au.clips, au.requests, au.seconds
            ));
        }
        if c.images > 0 {
            also.push(format!("{} images", c.images));
        }
        if !c.response_formats.is_empty() {
            let formats: Vec<String> = c
                .response_formats
                .iter()
                .map(|f| format!("{} {}", f.name, f.requests))
                .collect();
            also.push(format!(
                "requests by response format: {}",
                formats.join(", ")
            ));
        }
    }
    shape.push_str("</tbody></table>");
    if !also.is_empty() {
        let _ = write!(shape, "<p>{}.</p>", esc(&also.join("; ")));
    }
    body.push_str(&section(
        "shape",
        "Workload",
        &format!(
            "{} ({}); requests placed in time with {} ms per request.",
            a.workload.mode,
            a.workload.manifest_path.as_deref().unwrap_or("no manifest"),
            a.assumed_latency_ms
        ),
        &shape,
    ));

    let mut arrivals = Chart::new(
        "arrivals",
        "Requests sent over time",
        "seconds",
        "requests / s",
    );
    arrivals.series.push(
        Series::line(
            "requests / s",
            0,
            a.arrivals
                .intervals
                .iter()
                .map(|i| (i.start_secs + i.secs / 2.0, i.rate))
                .collect(),
        )
        .styled(Style::LineMarkers),
    );
    let mut sharing = Chart::new(
        "sharing",
        "Distinct blocks by the sessions that send them",
        "sessions (bucket's upper end)",
        "blocks",
    );
    sharing.x_scale = Scale::Log;
    let uppers = [1.0, 2.0, 4.0, 8.0, 16.0, 64.0, 128.0];
    sharing.series.push(
        Series::line(
            "blocks",
            1,
            a.sharing
                .sessions_per_block
                .iter()
                .zip(uppers)
                .map(|(b, x)| (x, b.blocks as f64))
                .collect(),
        )
        .styled(Style::LineMarkers),
    );
    let mut hits = Chart::new(
        "hit-rate",
        "Prefix-cache hit rate by capacity per rank",
        "capacity per rank (tokens)",
        "hit rate (%)",
    );
    hits.x_scale = Scale::Log;
    let lru: Vec<_> = a
        .caches
        .iter()
        .filter(|c| c.capacity_tokens.is_some())
        .collect();
    hits.series.push(
        Series::line(
            "all ranks",
            2,
            lru.iter()
                .map(|c| {
                    (
                        c.capacity_tokens.unwrap_or(0) as f64,
                        100.0 * c.total.hit_rate,
                    )
                })
                .collect(),
        )
        .styled(Style::LineMarkers),
    );
    let ranks: Vec<u64> = lru
        .first()
        .map(|c| c.ranks.iter().filter_map(|r| r.rank).collect())
        .unwrap_or_default();
    for (i, rank) in ranks.iter().enumerate() {
        hits.series.push(
            Series::line(
                format!("rank {rank}"),
                3 + i,
                lru.iter()
                    .filter_map(|c| {
                        let r = c.ranks.iter().find(|r| r.rank == Some(*rank))?;
                        Some((c.capacity_tokens.unwrap_or(0) as f64, 100.0 * r.hit_rate))
                    })
                    .collect(),
            )
            .styled(Style::LineMarkers)
            .dashed(),
        );
    }
    hits.rules.push(Rule {
        y: 100.0 * a.global.hit_rate,
        label: "one ideal cache, all requests".into(),
    });
    if let Some(ideal) = a.caches.iter().find(|c| c.capacity_tokens.is_none()) {
        hits.rules.push(Rule {
            y: 100.0 * ideal.total.hit_rate,
            label: format!("ideal per rank ({} ranks)", a.ranks),
        });
    }
    body.push_str(&section(
        "charts",
        "Arrivals, sharing and cache hit rates",
        &format!(
            "Blocks of {} tokens; routing {} over {} rank(s). The rules are the ideal caches; the lines LRU caches of each --cache-tokens capacity.",
            a.block_tokens, a.routing, a.ranks
        ),
        &grid(&[
            (arrivals, "no requests"),
            (sharing, "no blocks"),
            (hits, "no --cache-tokens capacities: only the ideal caches (see the table)"),
        ]),
    ));

    let mut caches = String::from(
        "<table class=\"summary\"><thead><tr><th>cache</th><th>rank</th><th>requests</th><th>prompt tokens</th><th>cached tokens</th><th>hit rate</th></tr></thead><tbody>",
    );
    let mut row = |name: &str, f: &batchbench_contract::analysis::CacheFigures| {
        let _ = write!(
            caches,
            "<tr><th>{}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.2}%</td></tr>",
            esc(name),
            f.rank.map_or_else(|| "all".to_owned(), |r| r.to_string()),
            f.requests,
            f.prompt_tokens,
            f.cached_tokens,
            100.0 * f.hit_rate
        );
    };
    row("one ideal cache, all requests", &a.global);
    for c in &a.caches {
        let name = c.capacity_tokens.map_or_else(
            || "ideal per rank".to_owned(),
            |t| format!("LRU {t} tokens per rank"),
        );
        row(&name, &c.total);
        for r in &c.ranks {
            row(&name, r);
        }
    }
    caches.push_str("</tbody></table>");
    let mut longest = String::from(
        "<table class=\"summary\"><thead><tr><th>tokens</th><th>sessions</th><th>first sent by</th></tr></thead><tbody>",
    );
    for p in &a.sharing.longest_shared_prefixes {
        let _ = write!(
            longest,
            "<tr><td>{}</td><td>{}</td><td>{} (session {})</td></tr>",
            p.tokens,
            p.sessions,
            esc(&p.first_trajectory_id),
            p.first_session
        );
    }
    longest.push_str("</tbody></table>");
    body.push_str(&section(
        "caches",
        "Prefix caches",
        &format!(
            "{} distinct blocks, {} sent. Cached tokens are whole blocks found in the cache, in send order.",
            a.sharing.distinct_blocks, a.sharing.block_references
        ),
        &caches,
    ));
    body.push_str(&section(
        "longest",
        "Longest shared prefixes",
        "Prefixes sent by two sessions or more, longest first.",
        &longest,
    ));
    page(&body)
}
