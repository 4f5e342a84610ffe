//! The core's hot paths, one case per run, for instruction counting under valgrind's callgrind.
//!
//! ```text
//! cargo build --release --example hotpath
//! valgrind --tool=callgrind --collect-atstart=no --toggle-collect='*hotpath::measured*' \
//!     target/release/examples/hotpath CASE
//! ```
//!
//! Each case builds its inputs first, then calls one `measured_*` function `OPERATIONS` times (or
//! once over `ROWS` rows); only that function is counted (`--toggle-collect`), so set-up and
//! process start-up stay out of the figure. The figure is deterministic for one binary and input,
//! which is what lets `benches/bench_hotpath.py` gate it against the committed baseline
//! (`benches/baseline/instructions.json`) on a machine shared with other work: timings move with
//! the load, instruction counts do not. `hotpath --list` prints the cases and what each count is
//! divided by.
//!
//! The inputs mirror the benchmarks' batch (`benches/serialize_data.py`): int64 id, string name,
//! decimal(18,2) amount, timestamp[us, UTC] ts, bool flag, float64 score.

use std::hint::black_box;
use std::process::ExitCode;
use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, Float64Array, Int64Array, RecordBatch, StringArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use laminar_core::prepared::PreparedTxnState;
use laminar_core::protocol::epoch::EpochTracker;
use laminar_core::serialize::kafka::{KafkaOptions, ValueFormat, encode_kafka, plan_kafka};
use laminar_core::serialize::pgcopy::{PgColumn, encode_pg_copy, plan_pg_copy};

/// Repetitions of the per-call cases (epoch cycle, prepared-state codec).
const OPERATIONS: u64 = 2_000;
/// Rows of the encoding cases (one call over the whole batch; counted per row).
const ROWS: usize = 2_000;

/// One measured case: its name, what the count is divided by, and the run.
struct Case {
    name: &'static str,
    unit: &'static str,
    per: u64,
    run: fn(),
}

const CASES: &[Case] = &[
    Case {
        name: "epoch_cycle",
        unit: "cycle",
        per: OPERATIONS,
        run: epoch_cycle,
    },
    Case {
        name: "prepared_encode",
        unit: "state",
        per: OPERATIONS,
        run: prepared_encode,
    },
    Case {
        name: "prepared_parse",
        unit: "state",
        per: OPERATIONS,
        run: prepared_parse,
    },
    Case {
        name: "json_encode",
        unit: "row",
        per: ROWS as u64,
        run: json_encode,
    },
    Case {
        name: "copy_encode",
        unit: "row",
        per: ROWS as u64,
        run: copy_encode,
    },
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag] if flag == "--list" => {
            for case in CASES {
                println!("{} {} {}", case.name, case.per, case.unit);
            }
            ExitCode::SUCCESS
        }
        [name] => match CASES.iter().find(|c| c.name == name) {
            Some(case) => {
                (case.run)();
                ExitCode::SUCCESS
            }
            None => usage(&format!("unknown case {name:?}")),
        },
        _ => usage("expected one case name or --list"),
    }
}

fn usage(problem: &str) -> ExitCode {
    let names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
    eprintln!(
        "hotpath: {problem}\nusage: hotpath CASE | hotpath --list\ncases: {}",
        names.join(", ")
    );
    ExitCode::from(2)
}

// -- begin → record_write → prepare → commit, as a sink drives it per epoch ---------------------

fn epoch_cycle() {
    let mut tracker = EpochTracker::default();
    measured_epoch_cycle(&mut tracker, OPERATIONS);
    assert_eq!(tracker.metrics().commits, OPERATIONS);
}

#[inline(never)]
fn measured_epoch_cycle(tracker: &mut EpochTracker, cycles: u64) {
    for i in 0..cycles {
        let epoch = i as i64;
        let now = i * 1_000;
        let step = tracker
            .begin(epoch, now)
            .and_then(|_| tracker.record_write(1_000, 64_000))
            .and_then(|()| tracker.prepare(Some(epoch)))
            .and_then(|()| tracker.commit_started(now + 10, Some(epoch)))
            .and_then(|()| tracker.commit_ok(now + 20));
        if let Err(e) = step {
            panic!("epoch {epoch}: {e}");
        }
    }
}

// -- PreparedTxnState: the text form the sinks persist, and its parse -----------------------------

fn prepared_state() -> PreparedTxnState {
    let mut state = PreparedTxnState::new(Some("orders-sink-0-kafka-pg".to_owned()), 123_456);
    state.attempt = 1;
    state.producer_id = 1_000_004;
    state.producer_epoch = 7;
    state.record_count = 250_000;
    state.created_at_ms = 1_760_000_000_000;
    state
}

fn prepared_encode() {
    let state = prepared_state();
    let total = measured_prepared_encode(&state, OPERATIONS);
    assert_eq!(total, state.to_text().len() * OPERATIONS as usize);
}

#[inline(never)]
fn measured_prepared_encode(state: &PreparedTxnState, times: u64) -> usize {
    (0..times).map(|_| black_box(state).to_text().len()).sum()
}

fn prepared_parse() {
    let state = prepared_state();
    let text = state.to_text();
    measured_prepared_parse(&text, &state, OPERATIONS);
}

#[inline(never)]
fn measured_prepared_parse(text: &str, expected: &PreparedTxnState, times: u64) {
    for _ in 0..times {
        match PreparedTxnState::parse(black_box(text)) {
            Ok(parsed) => assert!(&parsed == expected, "parse changed the state"),
            Err(e) => panic!("parse failed: {e}"),
        }
    }
}

// -- Arrow → JSON values with keys (Kafka), Arrow → COPY BINARY (PostgreSQL) ----------------------

fn json_encode() {
    let batches = [bench_batch(ROWS)];
    let options = KafkaOptions {
        value_format: ValueFormat::Json,
        value_column: None,
        key_column: Some("id".to_owned()),
    };
    let plan = plan_kafka(&batches[0].schema(), &options).unwrap_or_else(|e| panic!("{e}"));
    let rows = measured_json_encode(&plan, &batches);
    assert_eq!(rows, ROWS);
}

#[inline(never)]
fn measured_json_encode(
    plan: &laminar_core::serialize::kafka::KafkaPlan,
    batches: &[RecordBatch],
) -> usize {
    match encode_kafka(plan, batches) {
        Ok(records) => records.num_rows,
        Err(e) => panic!("encode_kafka failed: {e}"),
    }
}

fn copy_encode() {
    let batches = [bench_batch(ROWS)];
    let columns = [
        ("id", "int8", -1),
        ("name", "text", -1),
        ("amount", "numeric", (18 << 16 | 2) + 4),
        ("ts", "timestamptz", -1),
        ("flag", "bool", -1),
        ("score", "float8", -1),
    ]
    .map(|(name, type_name, typmod)| PgColumn {
        name: name.to_owned(),
        type_name: type_name.to_owned(),
        typmod,
    });
    let plan = plan_pg_copy(&batches[0].schema(), &columns, None).unwrap_or_else(|e| panic!("{e}"));
    let rows = measured_copy_encode(&plan, &batches);
    assert_eq!(rows, ROWS);
}

#[inline(never)]
fn measured_copy_encode(
    plan: &laminar_core::serialize::pgcopy::CopyPlan,
    batches: &[RecordBatch],
) -> usize {
    match encode_pg_copy(plan, batches) {
        Ok(data) => data.num_rows,
        Err(e) => panic!("encode_pg_copy failed: {e}"),
    }
}

/// The benchmarks' batch, from a fixed pseudo-random sequence (same input every run).
fn bench_batch(rows: usize) -> RecordBatch {
    let mut seed: u64 = 7;
    let mut next = move || {
        // SplitMix64: a fixed, well-spread sequence without a dependency.
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let ids: Vec<i64> = (0..rows as i64).map(|i| i * 7_919 + 1_000_000).collect();
    let names: Vec<String> = (0..rows)
        .map(|i| format!("customer-{:06}", i % 100_003))
        .collect();
    let cents: Vec<i128> = (0..rows)
        .map(|_| (next() % 110_000_000) as i128 - 10_000_000)
        .collect();
    let start = 1_704_067_200_000_000_i64; // 2024-01-01T00:00:00Z in µs
    let ts: Vec<i64> = (0..rows)
        .map(|_| start + (next() % (86_400_000_000 * 30)) as i64)
        .collect();
    let flags: Vec<bool> = (0..rows).map(|_| next() % 2 == 0).collect();
    let scores: Vec<f64> = (0..rows)
        .map(|_| (next() >> 11) as f64 / (1u64 << 53) as f64 * 1_000.0)
        .collect();
    let amount = Decimal128Array::from(cents)
        .with_precision_and_scale(18, 2)
        .unwrap_or_else(|e| panic!("{e}"));
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("amount", DataType::Decimal128(18, 2), false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("flag", DataType::Boolean, false),
        Field::new("score", DataType::Float64, false),
    ]);
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(ids)),
        Arc::new(StringArray::from(names)),
        Arc::new(amount),
        Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        Arc::new(BooleanArray::from(flags)),
        Arc::new(Float64Array::from(scores)),
    ];
    RecordBatch::try_new(Arc::new(schema), columns).unwrap_or_else(|e| panic!("{e}"))
}
