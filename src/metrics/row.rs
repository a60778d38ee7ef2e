//! One row of `requests.csv`, formatted by hand (as the csv crate would write it).

use crate::labels::Labels;
use crate::request::FinishedRequest;
use crate::time::SimDuration;

/// Column names of `requests.csv`, in order.
pub const CSV_COLUMNS: [&str; 22] = [
    "request_id",
    "client",
    "tenant",
    "slo_class",
    "session",
    "turn",
    "instance",
    "state",
    "arrival_us",
    "input_tokens",
    "output_tokens",
    "generated_tokens",
    "cached_tokens",
    "scheduling_delay_ms",
    "ttft_ms",
    "e2e_ms",
    "mean_itl_ms",
    "preemptions",
    "completion_us",
    "prefill_instance",
    "decode_instance",
    "kv_transfer_ms",
];

/// Appends one CSV field: quoted (quotes doubled) when it holds a comma, quote or line
/// break, as the csv crate writes it.
fn csv_field(row: &mut Vec<u8>, field: &[u8]) {
    if field
        .iter()
        .any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'))
    {
        row.push(b'"');
        for &b in field {
            if b == b'"' {
                row.push(b'"');
            }
            row.push(b);
        }
        row.push(b'"');
    } else {
        row.extend_from_slice(field);
    }
}

/// Appends `x` with `decimals` (at most 9) decimals exactly as `format!("{x:.decimals$}")`
/// does: the exact binary value rounded to a multiple of 10^-decimals, ties to even
/// (`core::fmt` costs ~1,800 instructions for it). Negative, non-finite or huge values
/// (≥ 2^40) go through `core::fmt`.
pub fn fixed(row: &mut Vec<u8>, x: f64, decimals: u32, digits: &mut itoa::Buffer) {
    debug_assert!(decimals <= 9);
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if !(0.0..1_099_511_627_776.0).contains(&x) || bits >> 63 == 1 {
        use std::io::Write as _;
        let _ = write!(row, "{x:.*}", decimals as usize);
        return;
    }
    // x = m · 2^e exactly; units of 10^-decimals = round(m · 10^decimals · 2^e).
    let frac = bits & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | (1 << 52), exp - 1075)
    };
    let scale = 10u64.pow(decimals);
    let scaled = u128::from(m) * u128::from(scale);
    let units = if e >= 0 {
        scaled << e // x < 2^40: e ≤ -13 in fact
    } else if e <= -120 {
        0 // below 2^-67: rounds to zero at 9 decimals
    } else {
        let k = (-e) as u32;
        let q = scaled >> k;
        let rem = scaled & ((1u128 << k) - 1);
        let half = 1u128 << (k - 1);
        if rem > half || (rem == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    let scale = u128::from(scale);
    row.extend_from_slice(digits.format(units / scale).as_bytes());
    if decimals > 0 {
        row.push(b'.');
        let f = digits.format(scale + units % scale); // a leading 1, then the zero-padded decimals
        row.extend_from_slice(&f.as_bytes()[1..]);
    }
}

/// The column `requests.csv` adds when the scenario has `energy`: the request's share
/// of the energy of the steps it took part in, joules.
pub const ENERGY_COLUMN: &str = "energy_j";

/// The column `requests.csv` adds when the scenario's `faults` has crashes: the times a
/// crash took the request down and it was sent again.
pub const RETRIES_COLUMN: &str = "retries";

/// The columns `requests.csv` adds when a group has speculative decoding: the draft tokens
/// verified for the request and those accepted.
pub const SPECULATIVE_COLUMNS: [&str; 2] = ["drafted_tokens", "accepted_tokens"];

/// The column `requests.csv` adds when the workload declares LoRA adapters: the request's
/// adapter (empty for the base model).
pub const ADAPTER_COLUMN: &str = "adapter";

/// The columns `requests.csv` ends with, beyond [`CSV_COLUMNS`], when the scenario uses
/// the features they describe (in this order).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraColumns {
    /// [`ENERGY_COLUMN`] (`energy`).
    pub energy: bool,
    /// [`RETRIES_COLUMN`] (crashes in `faults`).
    pub retries: bool,
    /// [`SPECULATIVE_COLUMNS`] (a group's `speculative`).
    pub speculative: bool,
    /// [`ADAPTER_COLUMN`] (`workload.adapters`).
    pub adapter: bool,
}

/// Appends `units` thousandths as a decimal with exactly three decimals (whole µs as ms,
/// whole mJ as J).
fn thousandths(row: &mut Vec<u8>, units: u64, digits: &mut itoa::Buffer) {
    row.extend_from_slice(digits.format(units / 1000).as_bytes());
    let frac = units % 1000;
    row.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// The header line of `requests.csv` (then the [`ExtraColumns`] asked for).
pub fn csv_header(extra: ExtraColumns) -> Vec<u8> {
    let mut row = Vec::new();
    for (k, c) in CSV_COLUMNS.iter().enumerate() {
        if k > 0 {
            row.push(b',');
        }
        csv_field(&mut row, c.as_bytes());
    }
    for (on, name) in [
        (extra.energy, ENERGY_COLUMN),
        (extra.retries, RETRIES_COLUMN),
        (extra.speculative, SPECULATIVE_COLUMNS[0]),
        (extra.speculative, SPECULATIVE_COLUMNS[1]),
        (extra.adapter, ADAPTER_COLUMN),
    ] {
        if on {
            row.push(b',');
            csv_field(&mut row, name.as_bytes());
        }
    }
    row.push(b'\n');
    row
}

/// Formats the CSV row of a finished request, in [`CSV_COLUMNS`] order (then the
/// [`ExtraColumns`] asked for), into `row` (cleared
/// first), byte for byte as the csv crate would write it (fields quoted only when needed,
/// `\n` ends the row). Integers go through itoa and milliseconds are whole µs with three
/// decimals: `core::fmt` and a per-field CSV writer cost several hundred instructions a
/// field, and a row is mostly integers.
pub fn format_row(row: &mut Vec<u8>, f: &FinishedRequest, labels: &Labels, extra: ExtraColumns) {
    row.clear();
    let mut digits = itoa::Buffer::new();
    let mut int = |row: &mut Vec<u8>, v: Option<u64>| {
        if let Some(v) = v {
            row.extend_from_slice(digits.format(v).as_bytes());
        }
        row.push(b',');
    };
    let mut whole_ms = itoa::Buffer::new();
    let mut ms = |row: &mut Vec<u8>, d: Option<SimDuration>| {
        if let Some(d) = d {
            thousandths(row, d.as_us(), &mut whole_ms);
        }
        row.push(b',');
    };
    let text = |row: &mut Vec<u8>, s: &str| {
        csv_field(row, crate::labels::csv_safe(s).as_bytes());
        row.push(b',');
    };
    fn name(list: &[String], i: u32) -> &str {
        list.get(i as usize).map_or("", String::as_str)
    }
    int(row, Some(f.spec.id));
    int(row, Some(u64::from(f.spec.client)));
    text(row, name(&labels.tenants, f.spec.tenant));
    text(row, name(&labels.slo_classes, f.spec.slo_class));
    int(row, f.spec.session.map(|x| x.id));
    int(row, f.spec.session.map(|x| u64::from(x.turn)));
    int(row, f.instance.map(u64::from));
    text(row, f.state.as_str());
    int(row, Some(f.lifecycle.arrival.as_us()));
    int(row, Some(u64::from(f.spec.input_tokens)));
    int(row, Some(u64::from(f.spec.output_tokens)));
    int(row, Some(u64::from(f.generated_tokens)));
    int(row, Some(u64::from(f.cached_tokens)));
    ms(row, f.scheduling_delay());
    ms(row, f.ttft);
    ms(row, f.e2e);
    if let Some(us) = f.mean_itl() {
        fixed(row, us / 1000.0, 3, &mut itoa::Buffer::new());
    }
    row.push(b',');
    int(row, Some(u64::from(f.preemptions)));
    int(row, f.completed.map(|t| t.as_us()));
    int(row, f.prefill_instance.map(u64::from));
    int(row, f.decode_instance.map(u64::from));
    ms(row, f.kv_transfer);
    if extra.energy {
        // Joules to the millijoule, rounded half up from whole nanojoules.
        let mj = (f.energy_nj + 500_000) / 1_000_000;
        thousandths(row, mj, &mut itoa::Buffer::new());
        row.push(b',');
    }
    if extra.retries {
        int(row, Some(u64::from(f.lifecycle.retries)));
    }
    if extra.speculative {
        int(row, Some(u64::from(f.drafted)));
        int(row, Some(u64::from(f.accepted)));
    }
    if extra.adapter {
        text(
            row,
            f.spec.adapter.map_or("", |a| name(&labels.adapters, a)),
        );
    }
    // The last field ends the row, not a comma.
    *row.last_mut().expect("a row has fields") = b'\n';
}
