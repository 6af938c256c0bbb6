//! The index of a trace kept beside it (`TRACE.index`), so that opening the trace again reads
//! the index and its call sites rather than replaying every event and resolving every stack. The file is the index's own types encoded with
//! postcard (serde derives: a field added to them is kept too), behind a key of what identifies
//! the trace's content (its length, modification time, inode, and hashes of its first and last
//! 64 KiB) and of the build that wrote it, and followed by a hash of all of it. A cache that is
//! damaged, made for another trace or content, or by another build of the index, is ignored and
//! replaced; one that cannot be written (a directory not writable) is skipped with a message.
//! It is written under a new name and renamed ([`memprof_files::Replacement`]): never through a
//! link, never over what is not a regular file; and read only from a regular file.

use super::index::{Agg, Classes, Edges};
use super::state::{Resolved, ResolvedRef};
use serde::{Deserialize, Serialize};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"MPINDEX1";
/// Bytes hashed at each end of the trace for its key.
const ENDS: u64 = 64 * 1024;

/// What identifies a trace's content and the build of the index.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    schema: String,
    len: u64,
    modified: (i64, u32),
    inode: (u64, u64),
    head: u64,
    tail: u64,
}

#[derive(Deserialize)]
struct Cached {
    key: Key,
    classes: Vec<(u32, u32)>,
    index: Agg,
    resolved: Option<Resolved>,
}

/// What the cache gives: the index, its classes, and the call sites resolved (which
/// [`super::state::State::with_resolved`] checks against the trace).
pub type Loaded = (Agg, Classes, Option<Resolved>);

/// Where the index of `trace` is kept.
pub fn path_of(trace: &Path) -> PathBuf {
    let mut name = trace.file_name().unwrap_or_default().to_os_string();
    name.push(".index");
    trace.with_file_name(name)
}

/// The key of the trace at `path` as it is now.
pub fn key(path: &Path) -> std::io::Result<Key> {
    use std::os::unix::fs::MetadataExt;
    // Only a regular file has a content to key (a FIFO is neither opened nor read here).
    if !std::fs::metadata(path)?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let len = meta.len();
    let mut ends = [0u64; 2];
    for (end, start) in ends.iter_mut().zip([0, len.saturating_sub(ENDS)]) {
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        (&mut file).take(ENDS).read_to_end(&mut bytes)?;
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        *end = hasher.finish();
    }
    Ok(Key {
        schema: format!(
            "{} {}",
            env!("CARGO_PKG_VERSION"),
            env!("MEMPROF_INDEX_SCHEMA")
        ),
        len,
        modified: (meta.mtime(), meta.mtime_nsec() as u32),
        inode: (meta.dev(), meta.ino()),
        head: ends[0],
        tail: ends[1],
    })
}

/// Why a cache was not used.
pub enum Miss {
    /// There is none.
    Absent,
    /// There is one, not usable: why.
    Ignored(String),
}

/// The index kept for the trace whose key is `key` and which has `stacks` stacks, when the
/// cache at `cache` holds one for it.
pub fn load(cache: &Path, key: &Key, stacks: usize) -> Result<Loaded, Miss> {
    use std::os::unix::fs::MetadataExt;
    let link = match std::fs::symlink_metadata(cache) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Miss::Absent),
        Err(e) => return Err(Miss::Ignored(e.to_string())),
    };
    if !link.is_file() {
        return Err(Miss::Ignored("not a regular file".into()));
    }
    let ignored = |why: &str| Miss::Ignored(why.into());
    let mut file = std::fs::File::open(cache).map_err(|e| Miss::Ignored(e.to_string()))?;
    // The file opened is the one looked at: no link put there since is followed.
    let meta = file.metadata().map_err(|e| Miss::Ignored(e.to_string()))?;
    if (meta.dev(), meta.ino()) != (link.dev(), link.ino()) || !meta.is_file() {
        return Err(ignored("replaced while read"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| Miss::Ignored(e.to_string()))?;
    if bytes.len() < MAGIC.len() + 8 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(ignored("not an index of memprof's"));
    }
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if sum != checksum(body).to_le_bytes() {
        return Err(ignored("damaged"));
    }
    let (cached, rest): (Cached, _) =
        postcard::take_from_bytes(&body[MAGIC.len()..]).map_err(|_| ignored("damaged"))?;
    if !rest.is_empty() {
        return Err(ignored("damaged"));
    }
    if cached.key != *key {
        return Err(ignored(
            "made for another trace, or another build of memprof",
        ));
    }
    if !consistent(&cached, stacks) {
        return Err(ignored("inconsistent"));
    }
    let mut classes = Classes::default();
    classes.sync_from(&Classes::from_pairs(cached.classes));
    Ok((cached.index, classes, cached.resolved))
}

/// Whether the index's tables agree with each other and with the trace's stacks, so that no
/// lookup of the server's goes out of them.
fn consistent(cached: &Cached, stacks: usize) -> bool {
    let index = &cached.index;
    let classes = cached.classes.len();
    // The live heap at a marker has the classes that allocated before it.
    let per_class = |v: &Vec<(f64, f64)>| v.len() <= classes;
    cached
        .classes
        .iter()
        .all(|&(stack, _)| (stack as usize) < stacks)
        && index.cells.len() == classes
        && index.first_last.len() == classes
        && index.end.len() == classes
        && index.points.values().all(per_class)
        && index.marker_live.values().all(per_class)
        && index.cells.iter().all(|cells| {
            cells.windows(2).all(|w| w[0].0 < w[1].0)
                && cells
                    .iter()
                    .all(|(b, _)| (*b as usize) < index.buckets.max(1))
        })
        && match &index.edges {
            Edges::Uniform(width) => *width > 0,
            Edges::Explicit(edges) => edges.windows(2).all(|w| w[0] <= w[1]),
        }
}

fn checksum(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// Keeps `state`'s index and call sites as those of the trace whose key is `key`.
pub fn store(cache: &Path, key: Key, state: &super::state::State) -> std::io::Result<()> {
    let cached = CachedRef {
        key,
        classes: &state.classes.list,
        index: &state.index,
        resolved: state.resolved(),
    };
    let mut bytes = MAGIC.to_vec();
    bytes = postcard::to_extend(&cached, bytes).map_err(std::io::Error::other)?;
    let sum = checksum(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    let mut file = memprof_files::Replacement::create(cache)?;
    file.file().write_all(&bytes)?;
    file.commit()?;
    Ok(())
}

/// [`Cached`] by reference, for writing.
#[derive(Serialize)]
struct CachedRef<'a> {
    key: Key,
    classes: &'a Vec<(u32, u32)>,
    index: &'a Agg,
    resolved: Option<ResolvedRef<'a>>,
}
