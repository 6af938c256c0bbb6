//! The process's memory as the kernel tells it: its resident size, and the memory limit of its
//! cgroup with the use counted against it. Read from `/proc` and the cgroup file system, by
//! memprof's own threads only (never on the allocation path); the maps-line parser alone also
//! serves the allocation path, which reads the file itself.
//!
//! A shared building block: it imports no stage.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// Bytes allocated inside memprof's reentrancy guard and not freed there: memprof's own tables
/// and work, as the global allocator counts them.
static OWN_BYTES: AtomicI64 = AtomicI64::new(0);

/// Adds `bytes` (negative when freed) to memprof's own memory.
#[inline]
pub(crate) fn own_changed(bytes: i64) {
    OWN_BYTES.fetch_add(bytes, Relaxed);
}

/// memprof's own memory in bytes, as counted by [`own_changed`].
pub(crate) fn own_bytes() -> u64 {
    OWN_BYTES.load(Relaxed).max(0) as u64
}

/// The process's resident memory in bytes (`VmRSS` of `/proc/self/status`).
pub(crate) fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    kib_field(&status, "VmRSS:")
}

/// The value of a `NAME:   123 kB` line, in bytes.
pub(crate) fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// A mapping's header line of `/proc/self/maps` (or `smaps`):
/// `start-end perms offset dev inode [name]`. Parsed without allocating: the allocation path's
/// stack bounds read the maps with it (`capture::fp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MapsLine<'a> {
    pub start: usize,
    pub end: usize,
    pub perms: &'a str,
    pub inode: u64,
    /// The file's path or the kernel's name (`[heap]`), empty for an anonymous mapping.
    pub name: &'a str,
}

/// `line` read as a mapping's header line; `None` for any other line (an `smaps` field).
/// Allocates nothing, takes no lock, cannot panic.
pub(crate) fn maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let (_offset, _dev) = (fields.next()?, fields.next()?);
    let inode = fields.next()?.parse().ok()?;
    Some(MapsLine {
        start,
        end,
        perms,
        inode,
        name: fields.next().unwrap_or(""),
    })
}

/// The cgroup whose memory limit binds this process: of the process's own cgroup and its
/// ancestors, the one with the smallest limit.
#[derive(Clone, Debug)]
pub(crate) struct Cgroup {
    /// Its directory in the cgroup file system.
    dir: PathBuf,
    /// Version 1 (`memory.limit_in_bytes`) rather than 2 (`memory.max`).
    v1: bool,
}

/// A cgroup's limit and the use counted against it, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CgroupUse {
    /// `memory.max` (v1: `memory.limit_in_bytes`).
    pub limit: u64,
    /// `memory.current` less the inactive file cache of `memory.stat`, which the kernel reclaims
    /// before it kills (the "working set" that Kubernetes and cAdvisor report).
    pub used: u64,
}

impl Cgroup {
    /// The limiting cgroup of this process: cgroup v2 first, then v1's memory controller;
    /// `None` when no cgroup over the process has a memory limit.
    pub(crate) fn find() -> Option<Cgroup> {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        Self::find_v2(&membership, &mountinfo).or_else(|| Self::find_v1(&membership, &mountinfo))
    }

    fn find_v2(membership: &str, mountinfo: &str) -> Option<Cgroup> {
        let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
        let (root, mount) = mount_of(mountinfo, |fstype, _| fstype == "cgroup2")?;
        smallest(&root, &mount, path, false)
    }

    fn find_v1(membership: &str, mountinfo: &str) -> Option<Cgroup> {
        let path = membership.lines().find_map(|l| {
            let mut fields = l.splitn(3, ':');
            let _id = fields.next()?;
            let controllers = fields.next()?;
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| fields.next())
                .flatten()
        })?;
        let (root, mount) = mount_of(mountinfo, |fstype, options| {
            fstype == "cgroup" && options.split(',').any(|o| o == "memory")
        })?;
        smallest(&root, &mount, path, true)
    }

    /// A cgroup at `dir`, for tests.
    #[cfg(test)]
    pub(crate) fn at(dir: PathBuf, v1: bool) -> Cgroup {
        Cgroup { dir, v1 }
    }

    /// Its limit and use now; `None` when they cannot be read, or it has no limit any more.
    pub(crate) fn read(&self) -> Option<CgroupUse> {
        let (limit_file, current_file, inactive) = if self.v1 {
            (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "total_inactive_file ",
            )
        } else {
            ("memory.max", "memory.current", "inactive_file ")
        };
        let limit = limit_of(&self.dir.join(limit_file))?;
        let current: u64 = read_number(&self.dir.join(current_file))?;
        let stat = std::fs::read_to_string(self.dir.join("memory.stat")).unwrap_or_default();
        let inactive_file: u64 = stat
            .lines()
            .find_map(|l| l.strip_prefix(inactive))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        Some(CgroupUse {
            limit,
            used: current.saturating_sub(inactive_file),
        })
    }

    /// Its directory.
    #[cfg(test)]
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

/// Of the cgroup at `path` (as `/proc/self/cgroup` names it) and its ancestors up to the mount,
/// the one with the smallest limit.
fn smallest(root: &str, mount: &Path, path: &str, v1: bool) -> Option<Cgroup> {
    let relative = path.strip_prefix(root).unwrap_or(path);
    let mut dir = mount.join(relative.trim_start_matches('/'));
    let limit_file = if v1 {
        "memory.limit_in_bytes"
    } else {
        "memory.max"
    };
    let mut best: Option<(u64, PathBuf)> = None;
    loop {
        if let Some(limit) = limit_of(&dir.join(limit_file))
            && best.as_ref().is_none_or(|(b, _)| limit < *b)
        {
            best = Some((limit, dir.clone()));
        }
        if dir == mount || !dir.pop() || !dir.starts_with(mount) {
            break;
        }
    }
    best.map(|(_, dir)| Cgroup { dir, v1 })
}

/// The mount root and mount point of the first file system of `mountinfo` that `wanted` takes
/// (given its type and super options).
fn mount_of(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_whitespace();
        let fstype = right.next()?;
        let _source = right.next();
        let options = right.next().unwrap_or("");
        if !wanted(fstype, options) {
            return None;
        }
        let mut left = left.split_whitespace();
        let root = left.nth(3)?;
        let mount = left.next()?;
        Some((root.to_owned(), PathBuf::from(mount)))
    })
}

/// A memory limit file: `max`, or a v1 limit of 2^62 bytes or more, is no limit.
fn limit_of(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let limit: u64 = text.trim().parse().ok()?;
    (limit < 1 << 62).then_some(limit)
}

fn read_number(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_and_fields() {
        let mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                         35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                         41 31 0:38 /sub /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            mount_of(mountinfo, |t, _| t == "cgroup2"),
            Some(("/sub".to_owned(), PathBuf::from("/sys/fs/cgroup/unified")))
        );
        assert_eq!(
            mount_of(mountinfo, |t, o| t == "cgroup" && o.contains("memory")),
            Some(("/".to_owned(), PathBuf::from("/sys/fs/cgroup/memory")))
        );
        assert_eq!(
            kib_field("Name:\tx\nVmRSS:\t  1234 kB\n", "VmRSS:"),
            Some(1234 * 1024)
        );
    }

    #[test]
    fn limits_and_use_of_a_cgroup_directory() {
        let dir = std::env::temp_dir().join(format!("memprof-cgroup-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("child")).unwrap();
        std::fs::write(dir.join("memory.max"), "1000000\n").unwrap();
        std::fs::write(dir.join("child/memory.max"), "max\n").unwrap();
        std::fs::write(dir.join("child/memory.current"), "500000\n").unwrap();
        std::fs::write(
            dir.join("child/memory.stat"),
            "anon 300000\nfile 200000\ninactive_file 150000\n",
        )
        .unwrap();
        // The parent's limit binds the child.
        let found = smallest("/", &dir, "/child", false).unwrap();
        assert_eq!(found.dir(), dir.as_path());
        let child = Cgroup::at(dir.join("child"), false);
        assert_eq!(child.read(), None, "no limit of its own");
        std::fs::write(dir.join("child/memory.max"), "800000\n").unwrap();
        assert_eq!(
            child.read(),
            Some(CgroupUse {
                limit: 800_000,
                used: 350_000
            })
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
