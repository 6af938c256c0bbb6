//! `memprof convert TRACE -o OUT.json`: the trace as Alys's JSON event list (an array of
//! `{id, time, kind, addr, size, stack}` objects, `realloc` events with `prev_addr` and
//! `prev_size`), written as the events are replayed. `id` is the allocation's, kept through its
//! reallocations and given again at its free; `time` is seconds since the trace started; `stack`
//! holds the trace's symbols, innermost first, an inlined call as a frame of its own, and a
//! function a tail call left off the stack as the reports name it (the trace's `CALLEE` records).

use crate::Failure;
use crate::moment::TraceResolver;
use memprof::{Resolve, ReturnAddress};
use memprof_trace::{Accumulated, Block, Event, Timed, Trace, Visitor};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::ControlFlow;

/// Writes every event up to `until` events (all when `None`).
pub fn write(trace: &Trace, until: Option<u64>, out: &mut dyn Write) -> Result<(), Failure> {
    let mut alys = Alys {
        trace,
        resolver: crate::moment::resolver(trace),
        stacks: HashMap::new(),
        ids: HashMap::new(),
        moving: HashMap::new(),
        next_id: 0,
        first: true,
        until,
        result: out.write_all(b"["),
        out,
        failed: false,
    };
    trace.visit(&mut alys, &mut |_| {})?;
    alys.result
        .and_then(|()| alys.out.write_all(b"\n]\n"))
        .map_err(|e| Failure(format!("cannot write: {e}"), 1))
}

/// The replay's visitor that writes each event as it comes.
struct Alys<'a> {
    trace: &'a Trace,
    resolver: TraceResolver<'a>,
    /// Each stack's frames as written, once made.
    stacks: HashMap<u32, Value>,
    /// The id of each live block, by address.
    ids: HashMap<u64, u64>,
    /// A reallocation's old block per thread: id, address, size.
    moving: HashMap<u32, (u64, u64, u64)>,
    next_id: u64,
    first: bool,
    until: Option<u64>,
    out: &'a mut dyn Write,
    result: io::Result<()>,
    /// An event could not be written: the replay stops.
    failed: bool,
}

impl Alys<'_> {
    fn stack_of(&mut self, stack: u32) -> Value {
        if let Some(known) = self.stacks.get(&stack) {
            return known.clone();
        }
        let addresses: Vec<ReturnAddress> = self.trace.stacks()[stack as usize]
            .iter()
            .map(|&a| ReturnAddress(a as usize))
            .collect();
        let resolved = self.resolver.resolve_stack(&addresses);
        let mut frames = Vec::new();
        for (address, resolved) in addresses.iter().zip(resolved) {
            let symbolized = self
                .resolver
                .frames
                .get(address)
                .is_some_and(|f| !f.is_empty());
            if !symbolized {
                frames.push(json!({"ip": address.0}));
                continue;
            }
            for frame in resolved.iter() {
                frames.push(json!({
                    "ip": address.0,
                    "line": frame.line,
                    "file": frame.file,
                    "name": frame.function,
                }));
            }
        }
        let value = Value::Array(frames);
        self.stacks.insert(stack, value.clone());
        value
    }

    fn put(&mut self, value: Value) {
        let separator: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        let out = &mut *self.out;
        self.result = out
            .write_all(separator)
            .and_then(|()| serde_json::to_writer(&mut *out, &value).map_err(io::Error::from));
        self.failed = self.result.is_err();
    }
}

impl Visitor for Alys<'_> {
    fn before(&mut self, _: &Timed, state: &Accumulated) -> ControlFlow<()> {
        if self.until.is_some_and(|n| state.events >= n) {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }

    fn alloc(&mut self, timed: &Timed, address: u64, block: &Block, _: Option<&Block>) {
        let realloc = matches!(
            timed.event,
            Event::Alloc {
                realloc_of: Some(_),
                ..
            }
        );
        let previous = if realloc {
            self.moving.remove(&timed.thread)
        } else {
            None
        };
        let id = previous.map_or_else(
            || {
                self.next_id += 1;
                self.next_id
            },
            |(id, _, _)| id,
        );
        self.ids.insert(address, id);
        let mut event = json!({
            "id": id,
            "time": timed.time as f64 / 1e9,
            "kind": if previous.is_some() { "realloc" } else { "alloc" },
            "addr": address,
            "size": block.size,
            "stack": self.stack_of(block.stack),
        });
        if let Some((_, old_address, old_size)) = previous {
            event["prev_addr"] = json!(old_address);
            event["prev_size"] = json!(old_size);
        }
        self.put(event);
    }

    fn free(&mut self, timed: &Timed, address: u64, freed: Option<&Block>, _: bool) {
        let Some(block) = freed else { return };
        let id = self.ids.remove(&address).unwrap_or_default();
        if matches!(timed.event, Event::Free { realloc: true, .. }) {
            self.moving.insert(timed.thread, (id, address, block.size));
            return;
        }
        let event = json!({
            "id": id,
            "time": timed.time as f64 / 1e9,
            "kind": "free",
            "addr": address,
            "size": block.size,
            "stack": self.stack_of(block.stack),
        });
        self.put(event);
    }

    fn after(&mut self, _: &Timed, _: &Accumulated) -> ControlFlow<()> {
        if self.failed {
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}
