//! The protobuf codec every generated client and server uses: prost's, with small initial
//! buffers. tonic gives each RPC an encode and a decode buffer of 8 KiB by default; on a server
//! holding thousands of idle watch streams those two buffers are most of a stream's memory.
//! Buffers still grow to fit any message; they just start small.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Initial encode/decode buffer per RPC, in bytes (tonic's default is 8 KiB). None: both grow
/// on the first message, so an idle stream holds no buffer (512 bytes a stream at 256).
const INITIAL_BUFFER: usize = 0;
/// When an encoder yields to let a large response go out (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// prost's codec with [`INITIAL_BUFFER`]-byte buffers.
#[derive(Debug, Clone, Copy)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

fn settings() -> BufferSettings {
    BufferSettings::new(INITIAL_BUFFER, YIELD_THRESHOLD)
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
