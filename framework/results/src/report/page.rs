//! The page around a report's sections: its style sheet and its script,
//! kept as files of their own (`page.css`, `page.js`) and inlined, so that a
//! report is one self-contained file.

/// The report's style sheet.
const STYLE: &str = include_str!("page.css");

/// Legend entries hide and show their series; after layout, the number of
/// charts and of charts that drew (laid out with a non-empty data path) is
/// recorded on `<body>` (`data-charts`, `data-charts-drawn`), and any script
/// error in `data-errors`.
const SCRIPT: &str = include_str!("page.js");

pub(crate) fn page(body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>batchbench report</title><style>{STYLE}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n"
    )
}
