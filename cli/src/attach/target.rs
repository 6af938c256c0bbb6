//! What `memprof attach` reads of the running process before it touches it: `/proc/PID` (its
//! status, its mappings) and the ELF files of its modules (their class, interpreter and symbols).

use object::{Object, ObjectSymbol};
use std::io;
use std::path::{Path, PathBuf};

/// A line of `/proc/PID/status`: the value after `name:`.
pub fn status_field(pid: u32, name: &str) -> io::Result<Option<String>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    Ok(text
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned()))
}

/// This process's effective user id (from `/proc/self/status`).
pub fn own_euid() -> Option<u32> {
    let uid = status_field(std::process::id(), "Uid").ok()??;
    uid.split_whitespace().nth(1)?.parse().ok()
}

/// A file as `/proc/PID/maps` names it: by its path (resolved), or by its device (`major:minor`,
/// in hex) and inode. Either may differ between what the command sees and what the process's
/// mappings say (another mount namespace; an overlay file system, whose mappings name the
/// layer's device): one matching is enough.
#[derive(Debug)]
pub struct FileId {
    pub path: Vec<u8>,
    pub device: String,
    pub inode: String,
}

impl FileId {
    /// The id of the file at `path`.
    pub fn of(path: &Path) -> io::Result<FileId> {
        use std::os::unix::ffi::OsStrExt;
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(path)?;
        let dev = meta.dev();
        Ok(FileId {
            path: std::fs::canonicalize(path)?.as_os_str().as_bytes().to_vec(),
            device: format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev)),
            inode: meta.ino().to_string(),
        })
    }

    /// Whether process `pid` maps the file: `Ok(false)` once it has replaced its image
    /// (`exec`), an error when the process cannot be read (gone).
    pub fn mapped_by(&self, pid: u32) -> io::Result<bool> {
        let text = std::fs::read(format!("/proc/{pid}/maps"))?;
        Ok(text.split(|&b| b == b'\n').any(|line| self.names(line)))
    }

    /// Whether a line of `/proc/PID/maps` is a mapping of the file.
    fn names(&self, line: &[u8]) -> bool {
        let mut rest = line;
        let mut fields = [&[][..]; 5];
        for field in &mut fields {
            rest = rest.trim_ascii_start();
            let end = rest
                .iter()
                .position(u8::is_ascii_whitespace)
                .unwrap_or(rest.len());
            (*field, rest) = rest.split_at(end);
        }
        rest.trim_ascii_start() == self.path.as_slice()
            || (fields[3] == self.device.as_bytes() && fields[4] == self.inode.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::FileId;

    #[test]
    fn a_mapping_is_the_file_by_its_path_or_its_device_and_inode() {
        let id = FileId {
            path: b"/tmp/memprof-attach-x/libmemprof_preload.so".to_vec(),
            device: "fd:01".into(),
            inode: "1234".into(),
        };
        let line = |dev: &str, inode: &str, path: &str| {
            format!("7f00-7f10 r-xp 00000000 {dev} {inode}                      {path}")
        };
        let path = "/tmp/memprof-attach-x/libmemprof_preload.so";
        assert!(id.names(line("fd:01", "1234", path).as_bytes()));
        // An overlay: the layer's device in the mappings.
        assert!(id.names(line("00:2f", "1234", path).as_bytes()));
        // Another mount namespace's path for the same file.
        assert!(id.names(line("fd:01", "1234", "/other/libmemprof_preload.so").as_bytes()));
        assert!(!id.names(line("fd:01", "99", "/usr/lib/libc.so.6").as_bytes()));
        assert!(!id.names(line("00:00", "0", "").as_bytes()));
        assert!(!id.names(b""));
    }
}

/// A file mapped into the process, as `/proc/PID/maps` lists it.
#[derive(Clone, Debug)]
pub struct Module {
    /// The file.
    pub path: PathBuf,
    /// The start of its first mapping (file offset 0): its load address.
    pub base: u64,
    /// Its executable ranges.
    pub code: Vec<(u64, u64)>,
    /// Whether the file was deleted or replaced since it was mapped (an upgrade): what is on
    /// disk at its path, if anything, is not what runs.
    pub deleted: bool,
}

impl Module {
    /// The file's name (its last part).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Where this command reads the file of process `pid`: through the process's own root
    /// (`/proc/PID/root`), so that a process in another mount namespace (a container) has its own
    /// files read, not the files of the same names here.
    pub fn file(&self, pid: u32) -> PathBuf {
        let mut file = PathBuf::from(format!("/proc/{pid}/root"));
        file.push(self.path.strip_prefix("/").unwrap_or(&self.path));
        file
    }

    /// The range of addresses from its first executable byte to its last.
    pub fn code_span(&self) -> (u64, u64) {
        let low = self.code.iter().map(|c| c.0).min().unwrap_or(0);
        let high = self.code.iter().map(|c| c.1).max().unwrap_or(0);
        (low, high)
    }
}

/// The files mapped into process `pid`, in the order of their first mapping.
pub fn modules(pid: u32) -> io::Result<Vec<Module>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let mut found: Vec<Module> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms), Some(offset), _, _) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let path: Vec<&str> = fields.collect();
        let path = path.join(" ");
        let (path, deleted) = match path.strip_suffix(" (deleted)") {
            Some(path) => (path.to_owned(), true),
            None => (path, false),
        };
        if !path.starts_with('/') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(offset)) = (
            u64::from_str_radix(start, 16),
            u64::from_str_radix(end, 16),
            u64::from_str_radix(offset, 16),
        ) else {
            continue;
        };
        let path = PathBuf::from(path);
        let index = match found.iter().position(|m| m.path == path) {
            Some(index) => index,
            None => {
                found.push(Module {
                    path,
                    base: if offset == 0 { start } else { 0 },
                    code: Vec::new(),
                    deleted,
                });
                found.len() - 1
            }
        };
        let module = &mut found[index];
        module.deleted |= deleted;
        if offset == 0 && (module.base == 0 || start < module.base) {
            module.base = start;
        }
        if perms.contains('x') {
            module.code.push((start, end));
        }
    }
    Ok(found)
}

/// What an ELF file says of itself.
pub struct Elf {
    /// Its class: 64-bit or not.
    pub is_64: bool,
    /// Whether it names an interpreter (dynamically linked).
    pub dynamic: bool,
    /// Position-independent (`ET_DYN`): its symbols are relative to its load address.
    pub relocatable: bool,
    /// Its symbols (the symbol table's, then the dynamic symbol table's): name, value, whether
    /// defined, whether a function.
    pub symbols: Vec<(String, u64, bool, bool)>,
}

/// Reads the ELF file at `path`; `symbols`: its symbol tables too.
pub fn read_elf(path: &Path, symbols: bool) -> io::Result<Elf> {
    let bytes = std::fs::read(path)?;
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err(invalid(format!("{} is not an ELF file", path.display())));
    }
    if bytes.get(4) == Some(&1) {
        return Ok(Elf {
            is_64: false,
            dynamic: false,
            relocatable: false,
            symbols: Vec::new(),
        });
    }
    let file =
        object::File::parse(&*bytes).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let dynamic = match &file {
        object::File::Elf64(elf) => {
            use object::read::elf::ProgramHeader;
            let endian = elf.endian();
            elf.elf_program_headers()
                .iter()
                .any(|h| h.p_type(endian) == object::elf::PT_INTERP)
        }
        _ => false,
    };
    let relocatable = file.kind() == object::ObjectKind::Dynamic;
    let mut list = Vec::new();
    if symbols {
        for symbol in file.symbols().chain(file.dynamic_symbols()) {
            if let Ok(name) = symbol.name() {
                list.push((
                    name.to_owned(),
                    symbol.address(),
                    symbol.is_definition(),
                    symbol.kind() == object::SymbolKind::Text,
                ));
            }
        }
    }
    Ok(Elf {
        is_64: true,
        dynamic,
        relocatable,
        symbols: list,
    })
}

/// The address in the process of the function `name` defined by `module`.
pub fn function_address(module: &Module, elf: &Elf, name: &str) -> Option<u64> {
    let value = elf
        .symbols
        .iter()
        .find(|(n, value, defined, function)| n == name && *defined && *function && *value != 0)?
        .1;
    Some(if elf.relocatable {
        module.base + value
    } else {
        value
    })
}

/// Whether a symbol's name is one of memprof's: a Rust symbol of the `memprof` crate (legacy or
/// v0 mangling), or one of its C functions (`memprof_*`, `include/memprof.h`).
pub fn is_memprof_symbol(name: &str) -> bool {
    name.starts_with("memprof_")
        || (name.starts_with("_ZN7memprof") && !name.starts_with("_ZN7memprof_"))
        || (name.starts_with("_R") && name.contains("7memprof") && !name.contains("7memprof_"))
}
