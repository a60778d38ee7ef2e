//! The page's shell — its style, its script and the frame every report page shares — and
//! what can go wrong making a page.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use super::chart::esc;

/// A report that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error(
        "{0} holds no results (summary.json, requests.csv or timeseries.csv); run `servesim run SCENARIO --out {0}` first"
    )]
    NoResults(String),
    #[error("cannot read {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error(
        "{dir} holds a {kind}'s results: report it on its own (`servesim report {dir}`); several directories are compared only when each holds one run's results (a sweep's runs: `sweep --keep-outputs`, then `report OUT/point-*`)"
    )]
    Mixed { dir: String, kind: &'static str },
    #[error(
        "{0}: they are not one run's results (a run with one of its `outputs` off leaves an earlier run's file of that name in place), or one was edited; run again into an empty directory, or move the older file away"
    )]
    NotOneRun(String),
}

/// An unreadable file, with what went wrong.
pub(crate) fn read_err(path: &Path, e: impl std::fmt::Display) -> ReportError {
    ReportError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// An error of [`crate::input`], which already names the file.
pub(crate) fn read_err_plain(path: &Path, message: String) -> ReportError {
    let prefix = format!("cannot read {}: ", path.display());
    read_err(path, message.strip_prefix(&prefix).unwrap_or(&message))
}

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd}
h3{font-size:15px;margin:12px 0 4px}
table{border-collapse:collapse;margin:8px 16px 8px 0;display:inline-table;vertical-align:top}
th,td{padding:3px 10px;border-bottom:1px solid #eee;text-align:right}thead th{border-bottom:2px solid #ccc}
tbody th{text-align:left;font-weight:500}caption{text-align:left;font-weight:600;padding:4px 0}
.swatch{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.grid{display:flex;flex-wrap:wrap;gap:12px}.run{display:inline-block;vertical-align:top;margin-right:16px}
svg.chart{background:#fff;border:1px solid #e4e4e4;border-radius:4px;font-size:11px}
svg.chart .title{font-size:13px;font-weight:600}svg.chart .grid{stroke:#eee}
svg.chart .frame{fill:none;stroke:#999}svg.chart .series{fill:none;stroke-width:1.6}
svg.chart .legend{cursor:pointer}svg.chart .legend.off{opacity:.35}
svg.chart .series.off,svg.chart .bar.off{display:none}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:2px 6px;border-radius:3px;font-size:12px;display:none}
.note{color:#666;font-size:12px}table.points td{white-space:nowrap}figure{margin:0}td.reason{text-align:left;min-width:24em}table.plan tbody th{white-space:nowrap}
"#;

/// Legend clicks hide or show a run's lines in every chart; the cursor shows the chart's
/// coordinates. Errors are counted on the root element (the browser test reads them).
const SCRIPT: &str = r#"
(function(){
  var root=document.documentElement;
  var tip=document.getElementById('tip');
  document.querySelectorAll('svg.chart .legend').forEach(function(g){
    g.addEventListener('click',function(){
      var name=g.getAttribute('data-name'),off=!g.classList.contains('off');
      document.querySelectorAll('svg.chart [data-name]').forEach(function(el){
        if(el.getAttribute('data-name')===name){el.classList.toggle('off',off);}
      });
    });
  });
  document.querySelectorAll('svg.chart[data-x0]').forEach(function(svg){
    var d=svg.dataset,x0=+d.x0,x1=+d.x1,y0=+d.y0,y1=+d.y1,xlog=d.xlog==='1';
    svg.addEventListener('mousemove',function(e){
      var r=svg.getBoundingClientRect(),sx=560/r.width,sy=300/r.height;
      var px=(e.clientX-r.left)*sx,py=(e.clientY-r.top)*sy;
      if(px<64||px>544||py<34||py>256){tip.style.display='none';return;}
      var x=x0+(px-64)/480*(x1-x0),y=y0+(256-py)/222*(y1-y0);
      if(xlog){x=Math.pow(10,x);}
      tip.textContent='x '+x.toPrecision(4)+'  y '+y.toPrecision(4);
      tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';tip.style.display='block';
    });
    svg.addEventListener('mouseleave',function(){tip.style.display='none';});
  });
  root.setAttribute('data-charts',String(document.querySelectorAll('svg.chart').length));
  root.setAttribute('data-ready','1');
})();
"#;

/// A whole page: `title` (plain text), `header` and `body` (HTML), the style and the script.
/// `extra_script` runs after the common one.
pub(crate) fn page(title: &str, header: &str, body: &str, extra_script: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><title>servesim report: {}</title><style>{STYLE}</style>"#,
        esc(title)
    );
    // Installed first, so an error anywhere later on the page is counted.
    s.push_str(
        r#"<script>window.addEventListener('error',function(e){var r=document.documentElement;r.setAttribute('data-script-errors',String((+r.getAttribute('data-script-errors')||0)+1));r.setAttribute('data-last-error',String(e.message));});</script>"#,
    );
    let _ = write!(
        s,
        r#"</head><body><header><h1>servesim report</h1>{header}</header>{body}<div id="tip"></div><footer class="note">servesim {} — charts are inline SVG; click a legend entry to hide or show that line.</footer><script>{extra_script}{SCRIPT}</script></body></html>"#,
        env!("CARGO_PKG_VERSION")
    );
    s.push('\n');
    s
}
