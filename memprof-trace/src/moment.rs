//! Moments of a run that a trace is replayed to, and where a replay stopped.

/// A moment of the run to replay a trace to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Moment {
    /// After every event at or before this many nanoseconds since the trace started.
    Time(u64),
    /// Just after the event that took the live bytes to their maximum (the first such event).
    Peak,
    /// After the last event.
    End,
    /// At the first marker with this label (`memprof::mark`).
    Marker(String),
    /// After this many events of the replay (a [`Position::events`]).
    Events(u64),
}

impl std::str::FromStr for Moment {
    type Err = String;

    /// `peak`, `end`, `marker:LABEL`, or seconds since the trace started (`1.5`).
    fn from_str(text: &str) -> Result<Moment, String> {
        match text {
            "peak" => Ok(Moment::Peak),
            "end" => Ok(Moment::End),
            _ => {
                if let Some(label) = text.strip_prefix("marker:") {
                    return Ok(Moment::Marker(label.to_owned()));
                }
                match text.parse::<f64>() {
                    Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
                        Ok(Moment::Time((seconds * 1e9).round() as u64))
                    }
                    _ => Err(format!(
                        "{text:?} is not a moment: SECONDS, peak, end or marker:LABEL"
                    )),
                }
            }
        }
    }
}

/// Where a replay stopped, and the heap there.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Position {
    /// Nanoseconds since the trace started, of the last event replayed.
    pub time: u64,
    /// Events replayed (a reallocation counts as a free and an allocation).
    pub events: u64,
    /// Live bytes there (recorded bytes, not weighted by sampling).
    pub live_bytes: u64,
    /// Whether the moment asked for was found (a marker, or a time within the trace).
    pub found: bool,
}
