//! Messages between the processes of a launch: a tag byte, a length and the bytes, over TCP.
//! The messages are few and small (commands, statistics) or plain byte blocks (fields,
//! checkpoint data), so they are written field by field here rather than through a general
//! serialisation format.

use std::io::{Read, Write};
use std::net::TcpStream;

/// Largest message a peer may announce (a slab's fields or checkpoint data of a large grid fit;
/// a damaged length does not make the reader allocate without bound).
pub const MAX_MESSAGE: u64 = 1 << 40;

/// One connection to another process of the launch.
#[derive(Debug)]
pub struct Link {
    pub(crate) stream: TcpStream,
    /// The rank at the other end.
    pub peer: usize,
}

impl Link {
    /// A link over a connected stream (no delay on small messages).
    #[must_use]
    pub fn new(stream: TcpStream, peer: usize) -> Link {
        let _ = stream.set_nodelay(true);
        Link { stream, peer }
    }

    /// Send one message.
    ///
    /// # Errors
    /// The connection's error (the peer has gone).
    pub fn send(&self, tag: u8, payload: &[u8]) -> std::io::Result<()> {
        let mut s = &self.stream;
        let mut head = [0u8; 9];
        head[0] = tag;
        head[1..].copy_from_slice(&(payload.len() as u64).to_le_bytes());
        s.write_all(&head)?;
        s.write_all(payload)?;
        s.flush()
    }

    /// Receive one message: its tag and bytes.
    ///
    /// # Errors
    /// The connection's error; `UnexpectedEof` where the peer closed it; `InvalidData` for a
    /// length beyond [`MAX_MESSAGE`].
    pub fn recv(&self) -> std::io::Result<(u8, Vec<u8>)> {
        let mut s = &self.stream;
        let mut head = [0u8; 9];
        s.read_exact(&mut head)?;
        let len = u64::from_le_bytes(head[1..].try_into().unwrap_or_default());
        if len > MAX_MESSAGE {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a message of {len} bytes announced")));
        }
        let mut buf = vec![0u8; len as usize];
        s.read_exact(&mut buf)?;
        Ok((head[0], buf))
    }

    /// A second handle on the same connection (for a thread that watches it).
    ///
    /// # Errors
    /// The system's.
    pub fn watcher(&self) -> std::io::Result<TcpStream> {
        self.stream.try_clone()
    }
}

/// Writes the fields of a message.
#[derive(Default)]
pub struct Enc(pub Vec<u8>);

impl Enc {
    /// An empty message.
    #[must_use]
    pub fn new() -> Enc {
        Enc(Vec::new())
    }
    /// A whole number.
    pub fn u64(&mut self, v: u64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A float, bit for bit.
    pub fn f64(&mut self, v: f64) -> &mut Enc {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// A length, then the bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Enc {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
        self
    }
    /// A text.
    pub fn str(&mut self, s: &str) -> &mut Enc {
        self.bytes(s.as_bytes())
    }
}

/// Reads the fields of a message in the order [`Enc`] wrote them; every read is checked
/// against the message's end.
pub struct Dec<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    /// Read `b` from its start.
    #[must_use]
    pub fn new(b: &'a [u8]) -> Dec<'a> {
        Dec { b, pos: 0 }
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.b.len()).ok_or("a message ended early")?;
        let r = &self.b[self.pos..end];
        self.pos = end;
        Ok(r)
    }
    /// A whole number.
    ///
    /// # Errors
    /// The message ended early.
    pub fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "short")?))
    }
    /// A float.
    ///
    /// # Errors
    /// The message ended early.
    pub fn f64(&mut self) -> Result<f64, String> {
        Ok(f64::from_bits(self.u64()?))
    }
    /// A length, then that many bytes.
    ///
    /// # Errors
    /// The message ended early.
    pub fn bytes(&mut self) -> Result<&'a [u8], String> {
        let n = usize::try_from(self.u64()?).map_err(|_| "a length beyond memory")?;
        self.take(n)
    }
    /// A text.
    ///
    /// # Errors
    /// The message ended early or the text is not UTF-8.
    pub fn str(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "a message's text is not UTF-8".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_and_short_messages_are_refused() {
        let mut e = Enc::new();
        e.u64(7).f64(-2.5).str("rank 1").bytes(&[1, 2, 3]);
        let mut d = Dec::new(&e.0);
        assert_eq!(d.u64(), Ok(7));
        assert_eq!(d.f64(), Ok(-2.5));
        assert_eq!(d.str().as_deref(), Ok("rank 1"));
        assert_eq!(d.bytes(), Ok(&[1u8, 2, 3][..]));
        assert!(d.u64().is_err());
        // A length beyond the message.
        let mut e = Enc::new();
        e.u64(1000);
        assert!(Dec::new(&e.0).bytes().is_err());
    }

    #[test]
    fn messages_cross_a_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let a = Link::new(TcpStream::connect(addr).unwrap(), 0);
            a.send(3, b"hello").unwrap();
            a.send(4, &vec![9u8; 1 << 20]).unwrap();
        });
        let b = Link::new(l.accept().unwrap().0, 1);
        assert_eq!(b.recv().unwrap(), (3, b"hello".to_vec()));
        let (tag, big) = b.recv().unwrap();
        assert_eq!((tag, big.len(), big[12345]), (4, 1 << 20, 9));
        t.join().unwrap();
        assert_eq!(b.recv().unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
