//! Framing an SSE byte stream into events ([`Framer`]): each event's name and data read as the WHATWG algorithm
//! ("interpreting an event stream") reads them, and with them the bytes the upstream wrote for the event, so that
//! an event the gateway does not change goes to the client as those bytes, not decoded into new strings and
//! written again. No SSE crate gives an event's bytes (sse-parse, sse-core and eventsource-stream give its fields
//! as new strings), so the framing is here; sse-parse is the reference its property test holds it to.
//!
//! Lines end at LF, CR or CR LF; a blank line ends an event; a line that starts with `:` is a comment; `event`
//! names the event and each `data` adds a line to its data (one space after the colon is dropped); `id`, `retry`
//! and unknown fields stay in the bytes and are otherwise ignored (the gateway never reconnects). A block with no
//! `data` is no event. A UTF-8 byte order mark at the stream's start is dropped. A name or data that is not UTF-8
//! reads with U+FFFD in place of what is not, and such an event's bytes are written again from what was read.
//!
//! Every byte is searched for a line end once, whatever the chunking; an event's bytes are bounded by the
//! framer's limit, so a hostile upstream can neither grow the buffer without end nor make the reading quadratic.

use bytes::{Buf, Bytes, BytesMut};
use bytestring::ByteString;
use std::ops::Range;

/// One event of an SSE stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The name its last `event` field gave (empty when it gave none, or gave an empty one).
    pub event: ByteString,
    /// Its `data` fields' values, joined by `\n`.
    pub data: ByteString,
    /// The event as the upstream wrote it, its blank line included (written again when it was not UTF-8).
    pub raw: Bytes,
}

impl Frame {
    /// An event named `event` (none when empty) with `data`, written as SSE.
    pub fn new(event: &str, data: &str) -> Frame {
        let mut raw = Vec::with_capacity(event.len() + data.len() + 16);
        write(&mut raw, event, data.as_bytes());
        Frame { event: event.into(), data: data.into(), raw: raw.into() }
    }
}

/// An event (or the part of one read so far) longer than the framer's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong;

/// The UTF-8 byte order mark, dropped at a stream's start.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The data lines of the event being read.
#[derive(Debug)]
enum Data {
    None,
    /// One line, where it lies in the buffer.
    One(Range<usize>),
    /// Several, joined.
    Joined(Vec<u8>),
}

/// A sans-IO SSE framer: [`Framer::feed`] it bytes, take whole events with [`Framer::next_event`].
#[derive(Debug)]
pub struct Framer {
    /// The event being read (from its first byte) and whatever came after it.
    buf: BytesMut,
    /// Where the event's next line starts in `buf`.
    line: usize,
    /// `buf[line..searched]` holds no line end.
    searched: usize,
    /// The last line ended with a CR at the end of the bytes then fed: a LF first in what comes next is its end.
    skip_lf: bool,
    /// The stream's start was checked for a byte order mark.
    started: bool,
    /// Where the value of the event's last `event` field lies in `buf`.
    event: Option<Range<usize>>,
    data: Data,
    /// The most bytes one event may take.
    max: usize,
}

impl Framer {
    /// A framer of events of at most `max` bytes each.
    pub fn new(max: usize) -> Framer {
        Framer {
            buf: BytesMut::new(),
            line: 0,
            searched: 0,
            skip_lf: false,
            started: false,
            event: None,
            data: Data::None,
            max,
        }
    }

    /// Adds the stream's next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
        if !self.started && (self.buf.len() >= BOM.len() || !BOM.starts_with(&self.buf)) {
            self.started = true;
            if self.buf.starts_with(BOM) {
                self.buf.advance(BOM.len());
            }
        }
    }

    /// The next whole event in the bytes fed; [`TooLong`] when an event is (or has already grown) longer than the
    /// limit. A block left without its blank line when the stream ends is no event.
    pub fn next_event(&mut self) -> Option<Result<Frame, TooLong>> {
        if !self.started {
            return None;
        }
        loop {
            if self.skip_lf {
                let &first = self.buf.get(self.line)?;
                self.skip_lf = false;
                if first == b'\n' && self.line == 0 {
                    // The LF of a block's last line: not the next block's.
                    self.buf.advance(1);
                } else if first == b'\n' {
                    self.line += 1;
                    self.searched = self.searched.max(self.line);
                }
            }
            let Some(at) = memchr::memchr2(b'\n', b'\r', self.buf.get(self.searched..).unwrap_or_default()) else {
                self.searched = self.buf.len();
                return (self.buf.len() > self.max).then_some(Err(TooLong));
            };
            let end = self.searched + at;
            let mut next = end + 1;
            if self.buf.get(end) == Some(&b'\r') {
                match self.buf.get(next) {
                    Some(b'\n') => next += 1,
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
            let line = self.line..end;
            (self.line, self.searched) = (next, next);
            if !line.is_empty() {
                self.field(line);
                continue;
            }
            if next > self.max {
                return Some(Err(TooLong));
            }
            let block = self.buf.split_to(next).freeze();
            (self.line, self.searched) = (0, 0);
            let event = self.event.take();
            match std::mem::replace(&mut self.data, Data::None) {
                Data::None => {}
                data => return Some(Ok(frame(block, event, data))),
            }
        }
    }

    /// Reads one line of an event (`line`, its place in the buffer: neither empty nor with its end).
    fn field(&mut self, line: Range<usize>) {
        let text = self.buf.get(line.clone()).unwrap_or_default();
        if text.first() == Some(&b':') {
            return;
        }
        let (name, mut value) = match memchr::memchr(b':', text) {
            Some(colon) => (&text[..colon], line.start + colon + 1..line.end),
            None => (text, line.end..line.end),
        };
        if self.buf.get(value.start) == Some(&b' ') && value.start < value.end {
            value.start += 1;
        }
        match name {
            b"event" => self.event = Some(value),
            b"data" => {
                self.data = match std::mem::replace(&mut self.data, Data::None) {
                    Data::None => Data::One(value),
                    Data::One(first) => {
                        let mut joined = Vec::with_capacity(first.len() + value.len() + 1);
                        joined.extend_from_slice(&self.buf[first]);
                        joined.push(b'\n');
                        joined.extend_from_slice(&self.buf[value]);
                        Data::Joined(joined)
                    }
                    Data::Joined(mut joined) => {
                        joined.push(b'\n');
                        joined.extend_from_slice(&self.buf[value]);
                        Data::Joined(joined)
                    }
                }
            }
            _ => {}
        }
    }
}

/// The event of `block` (its bytes), whose name and data lie where `event` and `data` say. Where they are not
/// UTF-8 they read as U+FFFD, and the event is written again from what was read (its other lines, ignored by every
/// reader, are not read). So is an event whose bytes begin with a byte order mark (the first byte of a line of an
/// unknown field): sent first in the client's stream, its reader would drop that mark as the stream's own and read
/// the line as another field.
fn frame(block: Bytes, event: Option<Range<usize>>, data: Data) -> Frame {
    let mut text = true;
    let mut read = |bytes: Bytes| {
        ByteString::try_from(bytes.clone()).unwrap_or_else(|_| {
            text = false;
            String::from_utf8_lossy(&bytes).into_owned().into()
        })
    };
    let event = event.map_or_else(ByteString::new, |range| read(block.slice(range)));
    let data = match data {
        Data::One(range) => read(block.slice(range)),
        Data::Joined(joined) => read(Bytes::from(joined)),
        Data::None => ByteString::new(),
    };
    if text && !block.starts_with(BOM) {
        return Frame { event, data, raw: block };
    }
    Frame::new(&event, &data)
}

/// Appends one event named `kind` (none when empty) whose data is `data` as it is, one `data:` line per line of
/// it: the one way every stream the gateway sends writes an event.
pub fn write(out: &mut Vec<u8>, kind: &str, data: &[u8]) {
    if !kind.is_empty() {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
    }
    // Lines found by `memchr`: splitting by a closure tested every byte (most data is one line).
    let mut rest = data;
    loop {
        let (line, more) = match memchr::memchr(b'\n', rest) {
            Some(at) => (&rest[..at], Some(&rest[at + 1..])),
            None => (rest, None),
        };
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
        match more {
            Some(more) => rest = more,
            None => break,
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Events read: (name or `message`, data), or the limit passed.
    type Read = Vec<Result<(String, String), TooLong>>;

    /// The events of `chunks`, and their bytes.
    fn framed(chunks: &[&[u8]], max: usize) -> (Read, Vec<u8>) {
        let mut framer = Framer::new(max);
        let (mut events, mut raw) = (Vec::new(), Vec::new());
        for chunk in chunks {
            framer.feed(chunk);
            while let Some(frame) = framer.next_event() {
                let Ok(frame) = frame else {
                    events.push(Err(TooLong));
                    return (events, raw);
                };
                raw.extend_from_slice(&frame.raw);
                let name = if frame.event.is_empty() { "message".to_string() } else { frame.event.to_string() };
                events.push(Ok((name, frame.data.to_string())));
            }
        }
        (events, raw)
    }

    /// What sse-parse reads of `bytes`.
    fn reference(bytes: &[u8]) -> Read {
        let mut parser = sse_parse::SseParser::new();
        parser.feed(bytes);
        std::iter::from_fn(|| parser.next_event()).map(|e| Ok((e.event, e.data))).collect()
    }

    #[test]
    fn events_are_read_and_kept_as_written() {
        let body =
            b"\xEF\xBB\xBFevent: add\r\ndata: first\r\ndata:second\r\nid: 7\r\n\r\n: keep-alive\n\ndata: {\"a\":1}\r\r";
        let (events, raw) = framed(&[body], 1 << 16);
        let want = [("add".to_string(), "first\nsecond".to_string()), ("message".to_string(), "{\"a\":1}".to_string())];
        assert_eq!(events, want.map(Ok));
        // The comment block is no event and is not kept; every other byte is, but the byte order mark.
        let mut expected = body[3..].to_vec();
        let comment = b": keep-alive\n\n";
        let at = expected.windows(comment.len()).position(|w| w == comment).unwrap_or_default();
        expected.drain(at..at + comment.len());
        assert_eq!(String::from_utf8_lossy(&raw), String::from_utf8_lossy(&expected));
    }

    #[test]
    fn bytes_that_are_not_text_are_written_again_as_read() {
        let (events, raw) = framed(&[b"event: x\xFFy\ndata: a\xC3\n\n"], 1 << 16);
        assert_eq!(events, [Ok(("x\u{FFFD}y".to_string(), "a\u{FFFD}".to_string()))]);
        assert_eq!(raw, "event: x\u{FFFD}y\ndata: a\u{FFFD}\n\n".as_bytes());
    }

    #[test]
    fn an_event_whose_bytes_begin_with_a_byte_order_mark_is_written_again() {
        // The mark after the stream's start begins an unknown field's line; at the start of the client's stream a
        // reader would drop it and read a `data` line (data "\n" instead of "").
        let (events, raw) = framed(&[b"\n\xEF\xBB\xBFdata\ndata:\n\n"], 1 << 16);
        assert_eq!(events, [Ok(("message".to_string(), String::new()))]);
        assert_eq!(raw, b"data: \n\n");
        assert_eq!(reference(&raw), events);
    }

    #[test]
    fn an_event_longer_than_the_limit_ends_the_framing_whatever_the_chunking() {
        let body = b"data: 0123456789\n\ndata: 01234567890123456789\n\ndata: x\n\n";
        let (whole, _) = framed(&[body], 24);
        assert_eq!(whole, [Ok(("message".to_string(), "0123456789".to_string())), Err(TooLong)]);
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(framed(&bytes, 24).0, whole);
        // A line with no end yet counts too: the framer never holds much more than the limit.
        let mut framer = Framer::new(24);
        framer.feed(&[b'x'; 25]);
        assert_eq!(framer.next_event(), Some(Err(TooLong)));
    }

    /// Bytes of an SSE stream, made of the pieces that matter to its reading.
    fn stream() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(&b"data"[..]),
            Just(&b"event"[..]),
            Just(&b"id"[..]),
            Just(&b":"[..]),
            Just(&b" "[..]),
            Just(&b"\n"[..]),
            Just(&b"\r"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"\n\n"[..]),
            Just(&b"x"[..]),
            Just(&b"{\"a\": 1}"[..]),
            Just(&b"\xEF\xBB\xBF"[..]),
            Just(&b"\xEF"[..]),
            Just(&b"\xFF"[..]),
            Just(&b"\xC3\xA9"[..]),
        ];
        proptest::collection::vec(piece, 0..60).prop_map(|pieces| pieces.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// The events read are sse-parse's, whatever the chunking; their bytes, read again, are the same events.
        #[test]
        fn events_are_read_as_the_reference_reads_them(bytes in stream(), cuts in proptest::collection::vec(0usize..200, 0..8)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.push(0);
            cuts.push(bytes.len());
            cuts.sort_unstable();
            let chunks: Vec<&[u8]> = cuts.windows(2).map(|w| &bytes[w[0]..w[1]]).collect();
            let (events, raw) = framed(&chunks, usize::MAX);
            prop_assert_eq!(&events, &reference(&bytes));
            prop_assert_eq!(&reference(&raw), &events);
        }
    }
}
