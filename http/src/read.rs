//! The reading thread: accepts connections and reads their request heads, all at once and
//! without blocking on any, and hands each whole one to a worker.

use crate::work::{Job, MAX_HEADERS, Server};
use crate::write::write_response;
use crate::{Handler, Response};
use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// How long the reading thread sleeps when no connection it holds had anything to read.
const TICK: Duration = Duration::from_millis(2);

/// How long it waits before accepting again after a failure with nothing of its own to free.
const PAUSE: Duration = Duration::from_millis(100);

/// How long it waits before accepting again after closing a connection to free a descriptor.
const SHORT_PAUSE: Duration = Duration::from_millis(5);

/// A connection whose request head is being read.
struct Reading {
    stream: TcpStream,
    buffer: Vec<u8>,
    length: usize,
    /// When it must be whole.
    deadline: Instant,
}

/// What one read of a connection gave.
enum Step {
    /// Nothing more for now.
    Wait,
    /// The head is whole: its length.
    Head(usize),
    /// The client went away.
    Gone,
    /// The head cannot be read: the status and why.
    Refuse(u16, &'static str),
}

impl Reading {
    /// Reads what the client sent so far.
    fn step(&mut self) -> Step {
        loop {
            if self.length == self.buffer.len() {
                return Step::Refuse(431, "the request head is too long");
            }
            match self.stream.read(&mut self.buffer[self.length..]) {
                Ok(0) => return Step::Gone,
                Ok(n) => self.length += n,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return if Instant::now() >= self.deadline {
                        Step::Refuse(408, "the request took too long")
                    } else {
                        Step::Wait
                    };
                }
                Err(_) => return Step::Gone,
            }
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            match httparse::Request::new(&mut headers).parse(&self.buffer[..self.length]) {
                Ok(httparse::Status::Complete(head)) => return Step::Head(head),
                Ok(httparse::Status::Partial) => {}
                Err(httparse::Error::TooManyHeaders) => {
                    return Step::Refuse(431, "too many headers");
                }
                Err(_) => return Step::Refuse(400, "not an HTTP request"),
            }
        }
    }
}

/// The reading thread of `server`, until its workers are gone.
pub(crate) fn read_heads<H: Handler>(
    listener: &TcpListener,
    jobs: &SyncSender<Job>,
    server: &Server<H>,
) {
    let options = &server.options;
    let held = options.reading.max(1);
    let mut reading: VecDeque<Reading> = VecDeque::new();
    let mut ready: VecDeque<Job> = VecDeque::new();
    loop {
        while let Some(job) = ready.pop_front() {
            match jobs.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(job)) => {
                    ready.push_front(job);
                    break;
                }
                Err(TrySendError::Disconnected(_)) => return,
            }
        }
        // With nothing in hand, wait for a connection; otherwise only look.
        let idle = reading.is_empty() && ready.is_empty();
        if listener.set_nonblocking(!idle).is_err() {
            std::thread::sleep(PAUSE);
            continue;
        }
        let mut progressed = false;
        while ready.len() < held {
            match listener.accept() {
                Ok((stream, _)) => {
                    progressed = true;
                    if stream.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if reading.len() + ready.len() >= held {
                        // The oldest unread head goes, whoever sends it slowly.
                        reading.pop_front();
                    }
                    reading.push_back(Reading {
                        stream,
                        buffer: vec![0; options.head_limit],
                        length: 0,
                        deadline: Instant::now() + options.read_deadline,
                    });
                    if listener.set_nonblocking(true).is_err() {
                        break;
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                // Out of descriptors: the oldest unread connection makes room for the next, so
                // that idle connections cannot keep the others out for longer than a pause.
                Err(error) if out_of_descriptors(&error) && !reading.is_empty() => {
                    reading.pop_front();
                    std::thread::sleep(SHORT_PAUSE);
                    break;
                }
                // Out of memory, or of descriptors held elsewhere: let the others finish before
                // trying again.
                Err(_) => {
                    std::thread::sleep(PAUSE);
                    break;
                }
            }
        }
        let mut index = 0;
        while index < reading.len() {
            let before = reading[index].length;
            let step = reading[index].step();
            progressed |= reading[index].length != before;
            if let Step::Wait = step {
                index += 1;
                continue;
            }
            let Some(Reading {
                mut stream,
                mut buffer,
                ..
            }) = reading.remove(index)
            else {
                break;
            };
            match step {
                Step::Head(length) => {
                    buffer.truncate(length);
                    ready.push_back(Job {
                        stream,
                        head: buffer,
                    });
                }
                Step::Refuse(status, why) => {
                    let response: Response = server.handler.refuse(status, why);
                    // Small enough for the socket's buffer, and the stream does not block:
                    // written now or never.
                    let _ = write_response(&mut stream, &response, false, options);
                    let _ = stream.shutdown(Shutdown::Write);
                }
                Step::Wait | Step::Gone => {}
            }
        }
        let holding = !(reading.is_empty() && ready.is_empty());
        if holding && !progressed {
            std::thread::sleep(TICK);
        }
    }
}

/// Whether an accept failed for want of a descriptor, of the process's or of the system's.
fn out_of_descriptors(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(EMFILE | ENFILE))
}

/// Too many open files in the process (`EMFILE`, Linux's number).
const EMFILE: i32 = 24;
/// Too many open files in the system (`ENFILE`, Linux's number).
const ENFILE: i32 = 23;
