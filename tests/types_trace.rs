//! Lifetime tallies: objects of each type created over the whole run, freed or not, and the
//! contexts that created one type, most first, with a minimum count.

#[global_allocator]
static GLOBAL: memprof::MemProf = memprof::MemProf::new();

struct Foo {
    id: u64,
}

// One block per `Foo`: the objects counted are the boxes.
#[allow(clippy::vec_box)]
#[inline(never)]
fn make_many() -> Vec<Box<Foo>> {
    (0..1000).map(|id| Box::new(Foo { id })).collect()
}

#[allow(clippy::vec_box)]
#[inline(never)]
fn make_few() -> Vec<Box<Foo>> {
    // Written differently from `make_many`, so an optimizer cannot merge the two into one.
    let mut foos = Vec::with_capacity(300);
    for id in 0..300 {
        foos.push(Box::new(Foo { id }));
    }
    std::hint::black_box(foos)
}

fn log(f: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
    let mut out = Vec::new();
    f(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn objects_created_over_the_run_and_where() {
    let foo = std::any::type_name::<Foo>();
    let sum: u64 = make_many().iter().chain(&make_few()).map(|f| f.id).sum();
    assert_eq!(sum, 999 * 500 + 299 * 150);
    // Every `Foo` is freed by now; the live counts no longer know them, the tallies do.
    let counts = log(memprof::log_object_counts);
    assert!(!counts.contains(&format!("\t{foo}\n")), "{counts}");
    let tallies = log(memprof::log_object_tallies);
    assert!(tallies.contains(&format!("\n1300\t{foo}\n")), "{tallies}");

    let contexts = log(|out| memprof::log_type_contexts(foo, 1, out));
    let lines: Vec<&str> = contexts.lines().collect();
    assert_eq!(lines.first(), Some(&"2"), "{contexts}");
    assert!(
        lines[1].starts_with("1000\t") && lines[1].contains("make_many"),
        "{contexts}"
    );
    assert!(
        lines[2].starts_with("300\t") && lines[2].contains("make_few"),
        "{contexts}"
    );

    let frequent = log(|out| memprof::log_type_contexts(foo, 500, out));
    assert_eq!(frequent.lines().count(), 2, "{frequent}");
    assert!(frequent.starts_with("1\n1000\t"), "{frequent}");
}
