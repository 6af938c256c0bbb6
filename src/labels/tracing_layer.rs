//! The `tracing` integration (cargo feature `tracing`): a `tracing_subscriber` layer that makes
//! the entered span the current labels, so a program whose requests and tasks are already
//! instrumented gets its heap attributed by span with one more layer.

#![forbid(unsafe_code)]

use super::{Labels, replace};
use crate::guard::untracked;
use std::cell::RefCell;
use std::fmt;
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Metadata, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A `tracing_subscriber` layer that labels what a thread allocates while a span is entered
/// with the span's name (key `span`) and the span's fields listed with
/// [`LabelsLayer::with_fields`], merged over the labels of the spans (and of the code) around
/// it: inner spans override the keys they share with outer ones.
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt;
///
/// let subscriber = tracing_subscriber::registry()
///     .with(memprof::LabelsLayer::new().with_fields(&["tenant"]));
/// tracing_core::dispatcher::set_global_default(tracing_core::Dispatch::new(subscriber)).unwrap();
/// ```
#[derive(Clone, Debug, Default)]
pub struct LabelsLayer {
    /// The fields that become labels, besides the span's name.
    fields: Vec<String>,
}

impl LabelsLayer {
    /// A layer that labels with the span's name only.
    pub fn new() -> LabelsLayer {
        LabelsLayer::default()
    }

    /// This layer, also labelling with the span fields `fields` (by name), those a span has:
    /// a field's value is its text (`Debug` for values that are not strings or numbers).
    pub fn with_fields(mut self, fields: &[&str]) -> LabelsLayer {
        self.fields.extend(fields.iter().map(|f| (*f).to_owned()));
        self
    }

    /// The pairs of a span: its name, and the fields listed that `values` record.
    fn pairs(&self, metadata: &Metadata<'_>, record: impl FnOnce(&mut FieldValues<'_>)) -> Pairs {
        let mut values = FieldValues {
            wanted: &self.fields,
            found: Vec::new(),
        };
        record(&mut values);
        let mut pairs = vec![("span".to_owned(), metadata.name().to_owned())];
        pairs.extend(values.found);
        Pairs(pairs)
    }
}

/// A span's label pairs, kept in its extensions; its interned set beside them.
struct Pairs(Vec<(String, String)>);

/// A span's interned labels, kept in its extensions.
struct SpanLabels(Labels);

impl Pairs {
    fn labels(&self) -> Labels {
        let pairs: Vec<(&str, &str)> = self
            .0
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Labels::new(&pairs)
    }
}

/// Collects the values of the wanted fields.
struct FieldValues<'a> {
    wanted: &'a [String],
    found: Vec<(String, String)>,
}

impl FieldValues<'_> {
    fn keep(&mut self, field: &Field, value: String) {
        if self.wanted.iter().any(|w| w == field.name()) {
            self.found.retain(|(k, _)| k != field.name());
            self.found.push((field.name().to_owned(), value));
        }
    }
}

impl Visit for FieldValues<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, value.to_owned());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.keep(field, value.to_string());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.keep(field, value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.keep(field, value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.keep(field, format!("{value:?}"));
    }
}

thread_local! {
    /// The labels current before each span this thread entered, innermost last.
    static ENTERED: RefCell<Vec<Labels>> = const { RefCell::new(Vec::new()) };
}

impl<S> tracing_subscriber::Layer<S> for LabelsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        untracked(|| {
            let Some(span) = ctx.span(id) else { return };
            let pairs = self.pairs(attrs.metadata(), |v| attrs.record(v));
            let labels = pairs.labels();
            let mut extensions = span.extensions_mut();
            extensions.insert(pairs);
            extensions.insert(SpanLabels(labels));
        });
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        untracked(|| {
            let Some(span) = ctx.span(id) else { return };
            let mut extensions = span.extensions_mut();
            let Some(pairs) = extensions.get_mut::<Pairs>() else {
                return;
            };
            let mut found = FieldValues {
                wanted: &self.fields,
                found: Vec::new(),
            };
            values.record(&mut found);
            if found.found.is_empty() {
                return;
            }
            for (key, value) in found.found {
                pairs.0.retain(|(k, _)| *k != key);
                pairs.0.push((key, value));
            }
            let labels = pairs.labels();
            extensions.replace(SpanLabels(labels));
        });
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        untracked(|| {
            let Some(span) = ctx.span(id) else { return };
            let labels = match span.extensions().get::<SpanLabels>() {
                Some(labels) => labels.0,
                None => return,
            };
            // Restored by this layer's `on_exit`: the labels current before go on this thread's
            // stack of entered spans.
            let previous = Labels(labels.merge_into_current());
            let _ = ENTERED.try_with(|entered| entered.borrow_mut().push(previous));
        });
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        untracked(|| {
            let Some(span) = ctx.span(id) else { return };
            if span.extensions().get::<SpanLabels>().is_none() {
                return;
            }
            if let Ok(Some(previous)) = ENTERED.try_with(|entered| entered.borrow_mut().pop()) {
                replace(previous.0);
            }
        });
    }
}
