//! The messages of `profile.proto` that memprof writes, with their field numbers. Private to
//! the crate: users get profiles as bytes ([`super::write`], [`super::write_delta`]); the tests
//! decode them with this same file (`tests/common/mod.rs` includes it).

/// A profile: the top-level message.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Profile {
    /// What each value of a sample measures.
    #[prost(message, repeated, tag = "1")]
    pub(crate) sample_type: Vec<ValueType>,
    /// One per call site.
    #[prost(message, repeated, tag = "2")]
    pub(crate) sample: Vec<Sample>,
    /// Loaded code the locations fall in.
    #[prost(message, repeated, tag = "3")]
    pub(crate) mapping: Vec<Mapping>,
    /// Return addresses with their source lines.
    #[prost(message, repeated, tag = "4")]
    pub(crate) location: Vec<Location>,
    /// Functions the lines name.
    #[prost(message, repeated, tag = "5")]
    pub(crate) function: Vec<Function>,
    /// Every string; `string_table[0]` is `""`.
    #[prost(string, repeated, tag = "6")]
    pub(crate) string_table: Vec<String>,
    /// When the profile was taken, in nanoseconds since the Unix epoch.
    #[prost(int64, tag = "9")]
    pub(crate) time_nanos: i64,
    /// How long the profiled program had run, in nanoseconds.
    #[prost(int64, tag = "10")]
    pub(crate) duration_nanos: i64,
    /// What the period counts.
    #[prost(message, optional, tag = "11")]
    pub(crate) period_type: Option<ValueType>,
    /// Events per sample.
    #[prost(int64, tag = "12")]
    pub(crate) period: i64,
    /// Free-text comments (string table indices).
    #[prost(int64, repeated, tag = "13")]
    pub(crate) comment: Vec<i64>,
    /// The sample type shown first (string table index of its type).
    #[prost(int64, tag = "14")]
    pub(crate) default_sample_type: i64,
}

/// A type and unit, as string table indices.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ValueType {
    /// `alloc_space`, `inuse_objects`, ...
    #[prost(int64, tag = "1")]
    pub r#type: i64,
    /// `bytes`, `count`.
    #[prost(int64, tag = "2")]
    pub(crate) unit: i64,
}

/// Values for one stack.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Sample {
    /// Location ids, the leaf first.
    #[prost(uint64, repeated, tag = "1")]
    pub(crate) location_id: Vec<u64>,
    /// One per sample type.
    #[prost(int64, repeated, tag = "2")]
    pub(crate) value: Vec<i64>,
    /// The labels its blocks were allocated with.
    #[prost(message, repeated, tag = "3")]
    pub(crate) label: Vec<Label>,
}

/// A sample's label: a key with a string value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Label {
    /// The key (string table index).
    #[prost(int64, tag = "1")]
    pub(crate) key: i64,
    /// The value (string table index).
    #[prost(int64, tag = "2")]
    pub(crate) str: i64,
}

/// A loaded code segment.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Mapping {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    /// First address of the segment in memory.
    #[prost(uint64, tag = "2")]
    pub(crate) memory_start: u64,
    /// Address just after it.
    #[prost(uint64, tag = "3")]
    pub(crate) memory_limit: u64,
    /// Where `memory_start` is in the file.
    #[prost(uint64, tag = "4")]
    pub(crate) file_offset: u64,
    /// The module's path (string table index).
    #[prost(int64, tag = "5")]
    pub(crate) filename: i64,
    /// Its GNU build id in hex (string table index; 0 when it has none).
    #[prost(int64, tag = "6")]
    pub(crate) build_id: i64,
    /// Locations in it carry function names.
    #[prost(bool, tag = "7")]
    pub(crate) has_functions: bool,
    /// ... and file names.
    #[prost(bool, tag = "8")]
    pub(crate) has_filenames: bool,
    /// ... and line numbers.
    #[prost(bool, tag = "9")]
    pub(crate) has_line_numbers: bool,
    /// ... and their inlined calls.
    #[prost(bool, tag = "10")]
    pub(crate) has_inline_frames: bool,
}

/// One return address.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Location {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    /// The mapping it falls in; 0 when none.
    #[prost(uint64, tag = "2")]
    pub(crate) mapping_id: u64,
    /// The address inside the call instruction.
    #[prost(uint64, tag = "3")]
    pub(crate) address: u64,
    /// Its frames, innermost (inlined) first, the caller last.
    #[prost(message, repeated, tag = "4")]
    pub(crate) line: Vec<Line>,
}

/// A source line of a location.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Line {
    /// The function it is in.
    #[prost(uint64, tag = "1")]
    pub(crate) function_id: u64,
    /// 1-based; 0 when unknown.
    #[prost(int64, tag = "2")]
    pub(crate) line: i64,
    /// 1-based; 0 when unknown.
    #[prost(int64, tag = "3")]
    pub(crate) column: i64,
}

/// A function.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Function {
    /// Unique, non-zero.
    #[prost(uint64, tag = "1")]
    pub(crate) id: u64,
    /// Demangled name (string table index).
    #[prost(int64, tag = "2")]
    pub(crate) name: i64,
    /// The name as the symbol table has it (string table index); memprof writes 0 (empty),
    /// its names being demangled already.
    #[prost(int64, tag = "3")]
    pub(crate) system_name: i64,
    /// Source file (string table index).
    #[prost(int64, tag = "4")]
    pub(crate) filename: i64,
}
