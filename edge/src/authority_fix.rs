//! etcdctl 3.4 (clientv3 3.4's passthrough dialer) sends an endpoint given as
//! `http://127.0.0.1:2379` with that whole URL as the HTTP/2 `:authority`. grpc-go's server takes
//! it; the h2 crate under tonic resets the stream as malformed (PROTOCOL_ERROR), so `etcdctl
//! --endpoints http://…` and every `--cluster` command (which dials the members' client URLs)
//! failed against actcd. This reader sits between the socket (or its TLS) and h2 and strips the
//! scheme from a literal `:authority` before h2 parses it. Nothing else is touched.
//!
//! ```text
//!  client preface (24 bytes) ─ passed through
//!  frame: length(3) type(1) flags(1) stream(4) payload
//!     type HEADERS: payload buffered whole, then
//!        [pad length] [priority(5)] header block [padding]
//!        header block, HPACK fields in order: the first literal whose name is static entry 1
//!        (:authority) gets its value decoded (Huffman or raw) and, if it starts with
//!        `http://` or `https://`, re-encoded raw without it; the frame length follows
//!     any other type: header and payload passed through as they arrive
//! ```
//!
//! Only the literal form needs it: the encoder enters the value into its dynamic table and
//! refers to it by index afterwards, and h2's table then holds the stripped value. The shorter
//! entry makes h2's table evict later than the client's does, which is harmless: the client
//! refers only to entries it still holds, and those keep their indexes. Anything the reader
//! cannot parse is passed on unchanged for h2 to judge.

use bytes::BytesMut;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 0x1;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// HPACK's static table entry 1.
const AUTHORITY: u64 = 1;

/// Where the reader is in the client's byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Within the client preface: this many bytes of it seen.
    Preface(usize),
    /// At a frame header.
    Frame,
    /// Passing through this many payload bytes of a frame that is not rewritten.
    Payload(usize),
    /// Not HTTP/2 as expected, or the authority was fixed: everything passes through.
    Through,
}

/// The rewriting state of one connection's incoming bytes.
#[derive(Debug)]
pub struct AuthorityFix {
    state: State,
    /// Bytes read but not yet handed on (a frame header or a HEADERS payload in pieces).
    pending: BytesMut,
}

impl Default for AuthorityFix {
    fn default() -> Self {
        Self { state: State::Preface(0), pending: BytesMut::new() }
    }
}

impl AuthorityFix {
    /// Takes bytes read from the client and appends to `out` what may go on to h2 now (all of
    /// it but an incomplete frame header or HEADERS frame, which waits for the rest).
    pub fn feed(&mut self, mut input: &[u8], out: &mut BytesMut) {
        loop {
            match self.state {
                State::Through => {
                    out.extend_from_slice(&self.pending.split());
                    out.extend_from_slice(input);
                    return;
                }
                State::Payload(left) => {
                    let take = left.min(input.len());
                    if take == 0 {
                        return;
                    }
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    self.state = if take == left { State::Frame } else { State::Payload(left - take) };
                }
                State::Preface(seen) => {
                    let take = (PREFACE.len() - seen).min(input.len());
                    if take == 0 {
                        return;
                    }
                    if input[..take] != PREFACE[seen..seen + take] {
                        self.state = State::Through;
                        continue;
                    }
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    self.state =
                        if seen + take == PREFACE.len() { State::Frame } else { State::Preface(seen + take) };
                }
                State::Frame => {
                    let take = 9usize.saturating_sub(self.pending.len()).min(input.len());
                    self.pending.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if self.pending.len() < 9 {
                        return;
                    }
                    let length = (usize::from(self.pending[0]) << 16)
                        | (usize::from(self.pending[1]) << 8)
                        | usize::from(self.pending[2]);
                    if self.pending[3] != HEADERS {
                        out.extend_from_slice(&self.pending.split());
                        self.state = if length == 0 { State::Frame } else { State::Payload(length) };
                        continue;
                    }
                    let take = (9 + length - self.pending.len()).min(input.len());
                    self.pending.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if self.pending.len() < 9 + length {
                        return;
                    }
                    let mut frame = self.pending.split();
                    let head = frame.split_to(9);
                    let flags = head[4];
                    match fix_headers(&frame, flags) {
                        Some(payload) => {
                            let len = payload.len();
                            out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8]);
                            out.extend_from_slice(&head[3..]);
                            out.extend_from_slice(&payload);
                        }
                        None => {
                            out.extend_from_slice(&head);
                            out.extend_from_slice(&frame);
                        }
                    }
                }
            }
        }
    }
}

/// The HEADERS payload with its `:authority` scheme stripped, or `None` to leave it alone.
fn fix_headers(payload: &[u8], flags: u8) -> Option<Vec<u8>> {
    let mut start = 0;
    let pad = if flags & PADDED != 0 {
        start = 1;
        usize::from(*payload.first()?)
    } else {
        0
    };
    if flags & PRIORITY != 0 {
        start += 5;
    }
    let end = payload.len().checked_sub(pad)?;
    let block = payload.get(start..end)?;
    let (at, len, value) = find_authority(block)?;
    let host = value.strip_prefix(b"http://").or_else(|| value.strip_prefix(b"https://"))?;
    let mut fixed = Vec::with_capacity(payload.len());
    fixed.extend_from_slice(&payload[..start]);
    fixed.extend_from_slice(&block[..at]);
    encode_int(host.len() as u64, 7, 0, &mut fixed);
    fixed.extend_from_slice(host);
    fixed.extend_from_slice(&block[at + len..]);
    fixed.extend_from_slice(&payload[end..]);
    Some(fixed)
}

/// The first literal `:authority` value in an HPACK block: where its string starts, how many
/// bytes the string takes, and its decoded bytes.
fn find_authority(block: &[u8]) -> Option<(usize, usize, Vec<u8>)> {
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        let prefix = match first {
            b if b & 0x80 != 0 => {
                // Indexed field: nothing literal.
                at += decode_int(&block[at..], 7)?.1;
                continue;
            }
            b if b & 0xc0 == 0x40 => 6,
            b if b & 0xe0 == 0x20 => {
                // Dynamic table size update.
                at += decode_int(&block[at..], 5)?.1;
                continue;
            }
            _ => 4,
        };
        let (name, used) = decode_int(&block[at..], prefix)?;
        at += used;
        if name == 0 {
            at += string(&block[at..])?.1;
        }
        let (value, used) = string(&block[at..])?;
        if name == AUTHORITY {
            return Some((at, used, value));
        }
        at += used;
    }
    None
}

/// An HPACK string: its bytes if they may start with a scheme (decoded when Huffman-coded),
/// empty otherwise, and the bytes it took.
fn string(bytes: &[u8]) -> Option<(Vec<u8>, usize)> {
    let huffman = bytes.first()? & 0x80 != 0;
    let (len, used) = decode_int(bytes, 7)?;
    let end = used.checked_add(usize::try_from(len).ok()?)?;
    let raw = bytes.get(used..end)?;
    let value = match (huffman, raw.first()) {
        // Huffman's `h` is the 6 bits 100111: anything else cannot be `http…` (most authorities,
        // and every one that tonic and grpc-go send, are decoded never).
        (true, Some(first)) if first & 0xfc == 0x9c => {
            hpack::huffman::HuffmanDecoder::new().decode(raw).ok()?
        }
        (false, Some(b'h')) => raw.to_vec(),
        _ => Vec::new(),
    };
    Some((value, end))
}

/// An HPACK integer with an `n`-bit prefix: its value and the bytes it took.
fn decode_int(bytes: &[u8], n: u8) -> Option<(u64, usize)> {
    let max = (1u64 << n) - 1;
    let mut value = u64::from(*bytes.first()?) & max;
    if value < max {
        return Some((value, 1));
    }
    let mut shift = 0;
    for (i, byte) in bytes.iter().enumerate().skip(1) {
        value = value.checked_add(u64::from(byte & 0x7f).checked_shl(shift)?)?;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
        shift += 7;
        if shift > 56 {
            return None;
        }
    }
    None
}

/// Writes an HPACK integer with an `n`-bit prefix, `flags` in the bits above it.
fn encode_int(value: u64, n: u8, flags: u8, out: &mut Vec<u8>) {
    let max = (1u64 << n) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest as u8 & 0x7f) | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::{decode_int, encode_int, AuthorityFix, PREFACE};

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len();
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// Feeds `input` in pieces of `step` bytes.
    fn run(input: &[u8], step: usize) -> Vec<u8> {
        let mut fix = AuthorityFix::default();
        let mut out = BytesMut::new();
        for piece in input.chunks(step) {
            fix.feed(piece, &mut out);
        }
        out.to_vec()
    }

    /// A HEADERS block: `:method: POST` (indexed 3), `:authority` as a literal with
    /// incremental indexing of static name 1 and a raw value, `:path` literal without indexing.
    fn block(authority: &[u8]) -> Vec<u8> {
        let mut b = vec![0x83, 0x41, authority.len() as u8];
        b.extend_from_slice(authority);
        b.extend_from_slice(&[0x04, 0x05]);
        b.extend_from_slice(b"/a/b1");
        b
    }

    #[test]
    fn a_scheme_in_the_authority_is_stripped_and_nothing_else_changes() {
        let data = frame(0x0, 0x1, 1, b"grpc message bytes");
        let settings = frame(0x4, 0x0, 0, &[0, 3, 0, 0, 0, 100]);
        let mut input = PREFACE.to_vec();
        input.extend(&settings);
        input.extend(frame(0x1, 0x4, 1, &block(b"http://127.0.0.1:2379")));
        input.extend(&data);
        let mut expected = PREFACE.to_vec();
        expected.extend(&settings);
        expected.extend(frame(0x1, 0x4, 1, &block(b"127.0.0.1:2379")));
        expected.extend(&data);
        for step in [1, 2, 7, 9, 10, 64, 4096] {
            assert_eq!(run(&input, step), expected, "in pieces of {step}");
        }
        // A padded, prioritised HEADERS frame keeps its pad length, priority and padding.
        let mut padded = vec![3, 0, 0, 0, 0, 16];
        padded.extend(block(b"https://h:1"));
        padded.extend([0, 0, 0]);
        let mut fixed = vec![3, 0, 0, 0, 0, 16];
        fixed.extend(block(b"h:1"));
        fixed.extend([0, 0, 0]);
        let input = [PREFACE, &frame(0x1, 0x2c, 3, &padded)].concat();
        assert_eq!(run(&input, 5), [PREFACE, &frame(0x1, 0x2c, 3, &fixed)].concat());
    }

    #[test]
    fn huffman_values_and_plain_authorities_pass_unchanged_and_so_does_what_is_not_http2() {
        // RFC 7541 C.4.1: `:authority: www.example.com`, Huffman-coded.
        let rfc = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4,
            0xff,
        ];
        let input = [PREFACE, &frame(0x1, 0x5, 1, &rfc)].concat();
        assert_eq!(run(&input, 3), input);
        let plain = [PREFACE, &frame(0x1, 0x4, 1, &block(b"127.0.0.1:2379"))].concat();
        assert_eq!(run(&plain, 1), plain);
        let http1 = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(run(&http1, 4), http1);
        // A truncated block is left for h2 to refuse.
        let broken = [PREFACE, &frame(0x1, 0x4, 1, &[0x41, 0x7f])].concat();
        assert_eq!(run(&broken, 2), broken);
    }

    #[test]
    fn hpack_integers_read_back_across_their_prefix_boundary() {
        for n in [4u8, 5, 6, 7] {
            let max = (1u64 << n) - 1;
            for value in [0, max - 1, max, max + 1, max + 127, max + 128, 1 << 20, u64::from(u32::MAX)] {
                let mut out = Vec::new();
                encode_int(value, n, 0, &mut out);
                assert_eq!(decode_int(&out, n), Some((value, out.len())), "{value} with a {n}-bit prefix");
            }
        }
        // An integer cut off after its continuation bytes, and one too long for 64 bits.
        assert_eq!(decode_int(&[0x7f, 0x80], 7), None);
        assert_eq!(decode_int(&[0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01], 7), None);
    }

    #[test]
    fn a_long_authority_keeps_a_length_of_more_than_one_byte() {
        let host = format!("{}:2379", "h".repeat(200));
        let literal = |value: &[u8]| {
            let mut b = vec![0x83, 0x41];
            encode_int(value.len() as u64, 7, 0, &mut b);
            b.extend_from_slice(value);
            b
        };
        let input = [PREFACE, &frame(0x1, 0x4, 1, &literal(format!("http://{host}").as_bytes()))].concat();
        let expected = [PREFACE, &frame(0x1, 0x4, 1, &literal(host.as_bytes()))].concat();
        for step in [1, 13, 4096] {
            assert_eq!(run(&input, step), expected, "in pieces of {step}");
        }
    }
}
