//! pprof: a gzip-compressed `profile.proto`, as `pprof`, Speedscope, Pyroscope and Parca read it.
//!
//! Four values per call site, as Go's heap profiles have them: `alloc_objects/count`,
//! `alloc_space/bytes` (allocated over the run), `inuse_objects/count`, `inuse_space/bytes` (live
//! in the snapshot). The default sample type follows [`ExportOptions::value`] (`inuse_space` by
//! default; `alloc_space` for [`Value::AllocatedBytes`], as Go's
//! `/debug/pprof/allocs` has it). The period is `space/bytes`: the sampling interval when the
//! snapshot is sampled, whose values are then already unbiased estimates (Go's `MemProfileRate`
//! with its values scaled), or 1 when every allocation is recorded.
//!
//! [`delta_profile`] is the difference between two snapshots of this process, as Go's
//! `/debug/pprof/heap?seconds=N` serves it: what was allocated in between, and how the live heap
//! changed (negative where it shrank).
//!
//! A sample per call site and label set: the labels its blocks were allocated with
//! ([`crate::with_labels`]) are the sample's labels, a key and a string value each, as Go's
//! profiler labels are (`pprof -tags`, `-tagfocus`).
//!
//! One `Location` per return address (minus one), with its inlined frames as lines, innermost
//! first; one `Function` per name and file; one `Mapping` per code segment of a loaded module
//! that a location falls in, with the module's path and GNU build id, marked as holding functions,
//! files, lines and inlined frames: locations already carry their functions, so pprof neither
//! symbolizes them again nor asks the server for symbols.

#![forbid(unsafe_code)]

use super::{CallSites, ExportOptions, Value};
use crate::modules::{self, Module};
use crate::snapshot::{Snapshot, StackSummary};
use crate::symbolize::Resolve;
use flate2::Compression;
use flate2::write::GzEncoder;
use prost::Message;
use std::collections::HashMap;
use std::io::{self, Write};
use std::ops::Range;
use std::path::Path;

mod proto;

/// The profile's strings, deduplicated; index 0 is `""`.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Strings {
        let mut strings = Strings {
            table: Vec::new(),
            index: HashMap::new(),
        };
        strings.get("");
        strings
    }

    fn get(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_owned());
        self.index.insert(s.to_owned(), i);
        i
    }
}

/// What a code segment's file says about it.
struct SegmentFile {
    /// File offset of the segment's first byte.
    file_offset: u64,
    /// The GNU build id, in hex.
    build_id: Option<String>,
}

/// Reads the program headers and notes of `path` (not the whole file): the file offset of the
/// segment loaded at `vaddr` and the GNU build id.
fn segment_file(path: &Path, vaddr: u64) -> Option<SegmentFile> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let file = std::fs::File::open(path).ok()?;
    let cache = object::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&cache).ok()?;
    let endian = header.endian().ok()?;
    let headers = header.program_headers(endian, &cache).ok()?;
    let mut file_offset = None;
    let mut build_id = None;
    for segment in headers {
        let start = segment.p_vaddr(endian);
        if segment.p_type(endian) == object::elf::PT_LOAD
            && (start..start + segment.p_memsz(endian)).contains(&vaddr)
        {
            file_offset = Some(segment.p_offset(endian) + (vaddr - start));
        }
        if let Ok(Some(mut notes)) = segment.notes(endian, &cache) {
            while let Ok(Some(note)) = notes.next() {
                if note.name() == object::elf::ELF_NOTE_GNU
                    && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                {
                    build_id = Some(note.desc().iter().map(|b| format!("{b:02x}")).collect());
                }
            }
        }
    }
    Some(SegmentFile {
        file_offset: file_offset?,
        build_id,
    })
}

/// Mappings for the code segments locations fall in, made as they are first needed.
struct Mappings {
    modules: Vec<Module>,
    /// Segment (module index, range) to mapping id.
    ids: HashMap<(usize, usize), u64>,
    mappings: Vec<proto::Mapping>,
}

impl Mappings {
    fn id(&mut self, address: usize, strings: &mut Strings) -> u64 {
        let Some((module, segment)) = self.modules.iter().enumerate().find_map(|(m, module)| {
            module
                .text
                .iter()
                .position(|r| r.contains(&address))
                .map(|s| (m, s))
        }) else {
            return 0;
        };
        if let Some(&id) = self.ids.get(&(module, segment)) {
            return id;
        }
        let Module {
            path, bias, text, ..
        } = &self.modules[module];
        let Range { start, end } = text[segment].clone();
        let file = segment_file(path, start.wrapping_sub(*bias) as u64);
        let id = self.mappings.len() as u64 + 1;
        self.mappings.push(proto::Mapping {
            id,
            memory_start: start as u64,
            memory_limit: end as u64,
            file_offset: file.as_ref().map_or(0, |f| f.file_offset),
            filename: strings.get(&path.to_string_lossy()),
            build_id: file.and_then(|f| f.build_id).map_or(0, |b| strings.get(&b)),
            has_functions: true,
            has_filenames: true,
            has_line_numbers: true,
            has_inline_frames: true,
        });
        self.ids.insert((module, segment), id);
        id
    }
}

/// Builds the profile of `snapshot`; mappings are this process's modules that hold its addresses.
pub(crate) fn profile(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
) -> proto::Profile {
    let sites = CallSites::build_by_labels(snapshot, resolver, options);
    let values = sites
        .sites
        .iter()
        .map(|site| {
            [
                site.allocated_blocks,
                site.allocated_bytes,
                site.live_blocks,
                site.live_bytes,
            ]
            .map(clamp)
        })
        .collect();
    build(
        &sites,
        values,
        &snapshot.label_sets,
        snapshot.sample_interval,
        options,
        "",
    )
}

/// Builds the profile of what changed from `earlier` to `later` ([`write_delta`]).
pub(crate) fn delta_profile(
    later: &Snapshot,
    earlier: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
) -> proto::Profile {
    let sites = CallSites::build_by_labels(later, resolver, options);
    let none = StackSummary::default();
    let values = sites
        .sites
        .iter()
        .map(|site| {
            let mut values = [0i64; 4];
            for &id in &site.stacks {
                let now = later.stack(id);
                let before = earlier.stacks.get(id.0 as usize).unwrap_or(&none);
                // Allocated counts only grow; live ones go both ways.
                let change = [
                    clamp(now.allocated_blocks.saturating_sub(before.allocated_blocks)),
                    clamp(now.allocated_bytes.saturating_sub(before.allocated_bytes)),
                    signed_change(now.live_blocks, before.live_blocks),
                    signed_change(now.live_bytes, before.live_bytes),
                ];
                for (value, change) in values.iter_mut().zip(change) {
                    *value = value.saturating_add(change);
                }
            }
            values
        })
        .collect();
    let (sites, values) = changed(sites, values);
    build(
        &sites,
        values,
        &later.label_sets,
        later.sample_interval,
        options,
        ": the change between two snapshots",
    )
}

/// `now - before` as a signed value, clamped to `i64`.
fn signed_change(now: u64, before: u64) -> i64 {
    i64::try_from(i128::from(now) - i128::from(before)).unwrap_or(if now > before {
        i64::MAX
    } else {
        i64::MIN
    })
}

/// `v` as a profile value, clamped to `i64`.
fn clamp(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The sites whose values are not all 0, with their values, and only the locations they use.
fn changed(sites: CallSites, values: Vec<[i64; 4]>) -> (CallSites, Vec<[i64; 4]>) {
    let CallSites {
        locations,
        sites: all,
    } = sites;
    let mut kept = CallSites::default();
    let mut kept_values = Vec::new();
    let mut new_index: HashMap<usize, usize> = HashMap::new();
    for (mut site, values) in all.into_iter().zip(values) {
        if values == [0; 4] {
            continue;
        }
        for location in &mut site.locations {
            *location = *new_index.entry(*location).or_insert_with(|| {
                kept.locations.push(locations[*location].clone());
                kept.locations.len() - 1
            });
        }
        kept.sites.push(site);
        kept_values.push(values);
    }
    (kept, kept_values)
}

/// The profile of `sites` with one row of `values` per site: `alloc_objects`, `alloc_space`,
/// `inuse_objects`, `inuse_space`, and the labels of its set in `label_sets` (by id) as the
/// sample's labels. `what` ends the profile's comment.
fn build(
    sites: &CallSites,
    values: Vec<[i64; 4]>,
    label_sets: &[Vec<(String, String)>],
    sample_interval: u64,
    options: &ExportOptions,
    what: &str,
) -> proto::Profile {
    let mut strings = Strings::new();
    let value_type = |strings: &mut Strings, r#type: &str, unit: &str| proto::ValueType {
        r#type: strings.get(r#type),
        unit: strings.get(unit),
    };
    let sample_type = vec![
        value_type(&mut strings, "alloc_objects", "count"),
        value_type(&mut strings, "alloc_space", "bytes"),
        value_type(&mut strings, "inuse_objects", "count"),
        value_type(&mut strings, "inuse_space", "bytes"),
    ];
    let period_type = Some(value_type(&mut strings, "space", "bytes"));
    let mut mappings = Mappings {
        modules: modules::loaded(),
        ids: HashMap::new(),
        mappings: Vec::new(),
    };
    let mut functions: Vec<proto::Function> = Vec::new();
    let mut function_ids: HashMap<(i64, i64), u64> = HashMap::new();
    let mut locations = Vec::with_capacity(sites.locations.len());
    for (index, location) in sites.locations.iter().enumerate() {
        let address = location.address.lookup_address();
        let mut lines = Vec::new();
        for frame in &location.frames {
            if frame.function.is_none() && frame.file.is_none() {
                continue;
            }
            let name = strings.get(frame.function.as_deref().unwrap_or("[unknown]"));
            let filename = strings.get(frame.file.as_deref().unwrap_or(""));
            let function_id = *function_ids.entry((name, filename)).or_insert_with(|| {
                let id = functions.len() as u64 + 1;
                functions.push(proto::Function {
                    id,
                    name,
                    // Already demangled: pprof demangles a function whose `system_name` is its
                    // `name`, and cuts the `<...>` out of one that reads like C++
                    // (`<std::path::Path>::_join` would be `::_join`).
                    system_name: 0,
                    filename,
                });
                id
            });
            lines.push(proto::Line {
                function_id,
                line: i64::from(frame.line),
                column: i64::from(frame.column),
            });
        }
        locations.push(proto::Location {
            id: index as u64 + 1,
            mapping_id: mappings.id(address, &mut strings),
            address: address as u64,
            line: lines,
        });
    }
    let sample = sites
        .sites
        .iter()
        .zip(values)
        .map(|(site, values)| proto::Sample {
            location_id: site.locations.iter().map(|&l| l as u64 + 1).collect(),
            value: values.to_vec(),
            label: label_sets
                .get(site.labels as usize)
                .map(|pairs| {
                    pairs
                        .iter()
                        .map(|(key, value)| proto::Label {
                            key: strings.get(key),
                            str: strings.get(value),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect();
    let default_sample_type = strings.get(match options.value {
        Value::LiveBytes => "inuse_space",
        Value::AllocatedBytes => "alloc_space",
        Value::LiveBlocks => "inuse_objects",
        Value::AllocatedBlocks => "alloc_objects",
    });
    let recorded = match sample_interval {
        0 => "every allocation recorded".to_owned(),
        interval => format!(
            "one allocation recorded per {interval} bytes on average, values are unbiased estimates"
        ),
    };
    let comment = vec![strings.get(&format!("memprof heap profile ({recorded}){what}"))];
    proto::Profile {
        sample_type,
        sample,
        mapping: mappings.mappings,
        location: locations,
        function: functions,
        string_table: strings.table,
        time_nanos: clamp(options.time.as_nanos().min(u128::from(u64::MAX)) as u64),
        duration_nanos: clamp(options.elapsed.as_nanos().min(u128::from(u64::MAX)) as u64),
        period_type,
        period: clamp(sample_interval.max(1)),
        comment,
        default_sample_type,
    }
}

/// Writes `snapshot` as a gzip-compressed pprof profile.
pub fn write<W: Write + ?Sized>(
    snapshot: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| encode(&profile(snapshot, resolver, options), out))
}

/// Writes, as a gzip-compressed pprof profile, what changed from `earlier` to `later`, two
/// snapshots of this process (`earlier` taken first): per call site, the blocks and bytes allocated in between
/// (`alloc_*`) and the change of the live ones (`inuse_*`, negative where they shrank). Call sites
/// where nothing changed are left out. `options.time` and `options.elapsed` should say when the
/// interval started and how long it was (Go's delta profiles carry those).
///
/// Stacks are matched by id, which is stable within a process: a stack `earlier` does not have
/// was first seen in between.
pub fn write_delta<W: Write + ?Sized>(
    later: &Snapshot,
    earlier: &Snapshot,
    resolver: &mut dyn Resolve,
    options: &ExportOptions,
    out: &mut W,
) -> io::Result<()> {
    crate::guard::untracked(|| encode(&delta_profile(later, earlier, resolver, options), out))
}

/// Writes `profile` gzip-compressed.
fn encode<W: Write + ?Sized>(profile: &proto::Profile, out: &mut W) -> io::Result<()> {
    let bytes = profile.encode_to_vec();
    let mut gzip = GzEncoder::new(out, Compression::default());
    gzip.write_all(&bytes)?;
    gzip.finish()?;
    Ok(())
}
