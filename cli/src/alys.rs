//! `memprof convert TRACE -o OUT.json`: the trace as Alys's JSON event list (an array of
//! `{id, time, kind, addr, size, stack}` objects, `realloc` events with `prev_addr` and
//! `prev_size`), written as the events are replayed. `id` is the allocation's, kept through its
//! reallocations and given again at its free; `time` is seconds since the trace started; `stack`
//! holds the trace's symbols, innermost first, an inlined call as a frame of its own.

use crate::Failure;
use memprof_trace::{Event, Trace};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::ControlFlow;

/// Writes every event up to `until` events (all when `None`).
pub fn write(trace: &Trace, until: Option<u64>, out: &mut dyn Write) -> Result<(), Failure> {
    let symbols = crate::moment::resolver(trace);
    let mut stacks: HashMap<u32, Value> = HashMap::new();
    let stack_of = |stacks: &mut HashMap<u32, Value>, stack: u32| {
        stacks
            .entry(stack)
            .or_insert_with(|| {
                let mut frames = Vec::new();
                for &address in &trace.stacks()[stack as usize] {
                    let resolved = symbols.get(&memprof::ReturnAddress(address as usize));
                    match resolved {
                        Some(resolved) if !resolved.is_empty() => {
                            for frame in resolved {
                                frames.push(json!({
                                    "ip": address,
                                    "line": frame.line,
                                    "file": frame.file,
                                    "name": frame.function,
                                }));
                            }
                        }
                        _ => frames.push(json!({"ip": address})),
                    }
                }
                Value::Array(frames)
            })
            .clone()
    };
    // Live blocks: address → (id, size, stack); a reallocation's old block per thread.
    let mut live: HashMap<u64, (u64, u64, u32)> = HashMap::new();
    let mut moving: HashMap<u32, (u64, u64, u64)> = HashMap::new();
    let mut next_id = 0u64;
    let mut first = true;
    let mut count = 0u64;
    let mut result: io::Result<()> = out.write_all(b"[");
    trace.for_each_event(
        &mut |timed| {
            if until.is_some_and(|n| count >= n) {
                return ControlFlow::Break(());
            }
            count += 1;
            let time = timed.time as f64 / 1e9;
            let value = match timed.event {
                Event::Alloc {
                    address,
                    size,
                    stack,
                    realloc_of,
                } => {
                    let previous = realloc_of.and_then(|_| moving.remove(&timed.thread));
                    let id = previous.map_or_else(
                        || {
                            next_id += 1;
                            next_id
                        },
                        |(id, _, _)| id,
                    );
                    live.insert(address, (id, size, stack));
                    let mut event = json!({
                        "id": id,
                        "time": time,
                        "kind": if previous.is_some() { "realloc" } else { "alloc" },
                        "addr": address,
                        "size": size,
                        "stack": stack_of(&mut stacks, stack),
                    });
                    if let Some((_, old_address, old_size)) = previous {
                        event["prev_addr"] = json!(old_address);
                        event["prev_size"] = json!(old_size);
                    }
                    Some(event)
                }
                Event::Free { address, realloc } => match live.remove(&address) {
                    Some((id, size, _)) if realloc => {
                        moving.insert(timed.thread, (id, address, size));
                        None
                    }
                    Some((id, size, stack)) => Some(json!({
                        "id": id,
                        "time": time,
                        "kind": "free",
                        "addr": address,
                        "size": size,
                        "stack": stack_of(&mut stacks, stack),
                    })),
                    None => None,
                },
                Event::Mark { .. } => None,
            };
            if let Some(value) = value {
                let separator: &[u8] = if first { b"\n" } else { b",\n" };
                first = false;
                result = out.write_all(separator).and_then(|()| {
                    serde_json::to_writer(&mut *out, &value).map_err(io::Error::from)
                });
                if result.is_err() {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        },
        &mut |_| {},
    )?;
    result
        .and_then(|()| out.write_all(b"\n]\n"))
        .map_err(|e| Failure(format!("cannot write: {e}"), 1))
}
