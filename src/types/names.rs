//! Reading Rust type paths out of function names.
//!
//! Function names come in two shapes. v0-mangled symbols demangle with concrete generic arguments
//! (`<alloc::boxed::Box<app::Foo>>::new`); legacy-mangled ones with the impl's parameters
//! (`alloc::boxed::Box<T>::new`), whose values only the DWARF name of the instance carries
//! (`new<app::Foo>`). [`self_type`] reads the first shape, [`substitute`] turns the second into the
//! first.

/// The type a function belongs to: `alloc::boxed::Box` with its generic arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SelfType<'a> {
    /// The path, without generic arguments (`alloc::raw_vec::RawVec`); for a free function, the
    /// whole function path.
    pub path: &'a str,
    /// The generic arguments as written (`["app::Foo"]`, `["(u64, app::Foo)"]`); empty when none.
    pub args: Vec<&'a str>,
}

impl SelfType<'_> {
    /// Whether this is the type `path` itself or one of its functions (`alloc::string::String`
    /// matches both `<alloc::string::String>::push_str` and `alloc::string::String::push_str`).
    pub(crate) fn is(&self, path: &str) -> bool {
        match self.path.strip_prefix(path) {
            Some(rest) => rest.is_empty() || rest.starts_with("::"),
            None => false,
        }
    }

    /// Whether any argument is a bare generic parameter (`T`, `K`, `A`), unknown to this name.
    pub(crate) fn has_parameters(&self) -> bool {
        self.args.iter().any(|a| is_parameter(a))
    }
}

/// Whether `arg` reads like a generic parameter: one identifier that starts with an upper-case
/// letter and has no path (`T`, `K`, `Alloc`), or the placeholder `_`.
pub(crate) fn is_parameter(arg: &str) -> bool {
    let arg = arg.trim();
    arg == "_"
        || (arg.starts_with(|c: char| c.is_ascii_uppercase())
            && arg.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// The index just past the `>` that closes the `<` at `open`, skipping the `>` of `->`.
fn closing(s: &str, open: usize) -> Option<usize> {
    let bytes = s.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    while i < bytes.len() {
        match bytes[i] {
            b'<' => depth += 1,
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// Splits a generic argument list at its top-level commas and trims each argument:
/// `u64, (a, b), Foo<X, Y>` gives `u64`, `(a, b)`, `Foo<X, Y>`.
pub(crate) fn split_args(list: &str) -> Vec<&str> {
    let bytes = list.as_bytes();
    let mut args = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' | b')' | b']' | b'}' => depth -= 1,
            b',' if depth == 0 => {
                args.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = list[start..].trim();
    if !last.is_empty() || !args.is_empty() {
        args.push(last);
    }
    args
}

/// Where the path at the start of `s` ends: at the first character that is not part of an
/// identifier or a `::` separator.
fn path_end(s: &str) -> usize {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80 {
            i += 1;
        } else if c == b':' && bytes.get(i + 1) == Some(&b':') {
            i += 2;
        } else if c == b'{' {
            // `{closure#0}`, `{impl#1}`: part of the path.
            match s[i..].find('}') {
                Some(end) => i += end + 1,
                None => break,
            }
        } else {
            break;
        }
    }
    i
}

/// The type a function name belongs to, read from either demangled shape:
/// `<alloc::boxed::Box<app::Foo>>::new`, `alloc::raw_vec::RawVec<T,A>::grow_one`,
/// `<alloc::vec::Vec<u8> as core::clone::Clone>::clone`. A free function yields its own path.
pub(crate) fn self_type(function: &str) -> Option<SelfType<'_>> {
    let s = function.strip_prefix('<').unwrap_or(function);
    let end = path_end(s);
    if end == 0 {
        return None;
    }
    let path = s[..end].trim_end_matches(':');
    let args = if s[end..].starts_with('<') {
        let close = closing(s, end)?;
        split_args(&s[end + 1..close - 1])
    } else {
        Vec::new()
    };
    Some(SelfType { path, args })
}

/// The generic arguments of a DWARF function name: `new<app::Foo>` gives `app::Foo`;
/// `grow_one<app::Bar, alloc::alloc::Global>` gives both. `None` without a list.
pub(crate) fn name_args(dwarf_name: &str) -> Option<Vec<&str>> {
    let open = dwarf_name.find('<')?;
    let close = closing(dwarf_name, open)?;
    Some(split_args(&dwarf_name[open + 1..close - 1]))
}

/// Replaces the parameters named in `params` by their values wherever they stand as whole
/// identifiers in `text` (`&[T]` with `T = app::Foo` gives `&[app::Foo]`).
fn replace_parameters(text: &str, params: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphanumeric() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            let after_path = start >= 2 && &text[start - 2..start] == "::";
            match params.iter().find(|(name, _)| *name == word) {
                Some((_, value)) if !after_path => out.push_str(value),
                _ => out.push_str(word),
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// Puts the concrete generic arguments of a DWARF instance name into a legacy demangled function
/// name: `alloc::boxed::Box<T>::new` with `new<app::Foo>` gives `alloc::boxed::Box<app::Foo>::new`.
///
/// The parameters of the self type, in order of first appearance, take the instance's arguments
/// in order (the impl's parameters come first in both). `None` when there is nothing to replace or
/// the instance name has too few arguments.
pub(crate) fn substitute(function: &str, dwarf_name: &str) -> Option<String> {
    let self_ty = self_type(function)?;
    let mut params: Vec<&str> = Vec::new();
    for arg in &self_ty.args {
        if is_parameter(arg) && *arg != "_" && !params.contains(arg) {
            params.push(arg);
        }
    }
    if params.is_empty() {
        return None;
    }
    let values = name_args(dwarf_name)?;
    if values.len() < params.len() {
        return None;
    }
    let pairs: Vec<(&str, &str)> = params.iter().copied().zip(values).collect();
    let lead = usize::from(function.starts_with('<'));
    let open = lead + self_ty.path.len();
    let close = closing(function, open)?;
    let args: Vec<String> = self_ty
        .args
        .iter()
        .map(|a| replace_parameters(a, &pairs))
        .collect();
    Some(format!(
        "{}{}<{}>{}",
        &function[..lead],
        self_ty.path,
        args.join(", "),
        &function[close..]
    ))
}

/// `path<args>` with the trailing arguments that are defaults left out (`alloc::alloc::Global`
/// everywhere, and `defaults` of this type), as `std::any::type_name` prints types.
pub(crate) fn type_with_args(path: &str, args: &[&str], defaults: &[&str]) -> String {
    let mut args = args.to_vec();
    while let Some(last) = args.last() {
        if *last == "alloc::alloc::Global" || defaults.contains(last) {
            args.pop();
        } else {
            break;
        }
    }
    if args.is_empty() {
        path.to_owned()
    } else {
        format!("{path}<{}>", args.join(", "))
    }
}

/// Generic arguments that are defaults, left out as `std::any::type_name` leaves them out: the
/// global allocator everywhere, std's `RandomState` as the hasher of std's maps and sets.
fn is_default_arg(path: &str, arg: &str) -> bool {
    arg == "alloc::alloc::Global"
        || (arg == "std::hash::random::RandomState"
            && (path == "std::collections::hash::map::HashMap"
                || path == "std::collections::hash::set::HashSet"))
}

/// Writes a type name as `std::any::type_name` does: `, ` between generic arguments, and trailing
/// default arguments left out at every depth (`[alloc::boxed::Box<app::Foo,alloc::alloc::Global>]`
/// gives `[alloc::boxed::Box<app::Foo>]`).
pub(crate) fn normalize(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut at = 0;
    while at < name.len() {
        let Some(open) = name[at..].find('<').map(|i| at + i) else {
            out.push_str(&name[at..]);
            break;
        };
        let Some(close) = closing(name, open) else {
            out.push_str(&name[at..]);
            break;
        };
        let path_start = name[..open]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
            .map_or(0, |i| i + 1);
        let path = &name[path_start..open];
        out.push_str(&name[at..open]);
        let mut args: Vec<String> = split_args(&name[open + 1..close - 1])
            .iter()
            .map(|a| normalize(a))
            .collect();
        while args.len() > 1 && args.last().is_some_and(|a| is_default_arg(path, a)) {
            args.pop();
        }
        if args.len() == 1 && !path.is_empty() && is_default_arg(path, &args[0]) {
            args.pop();
        }
        if !args.is_empty() {
            out.push('<');
            out.push_str(&args.join(", "));
            out.push('>');
        }
        at = close;
    }
    out
}

/// Whether blocks of the type `name` are hashbrown tables (std's `HashMap` and `HashSet`, or
/// hashbrown's own), which their owners point into rather than at.
pub(crate) fn is_hash_table(name: &str) -> bool {
    [
        "std::collections::hash::map::HashMap<",
        "std::collections::hash::set::HashSet<",
        "hashbrown::map::HashMap<",
        "hashbrown::set::HashSet<",
        "hashbrown::raw::RawTable<",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

/// Whether the blocks reported under the type `name` can hold no pointer, so they need not be
/// scanned for references: `String` (its byte buffer), and values of pointer-free types.
pub(crate) fn is_pointer_free(name: &str) -> bool {
    name.trim() == "alloc::string::String" || value_is_pointer_free(name)
}

/// Whether values of the type `name` hold no pointer: primitives, `str`, and arrays, slices and
/// tuples of those.
fn value_is_pointer_free(name: &str) -> bool {
    const PRIMITIVES: &[&str] = &[
        "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize",
        "f32", "f64", "bool", "char", "str", "()",
    ];
    let name = name.trim();
    if PRIMITIVES.contains(&name) {
        return true;
    }
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        // `[T]` or `[T; N]`: the element ends at a `;` outside any nesting.
        let mut depth = 0i32;
        let semi = inner.char_indices().find_map(|(i, c)| {
            match c {
                '<' | '(' | '[' => depth += 1,
                '>' | ')' | ']' => depth -= 1,
                ';' if depth == 0 => return Some(i),
                _ => {}
            }
            None
        });
        let element = semi.map_or(inner, |semi| &inner[..semi]);
        return value_is_pointer_free(element);
    }
    if let Some(inner) = name.strip_prefix('(').and_then(|n| n.strip_suffix(')')) {
        return split_args(inner).iter().all(|a| value_is_pointer_free(a));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_types_of_both_shapes() {
        let v0 = self_type("<alloc::boxed::Box<app::Foo>>::new").unwrap();
        assert_eq!(v0.path, "alloc::boxed::Box");
        assert_eq!(v0.args, ["app::Foo"]);
        let legacy = self_type("alloc::raw_vec::RawVec<T,A>::grow_one").unwrap();
        assert_eq!(legacy.path, "alloc::raw_vec::RawVec");
        assert_eq!(legacy.args, ["T", "A"]);
        assert!(legacy.has_parameters());
        let table = self_type(
            "<hashbrown::raw::RawTable<(u64, app::Foo)>>::reserve_rehash::<hashbrown::map::make_hasher<u64, app::Foo, std::hash::random::RandomState>::{closure#0}>",
        )
        .unwrap();
        assert_eq!(table.path, "hashbrown::raw::RawTable");
        assert_eq!(table.args, ["(u64, app::Foo)"]);
        let as_trait =
            self_type("<alloc::vec::Vec<app::Foo> as core::clone::Clone>::clone").unwrap();
        assert_eq!(as_trait.path, "alloc::vec::Vec");
        assert_eq!(as_trait.args, ["app::Foo"]);
        let plain = self_type("<alloc::string::String>::push_str").unwrap();
        assert!(plain.is("alloc::string::String"));
        assert!(plain.args.is_empty());
        let legacy_plain = self_type("alloc::string::String::push_str").unwrap();
        assert!(legacy_plain.is("alloc::string::String"));
        assert!(!legacy_plain.is("alloc::string::Str"));
        let closure = self_type("app::main::{closure#0}").unwrap();
        assert_eq!(closure.path, "app::main::{closure#0}");
        let fn_type =
            self_type("<alloc::boxed::Box<dyn core::ops::function::Fn(u8) -> u8>>::new").unwrap();
        assert_eq!(fn_type.args, ["dyn core::ops::function::Fn(u8) -> u8"]);
    }

    #[test]
    fn argument_lists_split_at_top_level() {
        assert_eq!(
            split_args("u64, (a, b), Foo<X, Y>, [u8; 4]"),
            ["u64", "(a, b)", "Foo<X, Y>", "[u8; 4]"]
        );
        assert_eq!(split_args(""), Vec::<&str>::new());
        assert_eq!(
            name_args("grow_one<app::Bar, alloc::alloc::Global>").unwrap(),
            ["app::Bar", "alloc::alloc::Global"]
        );
        assert_eq!(name_args("make_box"), None);
    }

    #[test]
    fn legacy_names_take_the_instance_arguments() {
        assert_eq!(
            substitute("alloc::boxed::Box<T>::new", "new<app::Foo>").unwrap(),
            "alloc::boxed::Box<app::Foo>::new"
        );
        assert_eq!(
            substitute(
                "alloc::raw_vec::RawVec<T,A>::grow_one",
                "grow_one<app::Bar, alloc::alloc::Global>"
            )
            .unwrap(),
            "alloc::raw_vec::RawVec<app::Bar, alloc::alloc::Global>::grow_one"
        );
        assert_eq!(
            substitute(
                "<alloc::vec::Vec<T,A> as alloc::vec::spec_extend::SpecExtend<&T,core::slice::iter::Iter<T>>>::spec_extend",
                "spec_extend<(u64, app::Foo), alloc::alloc::Global>"
            )
            .unwrap(),
            "<alloc::vec::Vec<(u64, app::Foo), alloc::alloc::Global> as alloc::vec::spec_extend::SpecExtend<&T,core::slice::iter::Iter<T>>>::spec_extend"
        );
        // Nothing to replace, or not enough values.
        assert_eq!(
            substitute("<alloc::boxed::Box<app::Foo>>::new", "new<app::Foo>"),
            None
        );
        assert_eq!(
            substitute("alloc::raw_vec::RawVec<T,A>::grow_one", "grow_one<u8>"),
            None
        );
        // A path segment that happens to equal a parameter is left alone.
        assert_eq!(
            replace_parameters("T::Output, T", &[("T", "u8")]),
            "u8::Output, u8"
        );
        assert_eq!(replace_parameters("a::T", &[("T", "u8")]), "a::T");
    }

    #[test]
    fn default_arguments_are_left_out() {
        assert_eq!(
            type_with_args(
                "std::collections::hash::map::HashMap",
                &["u64", "app::Foo", "std::hash::random::RandomState"],
                &["std::hash::random::RandomState"]
            ),
            "std::collections::hash::map::HashMap<u64, app::Foo>"
        );
        assert_eq!(
            type_with_args(
                "alloc::sync::Arc",
                &["app::Baz", "alloc::alloc::Global"],
                &[]
            ),
            "alloc::sync::Arc<app::Baz>"
        );
    }

    #[test]
    fn names_are_normalized_like_type_name() {
        assert_eq!(
            normalize("[alloc::boxed::Box<app::Foo, alloc::alloc::Global>]"),
            "[alloc::boxed::Box<app::Foo>]"
        );
        assert_eq!(
            normalize(
                "alloc::sync::Arc<std::sync::Mutex<alloc::vec::Vec<u8,alloc::alloc::Global>>,alloc::alloc::Global>"
            ),
            "alloc::sync::Arc<std::sync::Mutex<alloc::vec::Vec<u8>>>"
        );
        assert_eq!(
            normalize(
                "[std::collections::hash::map::HashMap<u64, app::Foo, std::hash::random::RandomState>]"
            ),
            "[std::collections::hash::map::HashMap<u64, app::Foo>]"
        );
        assert_eq!(
            normalize("hashbrown::map::HashMap<u64, app::Foo, std::hash::random::RandomState>"),
            "hashbrown::map::HashMap<u64, app::Foo, std::hash::random::RandomState>"
        );
        assert_eq!(
            normalize("alloc::boxed::Box<dyn core::ops::function::Fn(u8) -> u8>"),
            "alloc::boxed::Box<dyn core::ops::function::Fn(u8) -> u8>"
        );
        assert_eq!(normalize("(u64, [u8; 4])"), "(u64, [u8; 4])");
        assert_eq!(
            normalize("<app::Foo as app::Tr>::Out"),
            "<app::Foo as app::Tr>::Out"
        );
    }

    #[test]
    fn pointer_free_types() {
        for name in [
            "u8",
            "[u64]",
            "alloc::string::String",
            "[(u32, f64)]",
            "[[u8; 16]]",
            "str",
        ] {
            assert!(is_pointer_free(name), "{name}");
        }
        for name in [
            "app::Foo",
            "[alloc::string::String]",
            "[&str]",
            "(u8, app::Foo)",
            "[*const u8]",
        ] {
            assert!(!is_pointer_free(name), "{name}");
        }
    }
}
